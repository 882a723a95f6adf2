"""The session row: its lock, its creation, and its update at the end of every write.

A writer locks its session's row first (on SQLite it already holds the
database lock); the row carries the current turn, the last seq, the prompt
and token totals and a change stamp the live cache compares.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from ..engine.prompt import PromptCounters
from ..engine.state import Totals
from ..errors import SessionIdCollisionError, shorten
from ..model import StoredMessage
from .driver import Driver, Statement
from .rows import (
    DEFINERS,
    ID_AT,
    LOCK_SESSION_PROBING_IDS_PG,
    LOCK_SESSION_WITH_IDS_PG,
    MESSAGES_BY_ID,
    SESSION_WITH_IDS,
    for_list,
    joined_message,
    keyed_message,
    lock_saw_the_latest,
    session_row,
    stored_message,
)
from .session_row import INSERT_SESSION, LOCK_SESSION_PG, SELECT_SESSION, UPDATE_SESSION, SessionRow
from .sessionids import session_id

_T = TypeVar("_T")

UNSETTLED = -1  # the settings generation of a session row created in the running transaction


def new_stamp() -> int:
    """A session's next change stamp: random, so no two states of a session share one.

    A counter would repeat after a truncate, or after a deleted session's name
    and key are used again; 63 random bits fit both backends' BIGINT.
    """
    return secrets.randbits(63)


def update_session(
    driver: Driver,
    session: SessionRow,
    current_turn: int,
    last_seq: int,
    prompt: PromptCounters | None,
    totals: Totals,
    stamp: int | None = None,
) -> None:
    """Write the session's turn, last seq, prompt and token totals with a new stamp, and record them on `session`.

    Every write to a session ends here; a writer reads its new stamp from `session` afterwards, or chooses
    it beforehand (`stamp`: an append names it in its undo journal entry).
    """
    stamp = new_stamp() if stamp is None else stamp
    prompt = prompt or PromptCounters()
    params = {
        "sid": session.session_id,
        "turn": current_turn,
        "last_seq": last_seq,
        "stamp": stamp,
        "prompt_tokens": prompt.tokens,
        "pending_tokens": prompt.pending,
        "events": prompt.events,
        "cursor": prompt.cursor,
        "comebacks": prompt.comebacks,
        "late_joins": prompt.late_joins,
        "tokens": totals.tokens,
        "live_tokens": totals.live_tokens,
        "generation": session.generation,
        "ledger": session.ledger,
        "summaries": session.summaries,
        "now": int(time.time()),
    }
    driver.run(UPDATE_SESSION, params)
    session.current_turn, session.last_seq, session.stamp = current_turn, last_seq, stamp
    session.prompt, session.totals = prompt, totals


def _named(row: tuple | None, name: str) -> SessionRow | None:
    """The session row read by `name`'s id, or None where there is none or it is another name's."""
    if row is None:
        return None
    session, holder = session_row(row)
    return session if holder == name else None


def find_session(driver: Driver, name: str) -> SessionRow | None:
    return _named(driver.first(SELECT_SESSION, {"sid": session_id(name)}), name)


def _lock_row(driver: Driver, sid: int) -> tuple | None:
    """The session row with id `sid`, locked: SQLite writers already hold the database lock
    (``BEGIN IMMEDIATE``); PostgreSQL writers lock the session's row."""
    return driver.first(LOCK_SESSION_PG if driver.postgres else SELECT_SESSION, {"sid": sid})


def lock_session(driver: Driver, name: str) -> SessionRow | None:
    """Read the session row so that no other writer can change the session until commit."""
    return _named(_lock_row(driver, session_id(name)), name)


def create_session(driver: Driver, name: str) -> SessionRow:
    """Create the session (if no writer did meanwhile) and lock it.

    `SessionIdCollisionError` when its id is another stored session's.
    """
    sid = session_id(name)
    params = {"sid": sid, "name": name, "stamp": new_stamp(), "now": int(time.time()), "unsettled": UNSETTLED}
    driver.run(INSERT_SESSION, params)
    row = _lock_row(driver, sid)
    assert row is not None
    named = _named(row, name)
    if named is None:
        _, holder = session_row(row)
        raise SessionIdCollisionError(
            f"session={shorten(name)}: its id is already that of the stored session {shorten(holder)}; "
            "use another name for it",
            session=name,
            holder=holder,
        )
    return named


