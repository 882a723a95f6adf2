"""The lifecycle of a session's stored state: rebuild, cut back (truncate, pop), fork and delete.

A cut takes back the appends after it from the undo journal (`undo`), so it
costs what is cut; a cut into history written before the last `rebuild` or
fork is recomputed as a batch over what remains. A rebuild writes every
derived row and column from the messages (`audit.expected_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .appending import Write, append_locked
from .audit import expected_state
from .engine.prompt import PromptCounters
from .engine.state import Totals, new_state
from .errors import SessionExistsError, SessionNotFoundError, no_such_message, shorten
from .model import EVICTED, LIVE_VERDICTS, StoredMessage, check_identifier
from .policy import Policy
from .results import Delta
from .sql import recall_index
from .sql.calls import write_calls
from .sql.driver import Driver, Statement
from .sql.locked_rows import LockedRows, write_covers, write_refs
from .sql.rows import (
    ALL_MESSAGES,
    AUDIT,
    DELETE_HOLDER,
    FULL_COLUMNS,
    RECOUNT_GAPS,
    audited,
    hashed,
    stored_message,
    verdict_row,
)
from .sql.schema import MESSAGES
from .sql.session_row import SessionRow
from .sql.sessions import DELETE_DERIVED, create_session, find_session, lock_session, update_session
from .sql.undo import CLEAR_JOURNAL, Undo, apply_undo, last_append_at_or_before, read_undo
from .sql.values import join_keys
from .whatif import replayed_ledger

_UPDATE_KEYS_AND_HASH = Statement(
    "UPDATE prunestore_messages SET content_hash = :content_hash, eff_defines = :eff_defines, eff_refs = :eff_refs "
    "WHERE session_id = :sid AND seq = :seq"
)
_RECORD_HISTORY = Statement(
    "UPDATE prunestore_messages SET tokens_after = :tokens, live_tokens_after = :live_tokens, events_after = :events, "
    "generation_after = :generation, cost_after = :cost, everything_after = :everything "
    "WHERE session_id = :sid AND seq = :seq"
)
_SEQ_OF = Statement("SELECT seq FROM prunestore_messages WHERE session_id = :sid AND id = :id")
VERDICTS_FROM = Statement(
    "SELECT seq, id, verdict FROM prunestore_messages WHERE session_id = :sid AND seq >= :since ORDER BY seq"
)
_VERDICTS_OF = Statement(
    "SELECT seq, id, verdict, tokens FROM prunestore_messages WHERE session_id = :sid AND seq IN :seqs"
)
_TAIL = Statement(
    f"SELECT {FULL_COLUMNS}, content_hash FROM prunestore_messages WHERE session_id = :sid AND seq >= :since "
    "ORDER BY seq"
)
_DELETE_FROM = Statement("DELETE FROM prunestore_messages WHERE session_id = :sid AND seq >= :since")
_DELETE_INDEXES_FROM = [
    Statement(f"DELETE FROM {table} WHERE session_id = :sid AND {seq} >= :since")
    for table, seq in (("prunestore_refs", "seq"), ("prunestore_calls", "seq"), ("prunestore_covers", "summary_seq"))
]
_COUNT_SUMMARIES = Statement(
    "SELECT count(*) FROM prunestore_messages WHERE session_id = :sid AND summarizes IS NOT NULL"
)
_SET_SUMMARY = Statement(
    "UPDATE prunestore_messages SET gaps = :gaps, place = :place WHERE session_id = :sid AND seq = :seq"
)
MESSAGE_AT = Statement(f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq = :seq")
_COPIED_COLUMNS = ", ".join(c.name for c in MESSAGES.columns if c.name not in ("session_id", "undo"))
_COPY_PREFIX = Statement(
    f"INSERT INTO prunestore_messages (session_id, {_COPIED_COLUMNS}) "
    f"SELECT :new_sid, {_COPIED_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq <= :cut"
)


def rebuild_session(driver: Driver, row: SessionRow, policy: Policy, *, reindex: bool = False) -> None:
    """Rewrite every derived row and column of the session from its messages.

    `reindex` writes the recall index's entries again too: a repair asks for it, since every other
    change of the messages reaches the index through its triggers.
    """
    rows = [audited(r) for r in driver.all(AUDIT, {"sid": row.session_id})]
    stored = [r.message for r in rows]
    expected = expected_state(stored, policy)
    for statement in DELETE_DERIVED:
        driver.run(statement, {"sid": row.session_id})
    driver.run(CLEAR_JOURNAL, {"sid": row.session_id})  # what it recorded no longer matches the state
    keys_and_hash = [
        {
            "sid": row.session_id,
            "seq": s.seq,
            "content_hash": s.content_hash,
            "eff_defines": join_keys(s.defines),
            "eff_refs": join_keys(s.refs),
        }
        for s, r in zip(expected.states, rows, strict=True)
        if (r.content_hash, r.eff_defines, r.eff_refs) != (s.content_hash, join_keys(s.defines), join_keys(s.refs))
    ]
    driver.run_many(_UPDATE_KEYS_AND_HASH, keys_and_hash)
    write_refs(driver, row.session_id, expected.states)
    write_covers(driver, row.session_id, expected.states)
    summaries = [
        {"sid": row.session_id, "seq": s.seq, "gaps": s.gaps, "place": s.place}
        for s, r in zip(expected.states, rows, strict=True)
        if (s.gaps, s.place) != (r.gaps, r.message.place)
    ]
    driver.run_many(_SET_SUMMARY, summaries)
    row.summaries = sum(s.gaps is not None for s in expected.states)
    write_calls(driver, row.session_id, [(m.seq, m.metadata) for m in stored])
    if reindex and recall_index.kept_by_triggers(driver):
        recall_index.reindex(driver, row.session_id, stored)
    held = (expected.prompt or PromptCounters()).held_below
    ledger = replayed_ledger(driver, row, policy)
    row.ledger = None if ledger is None else ledger.to_json()
    changed = [
        s
        for s, m, r in zip(expected.states, stored, rows, strict=True)
        if (s.base, s.verdict, held(s)) != (m.base, m.verdict, r.held)
    ]
    LockedRows(driver, row).write_back(
        new=[],
        changed=changed,
        keys=list(expected.keys.values()),
        holders_added=sorted(expected.hash_holders),
        holders_removed=[],
        current_turn=expected.current_turn,
        last_seq=stored[-1].seq if stored else 0,
        prompt=expected.prompt,
        totals=Totals.of((s.tokens, s.verdict) for s in expected.states),
    )
    if stored:  # the history's last point is the state now
        history = {
            "sid": row.session_id,
            "seq": stored[-1].seq,
            "events": row.prompt.events,
            "generation": row.generation,
            **row.totals._asdict(),
        }
        spent = ledger.spent(policy.prices) if ledger is not None and policy.prices is not None else (None, None)
        history["cost"], history["everything"] = spent
        driver.run(_RECORD_HISTORY, history)


_SET_TOKENS = Statement("UPDATE prunestore_messages SET tokens = :tokens WHERE session_id = :sid AND seq = :seq")


def recount(driver: Driver, sid: int, count: Callable[[StoredMessage], int]) -> None:
    """Count the tokens of every message of the session again (then `rebuild_session`: totals and budget follow)."""
    changed = []
    for message in map(stored_message, driver.all(ALL_MESSAGES, {"sid": sid})):
        now = count(message)
        if now != message.tokens:
            changed.append({"sid": sid, "seq": message.seq, "tokens": now})
    driver.run_many(_SET_TOKENS, changed)


def cut(
    driver: Driver, name: str, row: SessionRow, cut: int, policy: Policy, writes: list[Write] | None = None
) -> Delta:
    """Drop the locked session's messages after seq `cut` (0: all of them), restoring the state it had then.

    What it wrote is added to `writes` (when given) as a write that takes back
    every message after the start of the last append it undid, then writes
    the rows it changed; a cut recomputed as a batch adds nothing (a cache of
    the session must read it again).
    """
    if cut == row.last_seq:
        return Delta()
    sid = row.session_id
    journaled = last_append_at_or_before(driver, sid, cut + 1)
    if journaled is None:
        before = driver.all(VERDICTS_FROM, {"sid": sid, "since": 1})
        driver.run(_DELETE_FROM, {"sid": sid, "since": cut + 1})  # the rebuild writes the refs again
        rebuild_session(driver, row, policy)
        return delta_between(before, driver.all(VERDICTS_FROM, {"sid": sid, "since": 1}))
    stamp = row.stamp

    undo = read_undo(driver, sid, *journaled)
    raw_tail = driver.all(_TAIL, {"sid": sid, "since": undo.since})
    tail = [hashed(r) for r in raw_tail]
    touched = list(undo.verdicts)
    before = driver.chunks(_VERDICTS_OF, {"sid": sid}, "seqs", touched) + [verdict_row(r) for r in raw_tail]
    apply_undo(driver, sid, undo)
    if undo.prompt is not None and None in row.prompt.breaks():  # not counted before: a cut does not start it
        undo.prompt.comebacks = undo.prompt.late_joins = None
    driver.run_many(DELETE_HOLDER, [{"sid": sid, "content_hash": h, "seq": m.seq} for m, h in tail])
    for statement in _DELETE_INDEXES_FROM:
        driver.run(statement, {"sid": sid, "since": undo.since})
    driver.run(_DELETE_FROM, {"sid": sid, "since": undo.since})
    if row.summaries:  # the verdicts put back move the gaps of the summaries that stay
        driver.run(RECOUNT_GAPS, {"sid": sid})
        row.summaries = driver.scalar(_COUNT_SUMMARIES, {"sid": sid})
    row.ledger = None  # the next write under prices replays it
    update_session(driver, row, undo.turn, undo.since - 1, undo.prompt, _totals_undone(row.totals, before, undo))
    kept = [m for m, _ in tail if m.seq <= cut]
    again: list[Write] = []
    if kept:
        append_locked(driver, name, [new_state(m.to_message(), m.tokens) for m in kept], policy, again)
    after = driver.chunks(_VERDICTS_OF, {"sid": sid}, "seqs", touched + [m.seq for m in kept])
    if writes is not None:
        # The rows whose verdict went back, every row of the tail, and what appending the kept ones changed.
        written = touched + [m.seq for m, _ in tail] + [seq for write in again for seq in write[4]]
        now = again[-1][3] if again else row.stamp
        assert now is not None  # update_session set it
        writes.append((name, sid, stamp, now, written, undo.since - 1, undo.since - 1 + len(kept)))
    return delta_between(before, after)


def _totals_undone(totals: Totals, before: list[tuple[int, str, str, int]], undo: Undo) -> Totals:
    """The token totals once the tail is deleted and the verdicts it changed are put back."""
    tokens, live = totals
    for seq, _, verdict, count in before:
        was_live = verdict in LIVE_VERDICTS
        if seq >= undo.since:  # deleted
            tokens, live = tokens - count, live - count * was_live
        else:
            live += count * ((undo.verdicts[seq][1] in LIVE_VERDICTS) - was_live)
    return Totals(tokens, live)


def copy_prefix(driver: Driver, source: SessionRow, target: SessionRow, cut: int) -> None:
    """Copy the messages of `source` up to seq `cut` into the empty session `target` (then `rebuild_session`)."""
    driver.run(_COPY_PREFIX, {"new_sid": target.session_id, "sid": source.session_id, "cut": cut})


def lock_existing(driver: Driver, name: str) -> SessionRow:
    """Lock the session for writing; `SessionNotFoundError` when there is none."""
    row = lock_session(driver, name)
    if row is None:
        raise SessionNotFoundError(f"session={shorten(name)}: no such session")
    return row


def fork_into(driver: Driver, row: SessionRow, at: int, new: str, policy: Policy) -> None:
    """Create session `new` holding the messages of the locked session up to seq `at`, its state a batch over them."""
    if find_session(driver, new) is not None:
        raise SessionExistsError(f"new_session={shorten(new)}: the store already holds this session")
    new_row = create_session(driver, new)
    new_row.generation = row.generation  # the copied messages were counted under the settings of `row`
    copy_prefix(driver, row, new_row, at)
    rebuild_session(driver, new_row, policy)


def seq_of(driver: Driver, name: str, row: SessionRow, field: str, message_id: str) -> int:
    check_identifier(field, message_id)
    seq = driver.scalar(_SEQ_OF, {"sid": row.session_id, "id": message_id})
    if seq is None:
        raise no_such_message(field, message_id, name)
    return seq


def delta_between(before: Iterable[tuple], after: Iterable[tuple]) -> Delta:
    """The Delta between two readings of (seq, id, verdict, ...) rows; a row missing after is gone."""
    was = {seq: (id_, verdict) for seq, id_, verdict, *_ in before}
    now = {seq: (id_, verdict) for seq, id_, verdict, *_ in after}
    added, removed, evicted = [], [], []
    for seq in sorted(was.keys() | now.keys()):
        (old, old_verdict), (new, new_verdict) = was.get(seq, ("", "")), now.get(seq, ("", ""))
        same, now_live = old == new, new_verdict in LIVE_VERDICTS
        if now_live and not (old_verdict in LIVE_VERDICTS and same):
            added.append(new)
        if old_verdict in LIVE_VERDICTS and not (now_live and same):
            removed.append(old)
        if new_verdict == EVICTED and not (old_verdict == EVICTED and same):
            evicted.append(new)
    return Delta(tuple(added), tuple(removed), evicted=tuple(evicted))
