"""`engine.state.Rows` over one locked session, and the write-back of what an append changed."""

from __future__ import annotations

from collections.abc import Iterable

from ..engine.prompt import PromptCounters
from ..engine.state import KeyState, MsgState
from .driver import Driver
from .rows import (
    DELETE_HOLDER,
    EXPIRING,
    FIRST_HOLDER_AFTER,
    HELD_AFTER,
    INSERT_HOLDER,
    INSERT_MESSAGE,
    KEYS_BY_NAME,
    LAST_TOOL_HOLDER,
    LIVE_AFTER,
    MESSAGES_BY_SEQ,
    PENDING_ROWS,
    UPDATE_VERDICT,
    UPSERT_KEY,
    SessionRow,
    Totals,
    encode_content,
    join_keys,
    msg_state,
)
from .sessions import update_session


class LockedRows:
    """`incremental.Rows` over one locked session, plus the write-back of a `Maintainer`."""

    def __init__(self, driver: Driver, session: SessionRow) -> None:
        self.driver = driver
        self.session = session
        self.sid = session.session_id
        self.escape_nul = driver.postgres

    def messages_by_seq(self, seqs: Iterable[int]) -> list[MsgState]:
        return [msg_state(row) for row in self.driver.chunks(MESSAGES_BY_SEQ, {"sid": self.sid}, "seqs", seqs)]

    def last_tool_holder(self, tool_key: str) -> MsgState | None:
        row = self.driver.first(LAST_TOOL_HOLDER, {"sid": self.sid, "tool_key": tool_key})
        return msg_state(row) if row else None

    def expiring(self, from_turn: int, to_turn: int) -> list[MsgState]:
        rows = self.driver.all(EXPIRING, {"sid": self.sid, "lo": from_turn, "hi": to_turn})
        return [msg_state(row) for row in rows]

    def keys(self, keys: Iterable[str]) -> list[KeyState]:
        rows = self.driver.chunks(KEYS_BY_NAME, {"sid": self.sid}, "keys", keys)
        return [KeyState(key, definer, support, kept, evicted) for key, definer, support, kept, evicted in rows]

    def first_holder_after(self, content_hash: bytes, after_seq: int) -> int | None:
        params = {"sid": self.sid, "content_hash": content_hash, "after": after_seq}
        return self.driver.scalar(FIRST_HOLDER_AFTER, params)

    def pending(self) -> list[MsgState]:
        return [msg_state(row) for row in self.driver.all(PENDING_ROWS, {"sid": self.sid})]

    def in_prompt_after(self, after_seq: int, limit: int, cursor: int) -> list[MsgState]:
        params = {"sid": self.sid, "after": after_seq, "limit": limit, "cursor": cursor}
        rows = self.driver.all(HELD_AFTER, params) if after_seq + 1 < cursor else []
        if len(rows) < limit:
            params.update(after=max(after_seq, cursor - 1), limit=limit - len(rows))
            rows += self.driver.all(LIVE_AFTER, params)
        return [msg_state(row) for row in rows]

    def message_row(
        self,
        state: MsgState,
        held: bool,
        journal: str | None = None,
        history: tuple[int, int, int, int] | None = None,
    ) -> tuple:
        """The values of `INSERT_MESSAGE`, in its column order; `history` goes on an append's last message."""
        m = state.message
        assert m is not None
        content, escaped = encode_content(m.content, self.escape_nul)
        return (
            self.sid,
            state.seq,
            m.id,
            m.role,
            content,
            escaped,
            m.turn,
            m.tool_key,
            m.expires_after_turn,
            join_keys(m.defines),
            join_keys(m.refs),
            state.metadata_json,
            state.tokens,
            state.content_hash,
            join_keys(state.defines),
            join_keys(state.refs),
            state.base,
            state.verdict,
            int(held),
            journal,
            *(history or (None, None, None, None)),
        )

    def write_back(
        self,
        new: list[MsgState],
        changed: list[MsgState],
        keys: list[KeyState],
        holders_added: list[tuple[bytes, int]],
        holders_removed: list[tuple[bytes, int]],
        current_turn: int,
        last_seq: int,
        journal: str | None = None,
        prompt: PromptCounters | None = None,
        totals: Totals | None = None,
    ) -> None:
        """Write what an append (or a rebuild) changed: a few executemany calls, one round trip on PostgreSQL.

        `journal` is the undo entry of an append (see `undo.journal_entry`), stored on its first message.
        The token totals follow from what changed, unless given (a rebuild counts them afresh).
        """
        totals = totals or self.session.totals.after(new, changed)
        with self.driver.pipeline():
            self._write_back(
                new, changed, keys, holders_added, holders_removed, current_turn, last_seq, journal, prompt, totals
            )

    def _write_back(
        self, new, changed, keys, holders_added, holders_removed, current_turn, last_seq, journal, prompt, totals
    ) -> None:
        sid, run_many = self.sid, self.driver.run_many
        held = (prompt or PromptCounters()).held_below
        if new:
            row, last = self.message_row, len(new) - 1
            history = (*totals, (prompt or PromptCounters()).events, self.session.generation)
            run_many(
                INSERT_MESSAGE,
                [
                    row(s, held(s), journal if i == 0 else None, history if i == last else None)
                    for i, s in enumerate(new)
                ],
            )
        if changed:
            run_many(
                UPDATE_VERDICT,
                [
                    {"sid": sid, "seq": s.seq, "base": s.base, "verdict": s.verdict, "held": int(held(s))}
                    for s in changed
                ],
            )
        if keys:
            run_many(
                UPSERT_KEY,
                [
                    {
                        "sid": sid,
                        "key": k.key,
                        "definer_seq": k.definer,
                        "support": k.support,
                        "kept_refs": k.kept_refs,
                        "evicted_refs": k.evicted_refs,
                    }
                    for k in keys
                ],
            )
        if holders_removed:
            run_many(DELETE_HOLDER, [{"sid": sid, "content_hash": h, "seq": seq} for h, seq in holders_removed])
        if holders_added:
            run_many(INSERT_HOLDER, [{"sid": sid, "content_hash": h, "seq": seq} for h, seq in holders_added])
        update_session(self.driver, self.session, current_turn, last_seq, prompt, totals)
