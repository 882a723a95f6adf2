"""The session row as a writer holds it under its lock, and the parameters its reads take.

A plain value: `rows.session_row` decodes it, `sessions` locks and updates it.
"""

from __future__ import annotations

from ..engine.prompt import PromptCounters
from ..engine.state import Totals


class SessionRow:
    """A session row as read (under its lock, for writers): key, turn, last seq, stamp, prompt and token totals.

    `generation` is that of the store settings its state was computed under
    (`prunestore.sql.settings`); `UNSETTLED` for a session created in this
    transaction, which takes the settings' own. `ledger` is the stored ledger's JSON (`prunestore.ledger`), or
    None.
    """

    __slots__ = ("session_id", "current_turn", "last_seq", "stamp", "prompt", "totals", "generation", "ledger")

    def __init__(
        self,
        session_id: int,
        current_turn: int,
        last_seq: int,
        stamp: int | None,
        prompt: PromptCounters | None = None,
        totals: Totals | None = None,
        generation: int = 0,
    ) -> None:
        self.session_id = session_id
        self.generation = generation
        self.current_turn = current_turn
        self.last_seq = last_seq
        self.stamp = stamp
        self.prompt = prompt or PromptCounters()
        self.totals = totals or Totals()
        self.ledger: str | None = None


def live_params(row: SessionRow) -> dict[str, int]:
    """The parameters of `LIVE_MESSAGES` for the session of `row`."""
    return {"sid": row.session_id, "cursor": row.prompt.cursor}
