"""The recall index on SQLite: every message's text, case folded, by trigram (docs/api.md, "Recall").

An FTS5 table with the trigram tokenizer finds the messages that may hold a
word without reading the rest of the session: a recall whose only match is
near the start costs what a recent one does. Triggers on the messages table
keep it, so every way a message is written, copied, erased or removed keeps
it too. Each entry's rowid is ``number << 32 | seq``, where `number` is the
session's own in ``prunestore_recall_sessions`` (its id, a 64-bit hash, leaves
no room): a session's entries are one rowid range, which FTS5 seeks to in
each trigram's list, so a store of many sessions costs a recall no more than
one of a single session.

The index narrows; it never decides. It holds the content as `casefold`
gives it (what a recall compares), and a recall checks each message it
names exactly, so it only has to miss nothing: any of a word's trigrams
found in a message is a candidate, and a word too short for a trigram is
looked for by reading the session instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from ..model import StoredMessage
from .driver import Driver, Statement
from .values import decode_content

TABLE = "prunestore_recall"
NUMBERS = "prunestore_recall_sessions"
# The tables FTS5 keeps for the index, and the sessions' numbers: SQLite's alone, none in the metadata.
SQLITE_TABLES = frozenset(
    {NUMBERS, TABLE, *(f"{TABLE}_{part}" for part in ("config", "content", "data", "docsize", "idx"))}
)
FOLD = "prunestore_fold"
_SEQ_BITS = 32
_MAX_TRIGRAMS = 24  # any of a word's trigrams narrows soundly; two dozen narrow as well as all


def fold(content: str, escaped: int) -> str:
    """The text the index holds for a message stored as `content`, escaped or not (what the triggers call)."""
    return folded(decode_content(content, escaped))


def folded(content: str) -> str:
    """A message's content as the index holds it: casefolded, NUL (never in a trigram looked for) a space."""
    return content.casefold().replace("\x00", " ")


def register(dbapi_connection: Any) -> None:
    """Give a SQLite connection the fold the triggers call (each connection that writes messages needs it)."""
    dbapi_connection.create_function(FOLD, 2, fold, deterministic=True)


def entry(number: int, seq: int) -> int:
    return number << _SEQ_BITS | seq


def _range(number: int) -> dict[str, int]:
    """The first and last rowid a session numbered `number` can have."""
    return {"first": entry(number, 0), "last": entry(number, (1 << _SEQ_BITS) - 1)}


def seq_of(rowid: int) -> int:
    return rowid & ((1 << _SEQ_BITS) - 1)


def indexable(word: str) -> bool:
    """Whether the index can look for `word` (already casefolded): three characters or more, no NUL."""
    return len(word) >= 3 and "\x00" not in word


def match_expression(words: tuple[str, ...]) -> str | None:
    """The FTS5 query naming the trigrams of the words that can be looked up, or None when none can."""
    trigrams = sorted({word[i : i + 3] for word in words if indexable(word) for i in range(len(word) - 2)})
    if not trigrams:
        return None
    step = max(1, len(trigrams) // _MAX_TRIGRAMS)
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in trigrams[::step][:_MAX_TRIGRAMS])


def available() -> bool:
    """Whether this SQLite has FTS5's trigram tokenizer (3.34 and later, with FTS5 compiled in)."""
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'trigram')")
    except sqlite3.Error:
        return False
    return True


_PRESENT = Statement(f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '{NUMBERS}'")
_NUMBER = Statement(f"SELECT number FROM {NUMBERS} WHERE session_id = :sid")
_NUMBERED = Statement(f"INSERT OR IGNORE INTO {NUMBERS} (session_id) VALUES (:sid)")
_ENTRIES = Statement(f"SELECT rowid, text FROM {TABLE} WHERE rowid >= :first AND rowid <= :last")
_UNINDEX = Statement(f"DELETE FROM {TABLE} WHERE rowid >= :first AND rowid <= :last")
_INDEX = Statement(f"INSERT INTO {TABLE} (rowid, text) VALUES (:rowid, :text)")
_OPTIMIZE = Statement(f"INSERT INTO {TABLE} ({TABLE}) VALUES ('optimize')")


def present(driver: Driver) -> bool:
    """Whether the store has the index (SQLite with FTS5's trigram tokenizer)."""
    return not driver.postgres and bool(driver.scalar(_PRESENT, {}))


def number(driver: Driver, sid: int) -> int | None:
    """The session's number in the index; None while it has held no text."""
    return driver.scalar(_NUMBER, {"sid": sid})


def differences(
    driver: Driver, sid: int, messages: Iterable[StoredMessage]
) -> list[tuple[int, str | None, str | None]]:
    """Each seq of the session whose entry is not its message's folded text: (seq, entry held, entry wanted)."""
    found = number(driver, sid)
    held = {} if found is None else {seq_of(r): text for r, text in driver.all(_ENTRIES, _range(found))}
    wanted = {m.seq: folded(m.content) for m in messages if m.content}
    return [
        (seq, held.get(seq), wanted.get(seq))
        for seq in sorted(held.keys() | wanted.keys())
        if held.get(seq) != wanted.get(seq)
    ]


def reindex(driver: Driver, sid: int, messages: Iterable[StoredMessage]) -> None:
    """Write the session's entries again from its messages."""
    driver.run(_NUMBERED, {"sid": sid})
    found = number(driver, sid)
    assert found is not None
    driver.run(_UNINDEX, _range(found))
    driver.run_many(_INDEX, [{"rowid": entry(found, m.seq), "text": folded(m.content)} for m in messages if m.content])


def purge(driver: Driver) -> None:
    """Rewrite the index as one segment, so no entry removed from it survives in an older one (erasure)."""
    driver.run(_OPTIMIZE, {})