def lock_session_for_append(
    driver: Driver, name: str, ids: list[str], ahead: Callable[[int], Callable[[], _T]] | None = None
) -> tuple[SessionRow, dict[str, StoredMessage], _T | None]:
    """Lock (creating if need be) the session and read the messages it already holds with these ids.

    One round trip for the common case: the lock and the retry check together.
    `ahead(session_id)` may send more queries right behind the lock, to travel
    with it (`Driver.send`), and returns what reads their rows; that result comes
    third, or None where the session was not there to lock (the queries then ran
    unlocked, and are not read).
    """
    sid = session_id(name)
    found: dict[str, StoredMessage] = {}
    row = None
    read_ahead = None
    for start in range(0, max(len(ids), 1), 500):
        chunk = ids[start : start + 500] or [""]
        listed = LOCK_SESSION_WITH_IDS_PG if driver.postgres else SESSION_WITH_IDS
        select = for_list(driver.postgres, chunk, listed, LOCK_SESSION_PROBING_IDS_PG)
        pending = driver.send(select, {"sid": sid, "ids": chunk})
        if start == 0 and ahead is not None:
            read_ahead = ahead(sid)
        rows = pending.rows()
        named = session_row(rows[0]) if rows else None
        if named is None or named[1] != name:  # none yet, or another name's: create_session says
            read_ahead = None
            break
        row = named[0]
        if driver.postgres and not lock_saw_the_latest(rows[0]):  # the snapshot predates the lock: read the ids again
            found = {m.id: m for m in map(stored_message, driver.chunks(MESSAGES_BY_ID, {"sid": sid}, "ids", ids))}
            break
        joined = (joined_message(r, driver.postgres) for r in rows)
        found.update((m.id, m) for m in joined if m is not None)
    if row is None:
        row = create_session(driver, name)
    return row, found, read_ahead() if read_ahead is not None else None


class SessionState:
    """A session as `PruneStore.append_with` shows it to its builder: read under the session's write lock."""

    def __init__(self, driver: Driver, session: SessionRow) -> None:
        self._driver = driver
        self._sid = session.session_id
        self.current_turn = session.current_turn
        self.last_seq = session.last_seq  # 0 for a new session; the next message gets last_seq + 1

    def definers(self, keys: Iterable[str]) -> dict[str, StoredMessage]:
        """The last message that defines each of `keys`, for those some message defines."""
        wanted = list(dict.fromkeys(keys))
        if not wanted or not self.last_seq:
            return {}
        rows = self._driver.chunks(DEFINERS, {"sid": self._sid}, "keys", wanted)
        return dict(map(keyed_message, rows))

    def last_id(self) -> str | None:
        """The id of the session's last message (None while it has none): one indexed read."""
        return self._driver.scalar(ID_AT, {"sid": self._sid, "seq": self.last_seq}) if self.last_seq else None

    def stored(self, ids: Iterable[str]) -> set[str]:
        """Which of `ids` the session holds: a read of each, for writers that cannot tell from `last_id`."""
        wanted = list(dict.fromkeys(ids))
        if not wanted or not self.last_seq:
            return set()
        return {stored_message(r).id for r in self._driver.chunks(MESSAGES_BY_ID, {"sid": self._sid}, "ids", wanted)}

    def summarized(self, ids: Iterable[str]) -> set[str]:
        """Which of `ids` a summary of the session covers: a summarizer that ran meanwhile may have written one."""
        return self._found(_SUMMARIZED_IDS, ids)

    def answered(self, call_ids: Iterable[str]) -> set[str]:
        """Which of `call_ids` a stored result answers after the latest stored call with that id (through the
        index of calls): for writers handed a history that repeats results in another shape."""
        return self._found(_ANSWERED_CALLS, call_ids)

    def _found(self, statement: Statement, values: Iterable[str]) -> set[str]:
        """The values of the list parameter ``ids`` that `statement`, of one column, gives back."""
        wanted = list(dict.fromkeys(values))
        if not wanted or not self.last_seq:
            return set()
        return {value for (value,) in self._driver.chunks(statement, {"sid": self._sid}, "ids", wanted)}


_ANSWERED_CALLS = Statement(
    "SELECT c.call_id FROM prunestore_calls c JOIN prunestore_messages m ON m.session_id = c.session_id "
    "AND m.seq = c.seq WHERE c.session_id = :sid AND c.call_id IN :ids GROUP BY c.call_id "
    "HAVING max(CASE WHEN m.role = 'assistant' THEN 0 ELSE c.seq END) "
    "> max(CASE WHEN m.role = 'assistant' THEN c.seq ELSE 0 END)"
)

_SUMMARIZED_IDS = Statement(
    "SELECT DISTINCT m.id FROM prunestore_messages m JOIN prunestore_covers c ON c.session_id = m.session_id "
    "AND c.seq = m.seq WHERE m.session_id = :sid AND m.id IN :ids"
)

# The rows a session derives from its messages, and then the rest of its rows, its own row last.
DELETE_DERIVED = [
    Statement(f"DELETE FROM {table} WHERE session_id = :sid")
    for table in (
        "prunestore_keys",
        "prunestore_hash_holders",
        "prunestore_refs",
        "prunestore_calls",
        "prunestore_covers",
    )
]
_DELETE_SESSION = DELETE_DERIVED + [
    Statement(f"DELETE FROM {table} WHERE session_id = :sid")
    for table in ("prunestore_erasures", "prunestore_messages", "prunestore_sessions")
]


def delete_rows(driver: Driver, sid: int) -> None:
    """Every row of the session, its own row last."""
    for statement in _DELETE_SESSION:
        driver.run(statement, {"sid": sid})
