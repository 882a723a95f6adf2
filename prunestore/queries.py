"""The operator's questions about a session: why a message has its verdict, the counts, the audit.

Each runs inside a read transaction the store opened, on its driver; none of
them is on the append path, so they may read a whole session (`verify` must).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import astuple, dataclass, fields

from .audit import compare
from .engine.ledger import Ledger
from .engine.state import new_state
from .errors import no_such_message
from .model import (
    DUPLICATE,
    EVICTED,
    EXPIRED,
    LIVE_VERDICTS,
    PENDING,
    REFERRING_VERDICTS,
    SUPERSEDED,
    VERDICTS,
    StoredMessage,
    check_identifier,
    supports,
    unchecked,
    was_restored,
)
from .policy import Policy
from .prices import LedgerTotals
from .results import (
    Entry,
    Explanation,
    HistoryPoint,
    Mismatch,
    SessionSummary,
    Stats,
    VerdictStats,
    VerifyReport,
    Window,
)
from .sql import recall_index
from .sql.calls import CALL_ROWS
from .sql.driver import Driver, Statement
from .sql.rows import (
    AUDIT,
    FULL_COLUMNS,
    audited,
    hashed,
    history_point,
    message_columns,
    session_summary,
    sql_set,
    with_length,
)
from .sql.session_row import HISTORY_COLUMNS, SUMMARY_COLUMNS, SessionRow
from .sql.undo import changed_by_append
from .whatif import replayed_ledger

_ONE = Statement(f"SELECT {FULL_COLUMNS}, content_hash FROM prunestore_messages WHERE session_id = :sid AND id = :id")
# The length of the text as given, and the text's first characters (twice as many: an escaped text may be
# longer). PostgreSQL: each escape of a NUL-escaped text (`sql.values.encode_content`) is one character.
# SQLite: length() and substr() stop at a NUL, so a text holding one is read whole and measured here (-1).
_LENGTH = {
    True: "length(CASE WHEN content_escaped = 1 THEN replace(replace(content, '\\\\', 'x'), '\\0', 'y') "
    "ELSE content END)",
    False: "CASE WHEN instr(CAST(content AS BLOB), x'00') > 0 THEN -1 ELSE length(content) END",
}
_FIRST_CHARS = {
    True: "substr(content, 1, 2 * :chars)",
    False: "CASE WHEN instr(CAST(content AS BLOB), x'00') > 0 THEN content ELSE substr(content, 1, :chars) END",
}
# The rows each append's last message carries, read from their partial index alone.
_HISTORY = Statement(
    f"SELECT {HISTORY_COLUMNS} FROM prunestore_messages "
    "WHERE session_id = :sid AND live_tokens_after IS NOT NULL ORDER BY seq"
)
_SUMMARY = Statement(f"SELECT {SUMMARY_COLUMNS} FROM prunestore_sessions WHERE session_id = :sid")
_ERASURES = Statement("SELECT count(*) FROM prunestore_erasures WHERE session_id = :sid")
_NEXT_HOLDER = Statement(
    "SELECT id FROM prunestore_messages WHERE session_id = :sid AND tool_key = :tool_key AND seq > :seq "
    "ORDER BY seq LIMIT 1"
)
_FIRST_COPY = Statement(
    "SELECT m.id FROM prunestore_hash_holders h JOIN prunestore_messages m "
    "ON m.session_id = h.session_id AND m.seq = h.seq "
    "WHERE h.session_id = :sid AND h.content_hash = :content_hash ORDER BY h.seq LIMIT 1"
)
_DEFINED_KEYS = Statement(
    "SELECT key FROM prunestore_keys WHERE session_id = :sid AND key IN :keys AND definer_seq = :seq "
    "AND support > 0 ORDER BY key"
)
# The messages that may count as referring to any of the keys, through the index of who refers to each.
# CROSS JOIN makes SQLite read the index first (its planner would walk the session's messages and probe
# the index for each); PostgreSQL plans it as the inner join it is.
_REFERRERS = Statement(
    "SELECT DISTINCT m.seq, m.id, m.base, m.verdict FROM prunestore_refs r CROSS JOIN prunestore_messages m "
    "WHERE m.session_id = r.session_id AND m.seq = r.seq AND r.session_id = :sid AND r.key IN :keys "
    f"AND m.verdict IN {sql_set(REFERRING_VERDICTS)} ORDER BY m.seq"
)
_STATS_ALL = Statement("SELECT verdict, count(*), coalesce(sum(tokens), 0) FROM prunestore_messages GROUP BY verdict")
_STATS_ONE = Statement(
    "SELECT verdict, count(*), coalesce(sum(tokens), 0) FROM prunestore_messages WHERE session_id = :sid "
    "GROUP BY verdict"
)
_KEY_ROWS = Statement(
    "SELECT key, definer_seq, support, kept_refs, evicted_refs FROM prunestore_keys WHERE session_id = :sid"
)
_PROMPT_ONE = Statement(
    "SELECT events, CASE WHEN prompt_tokens > :budget THEN 1 ELSE 0 END, comebacks, late_joins "
    "FROM prunestore_sessions WHERE session_id = :sid"
)
# The counts of comebacks and late joins are unknown (NULL) if one session's is.
_PROMPT_ALL = Statement(
    "SELECT sum(events), sum(CASE WHEN prompt_tokens > :budget THEN 1 ELSE 0 END), "
    "CASE WHEN count(comebacks) = count(*) THEN coalesce(sum(comebacks), 0) END, "
    "CASE WHEN count(late_joins) = count(*) THEN coalesce(sum(late_joins), 0) END FROM prunestore_sessions"
)
_OVER_NAMES = Statement("SELECT name FROM prunestore_sessions WHERE prompt_tokens > :budget ORDER BY name LIMIT 20")
_HOLDER_ROWS = Statement("SELECT content_hash, seq FROM prunestore_hash_holders WHERE session_id = :sid")
_REF_ROWS = Statement("SELECT key, seq FROM prunestore_refs WHERE session_id = :sid")
_COVER_ROWS = Statement("SELECT seq, summary_seq FROM prunestore_covers WHERE session_id = :sid")


def entry(driver: Driver, session: str, row: SessionRow, message_id: str, policy: Policy) -> Entry:
    """One message with its verdict and what caused it."""
    check_identifier("message_id", message_id)
    found = driver.first(_ONE, {"sid": row.session_id, "id": message_id})
    if found is None:
        raise no_such_message("message_id", message_id, session)
    message, content_hash = hashed(found)
    return Entry(message, _explained(driver, session, row, message, content_hash, policy, referrers=True))


@dataclass(frozen=True)
class Filter:
    """Which messages a window shows: by verdict, role, a text their content holds, from a turn on (or all)."""

    verdicts: tuple[str, ...] | None = None
    roles: tuple[str, ...] | None = None
    contains: str | None = None
    from_turn: int | None = None

    def statement(self, postgres: bool, clipped: bool) -> Statement:
        """The window's statement with these conditions: matches in seq order, `:limit` of them after `:after`.

        Without any, the window is a range of the primary key (`:last`): seqs run from 1 without gaps.
        """
        key = (self.verdicts is not None, self.roles is not None, self.contains is not None, self.from_turn is not None)
        cached = _WINDOWS.get((postgres, clipped, key))
        if cached is None:
            conditions = [
                " AND seq <= :last" if not any(key) else "",
                " AND verdict IN :verdicts" if key[0] else "",
                " AND role IN :roles" if key[1] else "",
                (" AND strpos(content, :contains) > 0" if postgres else " AND instr(content, :contains) > 0")
                if key[2]
                else "",
                " AND turn >= :from_turn" if key[3] else "",
            ]
            columns = message_columns(content=_FIRST_CHARS[postgres]) if clipped else FULL_COLUMNS
            cached = _WINDOWS[(postgres, clipped, key)] = Statement(
                f"SELECT {columns}, content_hash, {_LENGTH[postgres]} FROM prunestore_messages "
                f"WHERE session_id = :sid AND seq > :after{''.join(conditions)} ORDER BY seq LIMIT :limit"
            )
        return cached

    def params(self) -> dict:
        values = {
            "verdicts": self.verdicts,
            "roles": self.roles,
            "contains": self.contains,
            "from_turn": self.from_turn,
        }
        return {name: value for name, value in values.items() if value is not None}


_WINDOWS: dict[tuple, Statement] = {}  # by backend, clipped texts, and which conditions


def window(
    driver: Driver,
    session: str,
    row: SessionRow,
    after: int,
    limit: int,
    policy: Policy,
    chars: int | None = None,
    only: Filter | None = None,
) -> Window:
    """The messages after seq `after`, `limit` at most, each with its explanation (without `needed_by`).

    With `chars`, each message's content is read up to that many characters;
    with `only`, the window holds the next `limit` messages that match it.
    """
    params = {"sid": row.session_id, "after": after, "last": after + limit, "limit": limit}
    if chars is not None:
        params["chars"] = chars
    only = only or Filter()
    rows = driver.all(only.statement(driver.postgres, chars is not None), {**params, **only.params()})
    entries = []
    for message, content_hash, length in map(with_length, rows):
        explanation = _explained(driver, session, row, message, content_hash, policy, referrers=False)
        entries.append(Entry(_clipped(message, chars), explanation, length))
    erasures = driver.scalar(_ERASURES, {"sid": row.session_id})
    return Window(summary(driver, row.session_id), after, tuple(entries), erasures)


def _clipped(message: StoredMessage, chars: int | None) -> StoredMessage:
    """The message with at most `chars` characters of its text."""
    if chars is None or len(message.content) <= chars:
        return message
    return unchecked(StoredMessage, {**vars(message), "content": message.content[:chars]})


def history(driver: Driver, sid: int) -> list[HistoryPoint]:
    """The session's totals as each append left them, in order."""
    return [history_point(r) for r in driver.all(_HISTORY, {"sid": sid})]


