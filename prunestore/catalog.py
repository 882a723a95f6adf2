"""The store's sessions as a catalog: listed a page at a time, and removed when idle.

Pages are keyed by name (``name > :after ORDER BY name LIMIT n``), so a page
costs the same at any depth and a session created or removed meanwhile
never shifts the next one. Last writes are Unix seconds on the session row
(every write sets it); idleness is measured against them.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta

from .errors import InvalidArgumentError, shorten
from .model import storable_text_problem
from .results import SessionSummary
from .sql.driver import Driver, Statement
from .sql.rows import SUMMARY_COLUMNS, session_summary
from .sql.sessions import delete_rows

_NO_LIMIT = 2**62
# A removal transaction also ends once it has removed this many messages: on SQLite
# it holds the write lock, and long sessions would make other writers wait.
BATCH_MESSAGES = 2000

# The filters a page may have, each only when asked for: an always-true condition
# would still cost PostgreSQL its estimate, and with it the index scan in name order.
# The prefix is compared as a leading substring, not with LIKE: no escaping, and
# case-sensitive on both backends.
_PREFIX = " AND substr(name, 1, :prefix_length) = :prefix"
_IDLE = " AND updated_at < :cutoff"


def _page(columns: str, prefix: bool, idle: bool) -> Statement:
    """A page of sessions in name order after `:after`, with the filters asked for."""
    return Statement(
        f"SELECT {columns} FROM prunestore_sessions WHERE name > :after"
        + (_PREFIX if prefix else "")
        + (_IDLE if idle else "")
        + " ORDER BY name LIMIT :limit"
    )


_NAMES = {(prefix, idle): _page("name", prefix, idle) for prefix in (False, True) for idle in (False, True)}
_SUMMARIES = {
    (prefix, idle): _page(SUMMARY_COLUMNS, prefix, idle) for prefix in (False, True) for idle in (False, True)
}
# Pages in another order: the largest first (by a column of the summary), ties by name; the next page
# starts after the last row's (value, name). They sort every session row matching: an operator's page.
ORDERS = {"messages": "last_seq", "tokens": "tokens", "live_tokens": "live_tokens", "updated_at": "updated_at"}
_SORTED = {
    (order, prefix, after): Statement(
        f"SELECT {SUMMARY_COLUMNS} FROM prunestore_sessions WHERE name > ''"
        + (_PREFIX if prefix else "")
        + (f" AND ({column} < :after_value OR ({column} = :after_value AND name > :after))" if after else "")
        + f" ORDER BY {column} DESC, name LIMIT :limit"
    )
    for order, column in ORDERS.items()
    for prefix in (False, True)
    for after in (False, True)
}
_COUNT = {
    prefix: Statement("SELECT count(*) FROM prunestore_sessions" + (" WHERE name > ''" + _PREFIX if prefix else ""))
    for prefix in (False, True)
}
# For removal: the page's sessions with their message counts (seqs run from 1 without gaps).
IDLE_PAGE = _page("name, session_id, last_seq", prefix=False, idle=True)
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
        page.update(prefix=prefix, prefix_length=len(prefix))
    if idle_for is not None:
        page["cutoff"] = idle_cutoff(idle_for)
    return page


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
    return [name for (name,) in driver.all(_NAMES["prefix" in page, "cutoff" in page], page)]


def list_summaries(driver: Driver, page: dict, order: str = "name") -> list[SessionSummary]:
    """A page of sessions with their counts, each read from the session's own row, in `order`."""
    if order == "name":
        statement = _SUMMARIES["prefix" in page, "cutoff" in page]
    else:
        statement = _SORTED[order, "prefix" in page, "after_value" in page]
    return [session_summary(row) for row in driver.all(statement, page)]


def count_sessions(driver: Driver, page: dict) -> int:
    """How many sessions a page's prefix matches (every session without one)."""
    return int(driver.scalar(_COUNT["prefix" in page], page) or 0)


def remove_idle(driver: Driver, page: dict, dry_run: bool) -> tuple[list[tuple[str, int]], str | None]:
    """One transaction of removal: each idle session removed, with its messages, and the last name looked at.

    Looks at one page (`batch_size` names) and stops early once
    `BATCH_MESSAGES` messages are removed; the next page starts after the
    last name looked at (None: there was nothing left).
    """
    removed: list[tuple[str, int]] = []
    last = None
    count = 0
    for name, session_id, last_seq in driver.all(IDLE_PAGE, page):
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
