"""Times as prunestore stores them, and the prompt cache's expiry measured between two of them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def micros(at: datetime) -> int:
    """A message's time as stored: whole microseconds since 1970 (UTC), exactly what a datetime holds
    (every datetime fits a 64-bit integer so)."""
    return (at - EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def past_ttl(before: datetime | int | None, at: datetime | int | None, ttl: int | None) -> bool:
    """Whether `at` comes more than `ttl` seconds after `before`: the prompt cache's expiry
    (docs/semantics.md, "Cache expiry"). Times are datetimes, or stored microseconds; False where one is unknown."""
    if ttl is None or before is None or at is None:
        return False
    gap: Any = at - before  # type: ignore[operator]  # both datetimes or both microseconds
    return bool(gap > (timedelta(seconds=ttl) if isinstance(gap, timedelta) else ttl * 1_000_000))