def summary(driver: Driver, sid: int) -> SessionSummary:
    row = driver.first(_SUMMARY, {"sid": sid})
    assert row is not None  # the caller read the session's row in this transaction
    return session_summary(row)


def _explained(
    driver: Driver,
    session: str,
    row: SessionRow,
    message: StoredMessage,
    content_hash: bytes,
    policy: Policy,
    referrers: bool,
) -> Explanation:
    """The explanation of a stored message; `referrers` looks up `needed_by`."""
    sid = row.session_id
    superseded_by = duplicate_of = None
    if message.base == SUPERSEDED:
        superseded_by = driver.scalar(_NEXT_HOLDER, {"sid": sid, "tool_key": message.tool_key, "seq": message.seq})
    if message.base == DUPLICATE:
        duplicate_of = driver.scalar(_FIRST_COPY, {"sid": sid, "content_hash": content_hash})
    needed_for: tuple[str, ...] = ()
    needed_by: tuple[str, ...] = ()
    if was_restored(message.base, message.verdict):
        needed_for = _needed_for(driver, sid, message)
        if referrers:
            needed_by = _referrers(driver, sid, message, needed_for, policy)
    evicted_at: tuple[int, str] | None = None
    if message.verdict == EVICTED and referrers:
        evicted_at = _eviction(driver, sid, message.seq)
    return Explanation(
        session=session,
        message_id=message.id,
        seq=message.seq,
        verdict=message.verdict,
        base=message.base,
        current_turn=row.current_turn,
        superseded_by=superseded_by,
        expires_after_turn=message.expires_after_turn if message.base == EXPIRED else None,
        duplicate_of=duplicate_of,
        needed_for=needed_for,
        needed_by=needed_by,
        budget=policy.budget,
        clear_at_least=policy.clear_at_least,
        pending_tokens=row.prompt.pending,
        evicted_at_turn=evicted_at[0] if evicted_at else None,
        evicted_by=evicted_at[1] if evicted_at else None,
        summarizes=message.summarizes,
    )


