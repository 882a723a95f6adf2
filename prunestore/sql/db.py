"""Connections, transactions and migrations: the few places where backends differ.

* SQLite: WAL, ``synchronous=NORMAL`` and a busy timeout on every connection;
  writers start with ``BEGIN IMMEDIATE`` so concurrent appends queue on the
  database lock instead of failing half way.
* PostgreSQL (psycopg 3): writers lock their session's row with
  ``SELECT ... FOR UPDATE``; migrations hold an advisory lock.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine

from ..errors import (
    DatabaseError,
    InvalidArgumentError,
    InvalidRevisionError,
    PruneStoreError,
    StoreNotFoundError,
    shorten,
    wrap_database_errors,
)
from . import sqlite_setup
from .driver import Driver
from .schema import CALLS, COVERS, HASH_HOLDERS, KEYS, MESSAGES, REFS, SESSIONS, VERSION_TABLE

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "DEFAULT_URL",
    "resolve_url",
    "make_engine",
    "make_async_engine",
    "connection",
    "transaction",
    "upgrade",
    "downgrade",
    "lock_schema",
    "analyze_tables",
    "current_revision",
    "head_revision",
]

DEFAULT_URL = "sqlite:///prunestore.db"
_MIGRATION_LOCK = 0x7072756E  # "prun": the advisory lock id taken while migrating on PostgreSQL


def resolve_url(url: str | None) -> str:
    """The argument, else ``PRUNESTORE_URL``, else a SQLite file in the working directory.

    Plain ``postgresql://`` and ``postgres://`` URLs are taken to mean psycopg 3.
    """
    url = url or os.environ.get("PRUNESTORE_URL") or DEFAULT_URL
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain) :]
    return url


CONNECT_TIMEOUT_S = 10


def make_engine(url: str | None = None) -> Engine:
    """An engine set up for prunestore's locking on SQLite or PostgreSQL.

    PostgreSQL connections give up after ``CONNECT_TIMEOUT_S`` seconds on a
    server that does not answer; ``?connect_timeout=N`` in the URL sets another.
    """
    return _make(resolve_url(url), sa.create_engine, "postgres")


def make_async_engine(url: str | None = None) -> AsyncEngine:
    """An asyncio engine (aiosqlite, psycopg's async mode) set up like `make_engine`.

    A plain ``sqlite:///`` URL is taken to mean aiosqlite.
    """
    url = resolve_url(url)
    if url.startswith("sqlite:"):
        url = "sqlite+aiosqlite:" + url[len("sqlite:") :]

    def create(url: str, **options: Any) -> AsyncEngine:
        from sqlalchemy.ext.asyncio import create_async_engine  # needs greenlet: a missing one says which extra

        return create_async_engine(url, **options)

    return _make(url, create, "asyncio")


def in_memory(url: str) -> bool:
    """Whether `url` names an in-memory SQLite database (which lives and dies with its one connection)."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        return False
    database = parsed.database or ""
    return parsed.get_backend_name() == "sqlite" and (database in ("", ":memory:") or "mode=memory" in url)


def shown_url(url: str) -> str:
    """`url` as it may appear in a message: the password masked."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def _url_problem(url: str, exc: BaseException) -> str:
    """One line saying what is wrong with a URL SQLAlchemy could not use, and how to write it."""
    if "://" not in url:
        return f"not a database URL; for a SQLite file write sqlite:///{url}"
    scheme, rest = url.split("://", 1)
    if scheme.startswith("sqlite") and rest and not rest.startswith("/"):
        return (
            f"a SQLite URL has no host part: write {scheme}:///{rest} for a path relative to the working "
            f"directory, or {scheme}:////absolute/path.db"
        )
    if isinstance(exc, ValueError):
        return f"cannot read its host or port ({exc})"
    return str(exc).strip().splitlines()[0]


def _read_only_sqlite(url: sa.engine.URL) -> sa.engine.URL | None:
    """A SQLite file that exists but that this process may not write, or whose folder it may not write.

    WAL mode keeps two side files beside the database, so a database in a
    read-only folder (or on read-only media) cannot even be read the usual
    way. Such a file is opened read-only and immutable instead (no locks, no
    side files): reads work, and a write fails with "attempt to write a
    readonly database".
    """
    path = url.database
    if not path or path == ":memory:" or path.startswith("file:") or url.query.get("uri"):
        return None
    file = Path(path).resolve()
    if not file.is_file() or (os.access(file, os.W_OK) and os.access(file.parent, os.W_OK)):
        return None
    return url.set(database=f"file:{file}", query={**url.query, "mode": "ro", "immutable": "1", "uri": "true"})


def _make(url: str, create, extra: str):
    try:
        parsed = sa.engine.make_url(url)
        backend = parsed.get_backend_name()
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port or host SQLAlchemy cannot read
        raise PruneStoreError(f"url={shorten(shown_url(url), 200)}: {_url_problem(url, exc)}") from None
    if backend not in ("sqlite", "postgresql"):
        raise PruneStoreError(f"url={shown_url(url)!r}: only sqlite and postgresql URLs are supported")
    try:
        read_only = _read_only_sqlite(parsed) if backend == "sqlite" else None
    except OSError as exc:  # a path the system cannot look at: too long, a loop of links, ...
        raise PruneStoreError(f"url={shorten(shown_url(url), 200)}: {exc.strerror or exc}") from None
    options = {}
    if backend == "postgresql" and "connect_timeout" not in parsed.query:
        options["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        engine = create(read_only or url, **options)
    except ImportError as exc:  # a driver, or (asyncio) greenlet, is not installed
        missing = exc.name or ("greenlet" if "greenlet" in str(exc) else str(exc).splitlines()[0])
        raise PruneStoreError(
            f"url={shown_url(url)!r}: cannot open it without {missing}: install the {extra} extra "
            f"(python -m pip install '.[{extra}]' in prunestore's folder)"
        ) from exc
    except sa.exc.ArgumentError as exc:
        raise PruneStoreError(f"url={shown_url(url)!r}: cannot open ({_url_problem(url, exc)})") from exc
    if backend == "sqlite":
        sqlite_setup.configure(getattr(engine, "sync_engine", engine), read_only=read_only is not None)
    return engine


@contextmanager
def connection(engine: Engine, action: str, *, write: bool = False) -> Iterator[Connection]:
    """A SQLAlchemy transaction (for Alembic), committed on success; errors become `DatabaseError`.

    `write` takes SQLite's write lock up front (``BEGIN IMMEDIATE``).
    """
    with wrap_database_errors(action):
        with engine.connect() as conn:
            if write:
                conn = conn.execution_options(**{sqlite_setup.WRITE: True})
            with conn.begin():
                yield conn


# A PostgreSQL snapshot is taken by the transaction's first query, before that query waits for its
# locks: a reader queued behind `prunestore db partition` would see the new tables as they were before
# their rows were copied in, empty. LOCK TABLE takes no snapshot, so waiting in it first makes the
# snapshot follow the partition's commit. ONLY: a partitioned table's partitions need no lock of their own.
_SNAPSHOT_PG = (
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; LOCK TABLE ONLY "
    + ", ".join(table.name for table in (SESSIONS, MESSAGES, KEYS, HASH_HOLDERS, REFS, CALLS, COVERS))
    + " IN ACCESS SHARE MODE"
)
# On Citus, where `db partition` does not run, a lock of the distributed tables would lock every shard on
# every node: a snapshot there is the isolation level alone.
_SNAPSHOT_CITUS = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
_CITUS = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"


def _snapshot_statement(pooled: Any, driver: Driver) -> str:
    """The statement that begins a snapshot read on this connection: asked of the server once a connection."""
    known = pooled.info.get("prunestore_snapshot")
    if known is None:
        cursor = driver.raw.cursor()
        try:
            cursor.execute(_CITUS)
            (citus,) = cursor.fetchone()
        finally:
            cursor.close()
        driver.raw.rollback()  # the snapshot's statement must begin its transaction
        known = pooled.info["prunestore_snapshot"] = _SNAPSHOT_CITUS if citus else _SNAPSHOT_PG
    return known


@contextmanager
def transaction(
    engine: Engine, action: str, *, write: bool = False, snapshot: bool = False, pipelined: bool = False
) -> Iterator[Driver]:
    """A transaction on the driver's own connection, for the hot paths.

    The engine's pool hands out the connection; the transaction is begun and
    ended here, which costs a fraction of a SQLAlchemy `Connection` (0.03 ms
    against 0.1 ms on SQLite). `write` takes SQLite's write lock up front
    (``BEGIN IMMEDIATE``); `snapshot` makes every statement of a PostgreSQL
    reader see one snapshot (SQLite readers always do), taken once no schema
    change holds the tables. Driver errors become `DatabaseError`.

    `pipelined` runs a PostgreSQL transaction in psycopg's pipeline mode:
    statements go out when a result is read, and the writes that end it
    travel with the COMMIT, so an append costs two round trips (its reads,
    then its writes and the commit). Elsewhere it changes nothing.
    """
    with wrap_database_errors(action, engine.dialect.loaded_dbapi.Error):  # a pool's new connection raises these
        pooled = engine.raw_connection()
    try:
        # The DBAPI connection: the driver's own, or SQLAlchemy's adapter of an asyncio driver.
        driver = Driver(pooled.dbapi_connection, engine.dialect)
        with driver.errors_as(action):
            if engine.dialect.name == "sqlite":
                driver.execute_plain("BEGIN IMMEDIATE" if write else "BEGIN")
            elif snapshot:
                driver.execute_plain(_snapshot_statement(pooled, driver))
        if pipelined and driver.can_pipeline:
            with _pipelined(driver, action):
                yield driver
            return
        try:
            yield driver
        except BaseException:
            with driver.errors_as(action):
                driver.raw.rollback()
            raise
        with driver.errors_as(action):
            driver.raw.commit()
    except DatabaseError as exc:
        _forget_if_disconnected(engine, pooled, exc)
        raise
    finally:
        pooled.close()


@contextmanager
def _pipelined(driver: Driver, action: str) -> Iterator[None]:
    """A transaction in psycopg's pipeline mode whose BEGIN and COMMIT travel with its statements (psycopg
    begins one with a round trip of its own; in autocommit mode it sends ours, queued with the first reads)."""
    raw = driver.raw
    with driver.errors_as(action):
        raw.autocommit = True
    try:
        with driver.errors_as(action), raw.pipeline():  # a pipeline reports a failed write at its end
            driver.execute_plain("BEGIN")
            yield
            driver.execute_plain("COMMIT")
    except BaseException:
        with driver.errors_as(action):
            raw.rollback()  # a ROLLBACK where the transaction is still open
        raise
    finally:
        if not raw.closed:  # a lost connection is the pool's to discard
            with driver.errors_as(action):
                raw.autocommit = False  # as the pool lent it


def _forget_if_disconnected(engine: Engine, pooled: sa.PoolProxiedConnection, exc: DatabaseError) -> None:
    """After a lost connection (the server restarted, the network dropped), let no call use the pool's
    other connections of the same age either: they are reconnected on their next checkout, as SQLAlchemy
    does for its own statements. So one call fails, with one line, and the next ones work again."""
    cause = exc.__cause__
    while cause is not None and not isinstance(cause, engine.dialect.loaded_dbapi.Error):
        cause = cause.__cause__
    dbapi = pooled.dbapi_connection
    if cause is not None and engine.dialect.is_disconnect(cause, dbapi, None):
        engine.pool._invalidate(pooled, cause)


def _migrations_location() -> str:
    """Where the Alembic scripts are: inside the installed package, or beside it in a source checkout.

    The wheel installs the top-level ``migrations/`` folder as
    ``prunestore.migrations``. Run from a checkout's root, Python imports the
    checkout's ``prunestore/`` before the installed one, and there the
    migrations are the folder next to it.
    """
    try:
        return str(resources.files("prunestore.migrations"))
    except ModuleNotFoundError:
        beside = Path(__file__).resolve().parents[2] / "migrations"
        if (beside / "env.py").is_file():
            return str(beside)
        raise PruneStoreError("the prunestore.migrations package is missing: reinstall prunestore") from None


def _alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", _migrations_location())
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision the installed migrations know."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None, "prunestore ships at least one migration"
    return head


def current_revision(conn: Connection) -> str | None:
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def revisions() -> list[str]:
    """The revisions the installed migrations know, oldest first."""
    script = ScriptDirectory.from_config(_alembic_config())
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def _migrate(engine: Engine, action: str, revision: str, run) -> None:
    try:
        with connection(engine, action, write=True) as conn:
            lock_schema(conn)
            run(conn)
    except (CommandError, RevisionError) as exc:
        known = ", ".join(["base", *revisions(), "head"])
        raise InvalidRevisionError(f"revision={shorten(revision)}: {exc} (known: {known})") from None
    except RuntimeError as exc:  # a migration that cannot go on says why; its transaction is rolled back
        raise DatabaseError(f"{action} failed: {exc}") from exc


def lock_schema(conn: Connection) -> None:
    """On PostgreSQL, wait until no other process changes the schema, and keep others out until commit."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision`; a no-op when it is already there."""

    def run(conn: Connection) -> None:
        if revision == "head" and current_revision(conn) == head_revision():
            return
        command.upgrade(_alembic_config(conn), revision)
        analyze_tables(conn)  # fresh tables have no statistics; without them the planner may scan

    _migrate(engine, f"upgrade to {revision}", revision, run)


