"""SQLite connections as the store needs them: set up when opened, and transactions that say if they write.

WAL, ``synchronous=NORMAL`` and a busy timeout on every connection, with
deleted bytes overwritten; writers start with ``BEGIN IMMEDIATE`` so
concurrent appends queue on the database lock instead of failing half way.
Each connection also gets the function the recall index's triggers call,
where a store has one.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from .values import folded_stored

BUSY_TIMEOUT_MS = 30_000
WRITE = "prunestore_write"  # the execution option of a transaction that writes
FOLD = "prunestore_fold"  # what the recall index's triggers call: `values.folded_stored`


def configure(engine: Engine, *, read_only: bool = False) -> None:
    """Set up each connection the engine opens, and start each transaction as its execution options say."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # Let SQLAlchemy's "begin" event decide how transactions start.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not read_only:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA secure_delete = ON")  # what is deleted or erased is overwritten
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()
        dbapi_connection.create_function(FOLD, 2, folded_stored, deterministic=True)  # for the recall index

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(WRITE, False)
        raw = conn.connection.dbapi_connection
        assert raw is not None
        cursor = raw.cursor()
        cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        cursor.close()


def store_file(engine: Engine) -> Path | None:
    """The file of a SQLite store on disk (None for another backend)."""
    if engine.dialect.name != "sqlite":
        return None
    path = engine.url.database or ""
    return Path(path[len("file:") :] if path.startswith("file:") else path)
