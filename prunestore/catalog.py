"""The store's sessions as a catalog: listed a page at a time, and removed when idle.

Pages are keyed by name (``name > :after ORDER BY name LIMIT n``, names in
code point order on both backends), so a page
costs the same at any depth and a session created or removed meanwhile
never shifts the next one. Last writes are Unix seconds on the session row
(every write sets it); idleness is measured against them.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta

from .errors import InvalidArgumentError, shorten
from .model import MAX_SESSION_NAME, storable_text_problem
from .results import SessionSummary
from .sql.driver import Driver, Statement
from .sql.rows import session_summary
from .sql.session_row import SUMMARY_COLUMNS
from .sql.sessions import delete_rows

_NO_LIMIT = 2**62
# A removal transaction also ends once it has removed this many messages: on SQLite
# it holds the write lock, and long sessions would make other writers wait.
BATCH_MESSAGES = 2000

# Names are ordered by code point (their UTF-8 bytes) on both backends: SQLite compares bytes, and
# PostgreSQL compares `name COLLATE "C"`, served by an index of its own (migration 0011), whatever the
# database's collation. A prefix is then a range of that order, [prefix, prefix_end): a page of it reads
# what it returns. Filters come only when asked for: an always-true condition would still cost
# PostgreSQL its estimate, and with it the index scan in name order.
_NAME = {False: "name", True: 'name COLLATE "C"'}  # by backend: PostgreSQL or not


def _prefix(postgres: bool, lower: bool = True) -> str:
    """The range of a prefix; without `lower`, its end only (the page's start is then its lower bound)."""
    name = _NAME[postgres]
    return (f" AND {name} >= :prefix" if lower else "") + f" AND {name} < :prefix_end"


_IDLE = " AND updated_at < :cutoff"


def _page(columns: str, postgres: bool, prefix: bool, idle: bool, at_prefix: bool = False) -> Statement:
    """A page of sessions in name order after `:after` (or, `at_prefix`, from the prefix on), with the filters
    asked for. One lower bound only: SQLite bounds its index scan by one of them, not by the larger."""
    name = _NAME[postgres]
    return Statement(
        f"SELECT {columns} FROM prunestore_sessions WHERE "
        + (f"{name} >= :prefix" if at_prefix else f"{name} > :after")
        + (_prefix(postgres, lower=False) if prefix else "")
        + (_IDLE if idle else "")
        + f" ORDER BY {name} LIMIT :limit"
    )


_CASES = [
    (postgres, prefix, idle, at_prefix)
    for postgres in (False, True)
    for prefix in (False, True)
    for idle in (False, True)
    for at_prefix in ((False, True) if prefix else (False,))
]
_NAMES = {case: _page("name", *case) for case in _CASES}
_SUMMARIES = {case: _page(SUMMARY_COLUMNS, *case) for case in _CASES}


def _case(driver: Driver, page: dict) -> tuple[bool, bool, bool, bool]:
    """Which page statement: the backend, a prefix, idleness, and whether the page starts at the prefix."""
    prefix = "prefix" in page
    return driver.postgres, prefix, "cutoff" in page, prefix and page["after"] < page["prefix"]


# Pages in another order: the largest first (by a column of the summary), ties by name; the next page
# starts after the last row's (value, name). They sort every session row matching: an operator's page.
ORDERS = {"messages": "last_seq", "tokens": "tokens", "live_tokens": "live_tokens", "updated_at": "updated_at"}
_SORTED = {
    (order, postgres, prefix, after): Statement(
        f"SELECT {SUMMARY_COLUMNS} FROM prunestore_sessions WHERE "
        + (f"{_NAME[postgres]} >= :prefix" + _prefix(postgres, lower=False) if prefix else f"{_NAME[postgres]} > ''")
        + (
            f" AND ({column} < :after_value OR ({column} = :after_value AND {_NAME[postgres]} > :after))"
            if after
            else ""
        )
        + f" ORDER BY {column} DESC, {_NAME[postgres]} LIMIT :limit"
    )
    for order, column in ORDERS.items()
    for postgres in (False, True)
    for prefix in (False, True)
    for after in (False, True)
}
_COUNT = {
    (postgres, prefix): Statement(
        "SELECT count(*) FROM prunestore_sessions"
        + (f" WHERE {_NAME[postgres]} >= :prefix" + _prefix(postgres, lower=False) if prefix else "")
    )
    for postgres in (False, True)
    for prefix in (False, True)
}
# For removal: the page's sessions with their message counts (seqs run from 1 without gaps).
IDLE_PAGE = {
    postgres: _page("name, session_id, last_seq", postgres, prefix=False, idle=True) for postgres in (False, True)
}
# PostgreSQL then locks each session's row by its id (so the statement runs on one
# shard of a distributed database); a row another writer changed meanwhile is
# checked again after the wait, and left out if it is no longer idle.
STILL_IDLE_PG = Statement(
    "SELECT last_seq FROM prunestore_sessions WHERE session_id = :sid AND updated_at < :cutoff FOR UPDATE"
)


def page_params(prefix: object, idle_for: object, limit: object, after: object, limit_field: str = "limit") -> dict:
    """The parameters of one page's statement, once every argument is checked."""
    if prefix is not None:
        check_text("prefix", prefix, "a string")
    if after is not None:
        check_text("after", after, "a session name")
    if limit is not None:
        check_whole(limit_field, limit, 1)
    page: dict = {"after": after or "", "limit": limit if limit is not None else _NO_LIMIT}  # names are never empty
    if isinstance(prefix, str) and prefix:
        page.update(prefix=prefix, prefix_end=prefix_end(prefix))
    if idle_for is not None:
        page["cutoff"] = idle_cutoff(idle_for)
    return page


def prefix_end(prefix: str) -> str:
    """The first string in code point order after every string that starts with `prefix`.

    Its last character that is not the largest code point, one up (past the
    surrogates, which no stored text holds), with what follows it dropped;
    after a prefix of nothing but the largest code point, only longer such strings come.
    """
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i])
        if code < 0x10FFFF:
            following = code + 1 if code + 1 != 0xD800 else 0xE000
            return prefix[:i] + chr(following)
    return "\U0010ffff" * (MAX_SESSION_NAME + 1)  # no name is this long: every one with the prefix is below it


