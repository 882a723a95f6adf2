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

from .driver import Driver, Statement
from .errors import InvalidArgumentError, shorten

__all__ = ["page_params", "idle_cutoff", "list_names", "IDLE_PAGE", "IDLE_PAGE_PG"]

_NO_LIMIT = 2**62
_FOREVER = 2**62

# One text for every combination: an empty prefix matches every name, an empty
# `after` precedes every name (names are never empty), and the sentinels above
# stand for "no limit" and "any last write". The prefix is compared as a
# leading substring, not with LIKE: no escaping, and case-sensitive on both backends.
_FILTER = "WHERE name > :after AND substr(name, 1, :prefix_length) = :prefix AND updated_at < :cutoff ORDER BY name"
_NAMES = Statement(f"SELECT name FROM prunestore_sessions {_FILTER} LIMIT :limit")
# For removal: the page's sessions with their message counts (seqs run from 1 without gaps).
IDLE_PAGE = Statement(f"SELECT name, session_id, last_seq FROM prunestore_sessions {_FILTER} LIMIT :limit")
# PostgreSQL locks the page's rows; a row another writer changed meanwhile is
# checked again after the wait, and left out if it is no longer idle.
IDLE_PAGE_PG = Statement(IDLE_PAGE.text + " FOR UPDATE")


def page_params(prefix: object, idle_for: object, limit: object, after: object, limit_field: str = "limit") -> dict:
    """The parameters of one page's statement, once every argument is checked."""
    if prefix is not None and not isinstance(prefix, str):
        raise InvalidArgumentError(f"prefix={shorten(prefix)}: must be a string")
    if after is not None and not isinstance(after, str):
        raise InvalidArgumentError(f"after={shorten(after)}: must be a session name")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidArgumentError(f"{limit_field}={shorten(limit)}: must be a whole number, at least 1")
    prefix = prefix or ""
    return {
        "after": after or "",
        "prefix": prefix,
        "prefix_length": len(prefix),
        "cutoff": idle_cutoff(idle_for) if idle_for is not None else _FOREVER,
        "limit": limit if limit is not None else _NO_LIMIT,
    }


def idle_cutoff(idle_for: object) -> int:
    """The last-write time before which a session has been idle for `idle_for` (a timedelta or seconds)."""
    seconds = idle_for.total_seconds() if isinstance(idle_for, timedelta) else idle_for
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(f"idle_for={shorten(idle_for)}: must be a timedelta or seconds, at least 0")
    # Last writes are whole seconds: a session counts as idle when its last write's second is this far back.
    return math.floor(time.time() - seconds) + 1


def list_names(driver: Driver, page: dict) -> list[str]:
    return [name for (name,) in driver.all(_NAMES, page)]
