"""A session's id, computed from its name.

Every per-session row carries ``session_id`` first in its key, and every
statement on one session filters on it. Because any process (or any node of
a distributed PostgreSQL) computes the id from the name alone, no sequence
hands ids out and no global unique index on the name is needed: the tables
can be hash-partitioned or distributed by ``session_id``, and each
statement on one session reaches one partition or shard.

The id is the first 8 bytes of a keyed BLAKE2b of the UTF-8 name, as a
signed 64-bit integer (both backends' BIGINT). Two names share an id with
odds of about n²/2⁶⁵ among n sessions (3 in 10¹² for a million); the store
checks the name on every lookup, so a collision is reported
(`SessionIdCollisionError`), never two sessions merged. The function must
never change: ids are stored.
"""

from __future__ import annotations

from hashlib import blake2b

_PERSON = b"prunestore-sid"


def session_id(name: str) -> int:
    """The id of the session called `name`."""
    digest = blake2b(name.encode("utf-8"), digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "big", signed=True)