# The appends after a seq that held removal events, latest first: their history rows (a partial index).
_EVENT_APPENDS = Statement(
    "SELECT seq, turn, events_after FROM prunestore_messages WHERE session_id = :sid AND seq >= :seq "
    "AND live_tokens_after IS NOT NULL ORDER BY seq DESC LIMIT :limit"
)
_LAST_ID = Statement("SELECT id FROM prunestore_messages WHERE session_id = :sid AND seq = :seq")
MOST_APPENDS_LOOKED_AT = 2000


def _eviction(driver: Driver, sid: int, seq: int) -> tuple[int, str] | None:
    """(turn, last message id) of the append whose removal event last changed message `seq`: the one that
    evicted it, since it is evicted now. Each append's undo journal lists the messages it changed; only
    appends that held an event are read, latest first. None where the journal does not reach (a rebuild
    or fork cleared it, or it is more than `MOST_APPENDS_LOOKED_AT` appends back)."""
    points = driver.all(_EVENT_APPENDS, {"sid": sid, "seq": seq, "limit": MOST_APPENDS_LOOKED_AT})
    for (last, turn, events), earlier in zip(points, [*points[1:], None], strict=True):
        if earlier is not None and events == earlier[2]:
            continue  # no event in this append
        changed = changed_by_append(driver, sid, last)
        if changed is None:
            return None
        if seq in changed:
            return turn, driver.scalar(_LAST_ID, {"sid": sid, "seq": last})
    return None


