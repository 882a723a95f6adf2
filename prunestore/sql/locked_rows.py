"""`engine.state.Rows` over one locked session, and the write-back of what an append changed.

On PostgreSQL a small append reads ahead: right behind the session's lock,
in the same round trip, it asks for every row the maintainer will look up
for its messages (their tool keys' last holders, their keys and those keys'
definers, their content's first holders, what their turns may expire), and
`AheadRows` serves those lookups from memory. What it did not foresee (a
restoration that walks further, a removal event) is read as usual.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ..engine.prompt import PromptCounters
from ..engine.state import KeyState, MsgState, Totals
from .calls import write_calls
from .driver import Driver
from .rows import (
    DELETE_HOLDER,
    EXPIRING,
    EXPIRING_BEFORE,
    FIRST_HOLDER_AFTER,
    HELD_AFTER,
    IN_PROMPT_BETWEEN,
    INSERT_COVER,
    INSERT_HOLDER,
    INSERT_MESSAGE,
    INSERT_REF,
    KEYS_BY_NAME,
    KEYS_WITH_DEFINERS,
    LAST_TIME,
    LAST_TOOL_HOLDER,
    LIVE_AFTER,
    MESSAGES_BY_ID,
    MESSAGES_BY_SEQ,
    MESSAGES_PROBING_SEQS_PG,
    PENDING_ROWS,
    SUMMARIES_COVERING,
    TIME_OF,
    UPDATE_GAPS,
    UPDATE_VERDICT,
    UPSERT_KEY,
    counted,
    first_value,
    for_list,
    key_state,
    key_with_definer,
    msg_state,
    seq_and_time,
    stored_message,
)
from .session_row import SessionRow
from .sessions import update_session
from .values import encode_content, join_keys

# The history columns of every message but an append's last (`INSERT_MESSAGE`'s last six).
NO_HISTORY = (None,) * 6


class LockedRows:
    """`engine.state.Rows` over one locked session, plus the write-back of a `Maintainer`."""

    def __init__(self, driver: Driver, session: SessionRow) -> None:
        self.driver = driver
        self.session = session
        self.sid = session.session_id
        self.escape_nul = driver.postgres

    def messages_by_seq(self, seqs: Iterable[int]) -> list[MsgState]:
        seqs = list(seqs)
        by_seq = for_list(self.driver.postgres, seqs, MESSAGES_BY_SEQ, MESSAGES_PROBING_SEQS_PG)
        return [msg_state(row) for row in self.driver.chunks(by_seq, {"sid": self.sid}, "seqs", seqs)]

    def last_tool_holder(self, tool_key: str) -> MsgState | None:
        row = self.driver.first(LAST_TOOL_HOLDER, {"sid": self.sid, "tool_key": tool_key})
        return msg_state(row) if row else None

    def expiring(self, from_turn: int, to_turn: int) -> list[MsgState]:
        rows = self.driver.all(EXPIRING, {"sid": self.sid, "lo": from_turn, "hi": to_turn})
        return [msg_state(row) for row in rows]

    def keys(self, keys: Iterable[str]) -> list[KeyState]:
        rows = self.driver.chunks(KEYS_BY_NAME, {"sid": self.sid}, "keys", keys)
        return [key_state(row) for row in rows]

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

    def time_of(self, seq: int) -> int | None:
        return self.driver.scalar(TIME_OF, {"sid": self.sid, "seq": seq})

    def in_prompt_between(self, lo: int, hi: int) -> tuple[int, int]:
        return counted(self.driver.first(IN_PROMPT_BETWEEN, {"sid": self.sid, "lo": lo, "hi": hi}))

    def seqs_of(self, ids: Iterable[str]) -> dict[str, int]:
        rows = self.driver.chunks(MESSAGES_BY_ID, {"sid": self.sid}, "ids", list(ids))
        return {m.id: m.seq for m in map(stored_message, rows)}

    def summaries_covering(self, seq: int) -> list[MsgState]:
        return [msg_state(row) for row in self.driver.all(SUMMARIES_COVERING, {"sid": self.sid, "seq": seq})]

    def message_row(
        self,
        state: MsgState,
        held: bool,
        journal: str | None = None,
        history: tuple | None = None,
    ) -> tuple:
        """The values of `INSERT_MESSAGE`, in its column order; `history` goes on an append's last message:
        totals, events, generation, and what was spent (`write_back`)."""
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
            int(m.tokens is not None),
            state.content_hash,
            join_keys(state.defines),
            join_keys(state.refs),
            state.base,
            state.verdict,
            int(held),
            journal,
            state.at,
            json.dumps(m.summarizes, separators=(",", ":")) if m.summarizes else None,
            state.gaps,
            state.place,
            *(history or NO_HISTORY),
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
        stamp: int | None = None,
        spent: tuple[float, float] | None = None,
    ) -> None:
        """Write what an append (or a rebuild) changed: a few executemany calls, one round trip on PostgreSQL.

        `journal` is the undo entry of an append (see `undo.journal_entry`), stored on its first message,
        and `stamp` the session's new stamp that it names (None: a new one); `spent`, the ledger's cost and
        the cost of sending everything so far, goes into the history beside the totals.
        The token totals follow from what changed, unless given (a rebuild counts them afresh).
        """
        totals = totals or self.session.totals.after(new, changed)
        with self.driver.pipeline():
            self._write_back(
                new,
                changed,
                keys,
                holders_added,
                holders_removed,
                current_turn,
                last_seq,
                journal,
                prompt,
                totals,
                stamp,
                spent,
            )

    def _write_back(
        self,
        new,
        changed,
        keys,
        holders_added,
        holders_removed,
        current_turn,
        last_seq,
        journal,
        prompt,
        totals,
        stamp,
        spent,
    ) -> None:
        sid, run_many = self.sid, self.driver.run_many
        held = (prompt or PromptCounters()).held_below
        if new:
            row, last = self.message_row, len(new) - 1
            history = (*totals, (prompt or PromptCounters()).events, self.session.generation, *(spent or (None, None)))
            run_many(
                INSERT_MESSAGE,
                [
                    row(s, held(s), journal if i == 0 else None, history if i == last else None)
                    for i, s in enumerate(new)
                ],
            )
            write_refs(self.driver, sid, new)
            write_covers(self.driver, sid, new)
            write_calls(self.driver, sid, [(s.seq, s.message.metadata) for s in new if s.message is not None])
        if changed:
            run_many(
                UPDATE_VERDICT,
                [
                    {"sid": sid, "seq": s.seq, "base": s.base, "verdict": s.verdict, "held": int(held(s))}
                    for s in changed
                ],
            )
            gaps = [{"sid": sid, "seq": s.seq, "gaps": s.gaps} for s in changed if s.gaps is not None]
            if gaps:
                run_many(UPDATE_GAPS, gaps)
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
        update_session(self.driver, self.session, current_turn, last_seq, prompt, totals, stamp)


def write_refs(driver: Driver, sid: int, states: Iterable[MsgState]) -> None:
    """The rows of the index of who refers to each key, for these messages as they are stored."""
    rows = [{"sid": sid, "key": key, "seq": s.seq} for s in states for key in s.refs]
    if rows:
        driver.run_many(INSERT_REF, rows)


def write_covers(driver: Driver, sid: int, states: Iterable[MsgState]) -> None:
    """The rows of the index of which summaries cover each message, for the new summaries among these."""
    rows = [{"sid": sid, "seq": seq, "summary_seq": s.seq} for s in states for seq in s.covered]
    if rows:
        driver.run_many(INSERT_COVER, rows)


AHEAD_AT_MOST = 16  # messages an append reads ahead for; a larger batch costs its inserts more than its reads


@dataclass
class Ahead:
    """The rows an append's maintainer will look up, read behind the session's lock."""

    tool_holders: dict[str, MsgState | None] = field(default_factory=dict)
    keys: dict[str, KeyState | None] = field(default_factory=dict)  # None: no row, as good as a fresh key
    states: dict[int, MsgState] = field(default_factory=dict)  # the keys' last definers, by seq
    first_holders: dict[bytes, int | None] = field(default_factory=dict)
    expiring: list[MsgState] | None = None  # expiring from the session's current turn to the batch's last
    last_time: tuple[int, int | None] | None = None  # (seq, said_at) of the session's last message, under a TTL


def read_ahead(
    driver: Driver, states: list[MsgState], dedupe_roles: AbstractSet[str] | None, times: bool = False
) -> Callable[[int], Callable[[], Ahead]] | None:
    """For `sessions.lock_session_for_append`: the queries to send behind the lock, while pipelining.

    `dedupe_roles` are those of the policy the append expects (None: unknown, every role's content is looked up);
    `times`, whether it has a `cache_ttl` (the time of the session's last message is then read too).
    """
    if not driver.pipelining or not states or len(states) > AHEAD_AT_MOST:
        return None
    tool_keys = list(dict.fromkeys(s.tool_key for s in states if s.tool_key is not None))
    keys = list(dict.fromkeys(k for s in states for k in (*s.defines, *s.refs)))
    hashes = list(dict.fromkeys(s.content_hash for s in states if dedupe_roles is None or s.role in dedupe_roles))
    last_turn = max(s.turn for s in states)

    def send(sid: int) -> Callable[[], Ahead]:
        holders = [(k, driver.send(LAST_TOOL_HOLDER, {"sid": sid, "tool_key": k})) for k in tool_keys]
        key_rows = driver.send(KEYS_WITH_DEFINERS, {"sid": sid, "keys": keys}) if keys else None
        firsts = [(h, driver.send(FIRST_HOLDER_AFTER, {"sid": sid, "content_hash": h, "after": 0})) for h in hashes]
        expiring = driver.send(EXPIRING_BEFORE, {"sid": sid, "hi": last_turn})
        last_time = driver.send(LAST_TIME, {"sid": sid}) if times else None

        def collect() -> Ahead:
            ahead = Ahead()
            for key, pending in holders:
                rows = pending.rows()
                ahead.tool_holders[key] = msg_state(rows[0]) if rows else None
            if key_rows is not None:
                ahead.keys = dict.fromkeys(keys)
                for ks, definer in map(key_with_definer, key_rows.rows()):
                    ahead.keys[ks.key] = ks
                    if definer is not None:
                        ahead.states[definer.seq] = definer
            for content_hash, pending in firsts:
                ahead.first_holders[content_hash] = first_value(pending.rows())  # type: ignore[assignment]
            ahead.expiring = [msg_state(row) for row in expiring.rows()]
            if last_time is not None:
                ahead.last_time = seq_and_time(last_time.rows())
            return ahead

        return collect

    return send


class AheadRows(LockedRows):
    """`LockedRows` that answers from what was read ahead, and asks the database for the rest."""

    def __init__(self, driver: Driver, session: SessionRow, ahead: Ahead) -> None:
        super().__init__(driver, session)
        self.ahead = ahead

    def messages_by_seq(self, seqs: Iterable[int]) -> list[MsgState]:
        known: list[MsgState] = []
        missing: list[int] = []
        for seq in seqs:
            state = self.ahead.states.get(seq)
            if state is None:
                missing.append(seq)
            else:
                known.append(state)
        return known + (super().messages_by_seq(missing) if missing else [])

    def last_tool_holder(self, tool_key: str) -> MsgState | None:
        if tool_key in self.ahead.tool_holders:
            return self.ahead.tool_holders[tool_key]
        return super().last_tool_holder(tool_key)

    def expiring(self, from_turn: int, to_turn: int) -> list[MsgState]:
        """Read ahead from the session's current turn on: every later range of this append lies within it."""
        if self.ahead.expiring is None or from_turn < self.session.current_turn:
            return super().expiring(from_turn, to_turn)
        return [s for s in self.ahead.expiring if from_turn <= s.expires_after_turn < to_turn]  # type: ignore[operator]

    def keys(self, keys: Iterable[str]) -> list[KeyState]:
        known: list[KeyState] = []
        missing = []
        for key in keys:
            if key in self.ahead.keys:
                ks = self.ahead.keys[key]
                if ks is not None:
                    known.append(ks)
            else:
                missing.append(key)
        return known + (super().keys(missing) if missing else [])

    def time_of(self, seq: int) -> int | None:
        known = self.ahead.last_time
        return known[1] if known is not None and known[0] == seq else super().time_of(seq)

    def first_holder_after(self, content_hash: bytes, after_seq: int) -> int | None:
        if after_seq == 0 and content_hash in self.ahead.first_holders:
            return self.ahead.first_holders[content_hash]
        return super().first_holder_after(content_hash, after_seq)
