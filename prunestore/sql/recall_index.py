"""The recall index: what lets a recall by words skip the rest of the session (docs/operations.md).

A store may have one (``prunestore db recall-index``); without it a recall
reads back through the session, a pass over its text when the only match is
near the start.

On SQLite it is an FTS5 table with the trigram tokenizer holding every
message's text as `casefold` gives it (what a recall compares), kept by
triggers on the messages table, so every way a message is written, copied,
erased or removed keeps it too. Each entry's rowid is ``number << 32 | seq``,
where `number` is the session's own in ``prunestore_recall_sessions`` (its
id, a 64-bit hash, leaves no room): a session's entries are one rowid range,
which FTS5 seeks to in each trigram's list, so a store of many sessions
costs a recall no more than one of a single session. The index narrows; it
never decides: a recall checks each message it names exactly, so it only
has to miss nothing. Any of a word's trigrams found in a message makes it a
candidate; a word too short for a trigram is looked for by reading.

On PostgreSQL it is two indexes the database keeps itself: a GIN index of
pg_trgm trigrams over the content with ASCII case folded (where a recall
looks for an ASCII word, as it does without the index), and a partial index
of the messages whose content is not plain ASCII (the rest of a recall's
candidates: there casefold can match what folding ASCII cannot). PostgreSQL
then plans each recall: through the trigrams for a rare word, back through
the session for a common one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from sqlalchemy.engine import Connection, Engine

from ..errors import InvalidArgumentError
from ..model import StoredMessage
from . import db
from .driver import Driver, Statement
from .sqlite_setup import FOLD
from .values import folded

TABLE = "prunestore_recall"
NUMBERS = "prunestore_recall_sessions"
# The index's tables (FTS5's own beside it, and the sessions' numbers): none is in the metadata.
TABLES = frozenset({NUMBERS, TABLE, *(f"{TABLE}_{part}" for part in ("config", "content", "data", "idx"))})
_SEQ_BITS = 32
_MAX_TRIGRAMS = 24  # any of a word's trigrams narrows soundly; two dozen narrow as well as all

# Each session indexed gets a small number, its entries' high bits; an empty text is never looked up.
_NUMBERED = f"INSERT OR IGNORE INTO {NUMBERS} (session_id) SELECT new.session_id WHERE new.content <> '';"
_INDEX_NEW = (
    f"INSERT INTO {TABLE} (rowid, text) SELECT (number << {_SEQ_BITS}) | new.seq, "
    f"{FOLD}(new.content, new.content_escaped) FROM {NUMBERS} WHERE session_id = new.session_id AND new.content <> '';"
)
_UNINDEX_OLD = (
    f"DELETE FROM {TABLE} WHERE rowid = "
    f"(SELECT (number << {_SEQ_BITS}) | old.seq FROM {NUMBERS} WHERE session_id = old.session_id);"
)
_CREATE = [
    f"CREATE TABLE {NUMBERS} (number INTEGER PRIMARY KEY, session_id INTEGER NOT NULL UNIQUE)",
    # detail=none: no positions (a candidate is checked anyway), a third of the size; columnsize=0: no lengths.
    f"CREATE VIRTUAL TABLE {TABLE} USING fts5(text, tokenize = 'trigram case_sensitive 1', detail = none, "
    "columnsize = 0)",
    f"CREATE TRIGGER {TABLE}_insert AFTER INSERT ON prunestore_messages BEGIN {_NUMBERED} {_INDEX_NEW} END",
    f"CREATE TRIGGER {TABLE}_delete AFTER DELETE ON prunestore_messages BEGIN {_UNINDEX_OLD} END",
    f"CREATE TRIGGER {TABLE}_update AFTER UPDATE OF session_id, seq, content, content_escaped "
    f"ON prunestore_messages BEGIN {_UNINDEX_OLD} {_NUMBERED} {_INDEX_NEW} END",
    f"INSERT INTO {NUMBERS} (session_id) SELECT DISTINCT session_id FROM prunestore_messages WHERE content <> '' "
    "ORDER BY session_id",
    f"INSERT INTO {TABLE} (rowid, text) SELECT (number << {_SEQ_BITS}) | seq, {FOLD}(content, content_escaped) "
    f"FROM prunestore_messages JOIN {NUMBERS} USING (session_id) WHERE content <> ''",
]
# Also in migration 0021's downgrade, which drops the index where a store has one.
_DROP = [
    *(f"DROP TRIGGER IF EXISTS {TABLE}_{event}" for event in ("insert", "delete", "update")),
    f"DROP TABLE IF EXISTS {TABLE}",
    f"DROP TABLE IF EXISTS {NUMBERS}",
]


PG_TRIGRAMS = "prunestore_messages_trigrams"
PG_UNUSUAL = "prunestore_messages_unusual"
# Content a recall cannot look for an ASCII word in with ASCII case folding: escaped (NUL), or not ASCII.
# (PostgreSQL text holds no NUL, so the range from \x01 is every ASCII character it can hold.)
PG_UNUSUAL_CONTENT = "content_escaped = 1 OR content ~ '[^\\x01-\\x7F]'"
PG_FOLDED = 'lower(content COLLATE "C")'  # ASCII case folded, whatever the database's locale
_PG_CREATE = [
    # A short pending list (64 kB, not 4 MB): a recall reads all of it, and appends fill it between vacuums.
    f"CREATE INDEX IF NOT EXISTS {PG_TRIGRAMS} ON prunestore_messages USING gin ({PG_FOLDED} {{schema}}.gin_trgm_ops) "
    "WITH (gin_pending_list_limit = 64)",
    f"CREATE INDEX IF NOT EXISTS {PG_UNUSUAL} ON prunestore_messages (session_id, seq) WHERE {PG_UNUSUAL_CONTENT}",
]
_PG_DROP = [f"DROP INDEX IF EXISTS {PG_TRIGRAMS}", f"DROP INDEX IF EXISTS {PG_UNUSUAL}"]
_PG_TRGM_SCHEMA = (
    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
)


def create(engine: Engine) -> bool:
    """Give the store a recall index of every message's text; False when it already has one."""
    return _change(engine, "create the recall index", want=True)