def _needed_for(driver: Driver, sid: int, message: StoredMessage) -> tuple[str, ...]:
    """The keys this message is the last definer of that something refers to."""
    defines = sorted(new_state(message, 0).defines)
    return tuple(key for (key,) in driver.all(_DEFINED_KEYS, {"sid": sid, "keys": defines, "seq": message.seq}))


def _referrers(
    driver: Driver, sid: int, message: StoredMessage, keys: tuple[str, ...], policy: Policy
) -> tuple[str, ...]:
    """The counting messages that refer to `keys`: the rows of those keys in the index of who refers to what."""
    if not keys:
        return ()
    rows = driver.all(_REFERRERS, {"sid": sid, "keys": list(keys)})
    return tuple(
        id_
        for _, id_, base, verdict in rows
        if id_ != message.id and supports(base, was_restored(base, verdict), policy.transitive)
    )


def stats(driver: Driver, sid: int | None, sessions: int, policy: Policy) -> Stats:
    """Messages and tokens, total and live, per verdict, of the session `sid` (None: of all `sessions`)."""
    rows = driver.all(_STATS_ALL, {}) if sid is None else driver.all(_STATS_ONE, {"sid": sid})
    by_verdict = {v: VerdictStats() for v in VERDICTS}
    for verdict, count, tokens in rows:
        by_verdict[verdict] = VerdictStats(int(count), int(tokens))
    live = [by_verdict[v] for v in LIVE_VERDICTS]
    events, over, comebacks, late_joins, names = 0, 0, 0, 0, ()
    if policy.gathers:
        params = {"sid": sid, "budget": policy.budget if policy.budget is not None else 2**62}
        found = driver.first(_PROMPT_ALL if sid is None else _PROMPT_ONE, params)
        if found is not None:
            events, over, comebacks, late_joins = found
        if over and sid is None:
            names = tuple(name for (name,) in driver.all(_OVER_NAMES, params))
    ledger = cost = cost_everything = None
    if policy.prices is not None:
        ledger = _ledgers(driver, sid, policy)
        cost, cost_everything = ledger.cost(policy.prices), ledger.cost_everything(policy.prices)
    return Stats(
        sessions=sessions,
        messages=sum(v.messages for v in by_verdict.values()),
        tokens=sum(v.tokens for v in by_verdict.values()),
        live_messages=sum(v.messages for v in live),
        live_tokens=sum(v.tokens for v in live),
        by_verdict=by_verdict,
        budget=policy.budget,
        pending_tokens=by_verdict[PENDING].tokens,
        events=int(events or 0),
        over_budget=int(over or 0),
        over_budget_names=names,
        comebacks=None if comebacks is None else int(comebacks),
        late_joins=None if late_joins is None else int(late_joins),
        ledger=ledger,
        cost=cost,
        cost_everything=cost_everything,
    )