def analyze(engine: Engine) -> None:
    """Refresh PostgreSQL's planner statistics of the prunestore tables (a no-op on SQLite).

    A session created since the last ANALYZE is estimated at about one row,
    and then PostgreSQL may answer a statement on a range or list of seqs
    through the (session, id) index, reading the whole session (measured: a
    truncate at 100,000 messages took 129 ms instead of 5). Autovacuum's
    autoanalyze keeps the statistics fresh where it is on; after a bulk load,
    or where it is off, call this (``prunestore db analyze``).
    """
    with connection(engine, "analyze the tables", write=True) as conn:
        analyze_tables(conn)


_TABLES = sa.text(
    "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
    "AND relkind IN ('r', 'p') AND NOT relispartition AND starts_with(relname, 'prunestore_')"
)


def analyze_tables(conn: Connection) -> None:
    """ANALYZE the prunestore tables on PostgreSQL (a partitioned table with its partitions)."""
    if conn.dialect.name == "postgresql":
        tables = conn.execute(_TABLES).scalars().all()
        if tables:
            conn.exec_driver_sql("ANALYZE " + ", ".join(tables))


def downgrade(engine: Engine, revision: str) -> None:
    """Take the schema back to `revision` (``"base"`` removes every prunestore table)."""
    _migrate(
        engine, f"downgrade to {revision}", revision, lambda conn: command.downgrade(_alembic_config(conn), revision)
    )


def ensure_schema(engine: Engine, *, create: bool = True) -> None:
    """Upgrade an empty or older database; cheap when it is already current.

    Without `create`, a database that holds no store (or a SQLite file that
    does not exist) raises `StoreNotFoundError` and is left as it was.
    """
    path = None if in_memory(str(engine.url)) else sqlite_setup.store_file(engine)
    if path is not None and not path.exists() and not path.absolute().parent.is_dir():  # SQLite: "cannot open"
        raise InvalidArgumentError(
            f"url={shown_url(str(engine.url))!r}: there is no folder {str(path.absolute().parent)!r} to hold it"
        )
    if not create and path is not None and not path.exists():
        raise StoreNotFoundError(f"url={shown_url(str(engine.url))!r}: no such file, so no store to read")
    with connection(engine, "read schema version") as conn:
        current = current_revision(conn)
    if current is None and not create:
        raise StoreNotFoundError(
            f"url={shown_url(str(engine.url))!r}: no store to read, the database holds no prunestore tables"
        )
    if current != head_revision():
        upgrade(engine)