def create_postgres(conn: Connection) -> None:
    """The indexes on PostgreSQL, installing pg_trgm first where it is not (a database owner may: it is trusted)."""
    schema = conn.exec_driver_sql(_PG_TRGM_SCHEMA).scalar()
    if schema is None:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        schema = conn.exec_driver_sql(_PG_TRGM_SCHEMA).scalar_one()
    for statement in _PG_CREATE:
        conn.exec_driver_sql(statement.format(schema='"' + schema.replace('"', '""') + '"'))


def drop(engine: Engine) -> bool:
    """Remove the store's recall index (recall then reads the session); False when it has none."""
    return _change(engine, "drop the recall index", want=False)


def _change(engine: Engine, doing: str, *, want: bool) -> bool:
    """Make the index present (`want`) or absent, in one write transaction; False when it already was."""
    _check(engine)
    db.ensure_schema(engine)
    with db.connection(engine, doing, write=True) as conn:
        if present(_driver(conn)) == want:
            return False
        postgres = conn.dialect.name == "postgresql"
        if want and postgres:
            create_postgres(conn)
        else:
            for statement in _CREATE if want else _PG_DROP if postgres else _DROP:
                conn.exec_driver_sql(statement)
    return True


def _driver(conn: Connection) -> Driver:
    return Driver(conn.connection.dbapi_connection, conn.dialect)


def _check(engine: Engine) -> None:
    if engine.dialect.name == "sqlite" and not _trigrams_available():
        raise InvalidArgumentError(f"sqlite {sqlite3.sqlite_version}: has no FTS5 trigram tokenizer (3.34 and later)")


def _trigrams_available() -> bool:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'trigram')")
    except sqlite3.Error:
        return False
    return True


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


_PRESENT = Statement(f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '{NUMBERS}'")
_PRESENT_PG = Statement(f"SELECT to_regclass('{PG_TRIGRAMS}') IS NOT NULL")
_NUMBER = Statement(f"SELECT number FROM {NUMBERS} WHERE session_id = :sid")
_NUMBER_SESSION = Statement(f"INSERT OR IGNORE INTO {NUMBERS} (session_id) VALUES (:sid)")
_ENTRIES = Statement(f"SELECT rowid, text FROM {TABLE} WHERE rowid >= :first AND rowid <= :last")
_UNINDEX = Statement(f"DELETE FROM {TABLE} WHERE rowid >= :first AND rowid <= :last")
_INDEX = Statement(f"INSERT INTO {TABLE} (rowid, text) VALUES (:rowid, :text)")
_OPTIMIZE = Statement(f"INSERT INTO {TABLE} ({TABLE}) VALUES ('optimize')")


def present(driver: Driver) -> bool:
    """Whether the store has the index."""
    return bool(driver.scalar(_PRESENT_PG if driver.postgres else _PRESENT, {}))


def present_in(engine: Engine) -> bool:
    """Whether the store has the index, read in a transaction of its own (`StoreNotFoundError` where there
    is no store: a read makes none)."""
    db.ensure_schema(engine, create=False)
    with db.connection(engine, "read whether there is a recall index") as conn:
        return present(_driver(conn))


def kept_by_triggers(driver: Driver) -> bool:
    """Whether the store has the index that prunestore keeps (SQLite's; PostgreSQL keeps its own)."""
    return not driver.postgres and present(driver)


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
    driver.run(_NUMBER_SESSION, {"sid": sid})
    found = number(driver, sid)
    assert found is not None
    driver.run(_UNINDEX, _range(found))
    driver.run_many(_INDEX, [{"rowid": entry(found, m.seq), "text": folded(m.content)} for m in messages if m.content])


def purge(driver: Driver) -> None:
    """Rewrite the index as one segment, so no entry removed from it survives in an older one (erasure)."""
    driver.run(_OPTIMIZE, {})
