"""Hash partitions of the per-session tables on PostgreSQL, by ``session_id``.

Every statement on one session filters on its id, so PostgreSQL prunes to
one partition at planning time, and each partition's indexes stay a
fraction of the whole. Partitioning rewrites the tables: it copies every
row into the new layout in one transaction (readers wait on its locks), so
it belongs at creation or in a maintenance window. The partition key is
the one a distributed PostgreSQL (Citus) shards by, so the same schema
goes on to several nodes (see the operations guide).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..errors import InvalidArgumentError, shorten
from . import db, recall_index
from .schema import CALLS, COVERS, HASH_HOLDERS, KEYS, MESSAGES, POSTGRES_INDEXES, REFS, SESSIONS

__all__ = ["partition", "partition_count", "PER_SESSION"]

PER_SESSION = (SESSIONS, MESSAGES, HASH_HOLDERS, KEYS, REFS, CALLS, COVERS)
MAX_PARTITIONS = 1024
_VIEW = "prunestore_live"
_COUNT = sa.text(
    "SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass(:table) "
    "AND EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = to_regclass(:table) AND c.relkind = 'p')"
)


def partition_count(conn: Connection) -> int:
    """How many hash partitions the sessions table has (0: not partitioned, or SQLite)."""
    if conn.dialect.name != "postgresql":
        return 0
    return conn.execute(_COUNT, {"table": SESSIONS.name}).scalar_one()


def partition(engine: Engine, count: int) -> None:
    """Make the per-session tables `count` hash partitions each, by ``session_id`` (PostgreSQL).

    Upgrades the schema first; keeps every row; a no-op when the tables
    already have `count` partitions. Run again with another count to
    repartition.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 2 <= count <= MAX_PARTITIONS:
        raise InvalidArgumentError(f"count={shorten(count)}: must be a whole number from 2 to {MAX_PARTITIONS}")
    if engine.dialect.name != "postgresql":
        raise InvalidArgumentError(f"url={db.shown_url(str(engine.url))}: partitions are PostgreSQL's; SQLite has none")
    db.ensure_schema(engine)
    with db.connection(engine, f"partition the tables into {count}", write=True) as conn:
        db.lock_schema(conn)
        if partition_count(conn) == count:
            return
        # Writers that committed before the lock are copied; those after it wait, then find the new tables.
        conn.exec_driver_sql(f"LOCK TABLE {', '.join(t.name for t in PER_SESSION)} IN ACCESS EXCLUSIVE MODE")
        view = conn.execute(sa.text("SELECT pg_get_viewdef(to_regclass(:v))"), {"v": _VIEW}).scalar_one()
        indexed = conn.execute(sa.text("SELECT to_regclass(:i) IS NOT NULL"), {"i": recall_index.PG_TRIGRAMS}).scalar()
        conn.exec_driver_sql(f"DROP VIEW {_VIEW}")
        for table in PER_SESSION:
            _rewrite(conn, table, count)
        if indexed:  # made on request, so not among the tables' own indexes
            recall_index.create_postgres(conn)
        conn.exec_driver_sql(f"CREATE VIEW {_VIEW} AS {view}")
        db.analyze_tables(conn)


def _rewrite(conn: Connection, table: sa.Table, count: int) -> None:
    """Copy `table` into a new partitioned table of the same name, constraints and indexes."""
    name, new = table.name, f"{table.name}_new"
    run = conn.exec_driver_sql
    run(f"CREATE TABLE {new} (LIKE {name} INCLUDING DEFAULTS) PARTITION BY HASH (session_id)")
    for remainder in range(count):
        bounds = f"FOR VALUES WITH (MODULUS {count}, REMAINDER {remainder})"
        run(f"CREATE TABLE {new}_p{remainder} PARTITION OF {new} {bounds}")
    run(f"INSERT INTO {new} SELECT * FROM {name}")
    run(f"DROP TABLE {name}")  # with its old partitions, if any
    run(f"ALTER TABLE {new} RENAME TO {name}")
    for remainder in range(count):
        run(f"ALTER TABLE {new}_p{remainder} RENAME TO {name}_p{remainder}")
    columns = ", ".join(c.name for c in table.primary_key.columns)
    run(f"ALTER TABLE {name} ADD CONSTRAINT {name}_pkey PRIMARY KEY ({columns})")
    for constraint in table.constraints:
        if isinstance(constraint, sa.UniqueConstraint):
            run(f"ALTER TABLE {name} ADD CONSTRAINT {constraint.name} UNIQUE ({', '.join(constraint.columns.keys())})")
    for index in table.indexes:
        conn.execute(sa.schema.CreateIndex(index))
    for create in POSTGRES_INDEXES.get(name, []):
        run(create)
