"""The session row: its columns, as a writer holds it under its lock, and as the catalog reads it.

A plain value: `rows.session_row` decodes it, `sessions` locks and updates it.
"""

from __future__ import annotations

from ..engine.prompt import PromptCounters
from ..engine.state import Totals
from .driver import Statement


class SessionRow:
    """A session row as read (under its lock, for writers): key, turn, last seq, stamp, prompt and token totals.

    `generation` is that of the store settings its state was computed under
    (`prunestore.sql.settings`); `UNSETTLED` for a session created in this
    transaction, which takes the settings' own. `ledger` is the stored ledger's JSON (`prunestore.ledger`), or
    None. `summaries` counts its summaries (`Message.summarizes`): with none, an eviction looks none up.
    """

    __slots__ = (
        "session_id",
        "current_turn",
        "last_seq",
        "stamp",
        "prompt",
        "totals",
        "generation",
        "ledger",
        "summaries",
    )

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
        self.summaries = 0


def live_params(row: SessionRow) -> dict[str, int]:
    """The parameters of `LIVE_MESSAGES` for the session of `row`."""
    return {"sid": row.session_id, "cursor": row.prompt.cursor}


# The session row holds the current turn and last seq: on PostgreSQL a writer that
# waited for the row lock re-reads the locked row's newest version, while a
# subquery in the same statement would still see the snapshot from before the wait.
# Rows are found by id (`sessionids`); the name read with them tells a collision apart.
SESSION_COLUMNS = (
    "session_id, current_turn, last_seq, stamp, prompt_tokens, pending_tokens, events, prompt_cursor, "
    "comebacks, late_joins, tokens, live_tokens, policy_generation, name, ledger, summary_count"
)
SESSION_WIDTH = 16
SELECT_SESSION = Statement(f"SELECT {SESSION_COLUMNS} FROM prunestore_sessions WHERE session_id = :sid")
LOCK_SESSION_PG = Statement(f"SELECT {SESSION_COLUMNS} FROM prunestore_sessions WHERE session_id = :sid FOR UPDATE")

INSERT_SESSION = Statement(
    "INSERT INTO prunestore_sessions (session_id, name, current_turn, last_seq, stamp, created_at, updated_at, "
    "policy_generation, comebacks, late_joins) VALUES (:sid, :name, 0, 0, :stamp, :now, :now, :unsettled, 0, 0) "
    "ON CONFLICT (session_id) DO NOTHING"
)
UPDATE_SESSION = Statement(
    "UPDATE prunestore_sessions SET current_turn = :turn, last_seq = :last_seq, stamp = :stamp, "
    "prompt_tokens = :prompt_tokens, pending_tokens = :pending_tokens, events = :events, prompt_cursor = :cursor, "
    "comebacks = :comebacks, late_joins = :late_joins, tokens = :tokens, live_tokens = :live_tokens, "
    "policy_generation = :generation, ledger = :ledger, summary_count = :summaries, updated_at = :now "
    "WHERE session_id = :sid"
)


# A session's counts, in the order of `SessionSummary`'s fields, read from its row alone.
SUMMARY_COLUMNS = (
    "name, last_seq, tokens, live_tokens, current_turn, events, created_at, updated_at, comebacks, late_joins, ledger"
)


# One point of a session's history, in the order of `HistoryPoint`'s fields: the columns an append's last message holds.
HISTORY_COLUMNS = (
    "seq, turn, tokens_after, live_tokens_after, events_after, generation_after, cost_after, everything_after"
)