MOST = 2**62  # the largest count or seq an argument may give: sums of two stay within 64-bit integers


def check_whole(field: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MOST:
        raise InvalidArgumentError(f"{field}={shorten(value)}: must be a whole number from {least} to 2**62")


def check_text(field: str, value: object, what: str) -> None:
    """A name or prefix to look sessions up by: a string a session name could hold (no NUL, UTF-8)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{field}={shorten(value)}: must be {what}")
    problem = storable_text_problem(value)
    if problem:
        raise InvalidArgumentError(f"{field}={shorten(value)}: {problem}")


def idle_cutoff(idle_for: object) -> int:
    """The last-write time before which a session has been idle for `idle_for` (a timedelta or seconds)."""
    seconds = idle_for.total_seconds() if isinstance(idle_for, timedelta) else idle_for
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(f"idle_for={shorten(idle_for)}: must be a timedelta or seconds, at least 0")
    # Last writes are whole seconds: a session counts as idle when its last write's second is this far back.
    # Longer ago than any time a row holds is as good as never: the bound keeps it a 64-bit integer.
    return max(math.floor(time.time() - min(seconds, MOST)) + 1, -MOST)


def list_names(driver: Driver, page: dict) -> list[str]:
    return [name for (name,) in driver.all(_NAMES[_case(driver, page)], page)]


def list_summaries(driver: Driver, page: dict, order: str = "name") -> list[SessionSummary]:
    """A page of sessions with their counts, each read from the session's own row, in `order`."""
    if order == "name":
        statement = _SUMMARIES[_case(driver, page)]
    else:
        statement = _SORTED[order, driver.postgres, "prefix" in page, "after_value" in page]
    return [session_summary(row) for row in driver.all(statement, page)]


def count_sessions(driver: Driver, page: dict) -> int:
    """How many sessions a page's prefix matches (every session without one)."""
    return int(driver.scalar(_COUNT[driver.postgres, "prefix" in page], page) or 0)


def remove_idle(driver: Driver, page: dict, dry_run: bool) -> tuple[list[tuple[str, int]], str | None]:
    """One transaction of removal: each idle session removed, with its messages, and the last name looked at.

    Looks at one page (`batch_size` names) and stops early once
    `BATCH_MESSAGES` messages are removed; the next page starts after the
    last name looked at (None: there was nothing left).
    """
    removed: list[tuple[str, int]] = []
    last = None
    count = 0
    for name, session_id, last_seq in driver.all(IDLE_PAGE[driver.postgres], page):
        last = name
        if driver.postgres and not dry_run:  # SQLite's writer already holds the database
            last_seq = driver.scalar(STILL_IDLE_PG, {"sid": session_id, "cutoff": page["cutoff"]})
            if last_seq is None:
                continue
        if not dry_run:
            delete_rows(driver, session_id)
        removed.append((name, last_seq))
        count += last_seq
        if count >= BATCH_MESSAGES:
            break
    return removed, last