_LEDGERS = Statement("SELECT session_id, ledger FROM prunestore_sessions")
_LEDGER_ONE = Statement("SELECT session_id, ledger FROM prunestore_sessions WHERE session_id = :sid")


def _ledgers(driver: Driver, sid: int | None, policy: Policy) -> LedgerTotals:
    """The ledgers of the session `sid` (None: of all) summed; one not stored yet (after a cut) is replayed."""
    summed = [0] * len(fields(LedgerTotals))
    for found, text in driver.all(_LEDGERS if sid is None else _LEDGER_ONE, {"sid": sid}):
        if text is not None:
            ledger = Ledger.from_json(text)
        else:
            row = SessionRow(found, 0, 1, None)
            replayed = replayed_ledger(driver, row, policy)
            assert replayed is not None
            ledger = replayed
        summed = [a + b for a, b in zip(summed, astuple(ledger.totals()), strict=True)]
    return LedgerTotals(*summed)


def verify(
    driver: Driver, name: str, row: SessionRow, policy: Policy, count: Callable[[StoredMessage], int] | None = None
) -> tuple[int, list[Mismatch]]:
    """Rerun `prune` over one session's stored messages: how many were checked, and every difference."""
    rows = [audited(r) for r in driver.all(AUDIT, {"sid": row.session_id})]
    stored = [r.message for r in rows]
    mismatches = compare(
        name,
        (
            row.current_turn,
            row.last_seq,
            *row.prompt.values(),
            row.prompt.cursor,
            *row.totals,
            *row.prompt.breaks(),
            row.summaries,
        ),
        stored,
        [(r.content_hash, r.eff_defines, r.eff_refs, r.held, r.gaps) for r in rows],
        driver.all(_KEY_ROWS, {"sid": row.session_id}),
        driver.all(_HOLDER_ROWS, {"sid": row.session_id}),
        driver.all(_REF_ROWS, {"sid": row.session_id}),
        driver.all(CALL_ROWS, {"sid": row.session_id}),
        driver.all(_COVER_ROWS, {"sid": row.session_id}),
        policy,
        count,
    )
    return len(stored), [
        *mismatches,
        *_ledger_mismatches(driver, name, row, policy),
        *_recall_mismatches(driver, name, row, stored),
    ]


def _recall_mismatches(driver: Driver, name: str, row: SessionRow, stored: list[StoredMessage]) -> list[Mismatch]:
    """The recall index's entries of the session against its messages' text (where the store has the index)."""
    if not recall_index.kept_by_triggers(driver):
        return []
    ids = {m.seq: m.id for m in stored}
    return [
        Mismatch(name, "recall", ids.get(seq, f"seq {seq}"), have, want)
        for seq, have, want in recall_index.differences(driver, row.session_id, stored)
    ]


def _ledger_mismatches(driver: Driver, name: str, row: SessionRow, policy: Policy) -> list[Mismatch]:
    """The stored ledger against a replay of the messages (none stored: after a cut, replayed when read)."""
    replayed = replayed_ledger(driver, row, policy)
    if row.ledger is None or (replayed is not None and replayed.to_json() == row.ledger):
        return []
    stored = Ledger.from_json(row.ledger).totals()
    return [Mismatch(name, "session", "ledger", stored, None if replayed is None else replayed.totals())]


def verify_sessions(
    driver: Driver,
    sessions: Iterable[tuple[str, SessionRow]],
    policy: Policy,
    count: Callable[[StoredMessage], int] | None,
) -> VerifyReport:
    """`verify` over each (name, row) in turn, in one report; `count` counts a message as the store does."""
    checked_sessions = messages = 0
    mismatches: list[Mismatch] = []
    for name, row in sessions:
        checked, found = verify(driver, name, row, policy, count)
        checked_sessions, messages = checked_sessions + 1, messages + checked
        mismatches.extend(found)
    return VerifyReport(sessions=checked_sessions, messages=messages, mismatches=tuple(mismatches))
