"""Session ids computed from the names: 64-bit, and no unique index on the name.

Until now a sequence handed out 32-bit session ids and ``UNIQUE (name)``
kept names apart. Neither fits a database split by session (PostgreSQL's
hash partitions, Citus shards): a unique index must include the split
column, and one sequence serves every node. Each session's id becomes a
hash of its name, which any process computes; every per-session row is
moved to its session's new id, and the name keeps a plain index for pages
of names.

A database that was hash-partitioned since cannot go back below this
revision (PostgreSQL cannot enforce the old unique name there).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from hashlib import blake2b

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_PER_SESSION = ("prunestore_sessions", "prunestore_messages", "prunestore_hash_holders", "prunestore_keys")
_MAP = "prunestore_session_id_map"
_VIEW = (
    "CREATE VIEW prunestore_live AS "
    "SELECT s.name AS session, m.seq, m.id, m.role, m.turn, m.tokens, m.content "
    "FROM prunestore_messages m "
    "JOIN prunestore_sessions s ON s.session_id = m.session_id "
    "WHERE m.verdict IN ('kept', 'restored', 'pending')"
)


def _session_id(name: str) -> int:
    """`prunestore.sessionids.session_id` as of this revision (a test keeps the two equal)."""
    digest = blake2b(name.encode("utf-8"), digest_size=8, person=b"prunestore-sid").digest()
    return int.from_bytes(digest, "big", signed=True)


def _sessions_table(unique_name: bool) -> sa.Table:
    """The sessions table as SQLite holds it, for a batch copy (SQLite cannot drop a constraint in place)."""
    return sa.Table(
        "prunestore_sessions",
        sa.MetaData(),
        sa.Column("session_id", sa.Integer, primary_key=True, autoincrement=unique_name),
        sa.Column("name", sa.Text, nullable=False, unique=unique_name),
        sa.Column("current_turn", sa.BigInteger, nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("stamp", sa.BigInteger),
        *(
            sa.Column(column, sa.BigInteger, nullable=False, server_default="0")
            for column in (
                "prompt_tokens",
                "pending_tokens",
                "events",
                "prompt_cursor",
                "created_at",
                "updated_at",
            )
        ),
    )


def _move_ids(mapping: dict[int, int]) -> None:
    """Give every per-session row its session's new id, through a table of (old id, new id)."""
    clash = set(mapping.values()) & set(mapping)
    if clash:  # a new id equal to another session's old one would break the primary key mid-update
        raise RuntimeError(f"session id {clash.pop()} is both an old and a new id; no migration path is written")
    table = op.create_table(
        _MAP,
        sa.Column("old_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("new_id", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(table, [{"old_id": old, "new_id": new} for old, new in mapping.items()])
    for name in _PER_SESSION:
        op.execute(f"UPDATE {name} SET session_id = (SELECT new_id FROM {_MAP} WHERE old_id = {name}.session_id)")
    op.drop_table(_MAP)


def upgrade() -> None:
    conn = op.get_bind()
    sessions = conn.execute(sa.text("SELECT session_id, name FROM prunestore_sessions")).all()
    mapping = {old: _session_id(name) for old, name in sessions}
    holders: dict[int, str] = {}
    for old, name in sessions:
        other = holders.setdefault(mapping[old], name)
        if other != name:
            raise RuntimeError(f"sessions {other!r} and {name!r} hash to one id; rename one, then upgrade")
    op.execute("DROP VIEW prunestore_live")
    if conn.dialect.name == "postgresql":
        op.drop_constraint("prunestore_sessions_name_key", "prunestore_sessions", type_="unique")
        op.alter_column("prunestore_sessions", "session_id", server_default=None)
        op.execute("DROP SEQUENCE IF EXISTS prunestore_sessions_session_id_seq")
        for name in _PER_SESSION:
            op.alter_column(name, "session_id", type_=sa.BigInteger, existing_type=sa.Integer)
    else:
        with op.batch_alter_table("prunestore_sessions", recreate="always", copy_from=_sessions_table(False)):
            pass
    op.create_index("prunestore_sessions_name", "prunestore_sessions", ["name"])
    _move_ids(mapping)
    op.execute(_VIEW)


def downgrade() -> None:
    conn = op.get_bind()
    postgres = conn.dialect.name == "postgresql"
    if (
        postgres
        and conn.execute(
            sa.text("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass('prunestore_sessions')")
        ).scalar()
    ):
        raise RuntimeError("the tables are hash-partitioned: a unique name cannot be enforced below revision 0007")
    sessions = conn.execute(sa.text("SELECT session_id FROM prunestore_sessions ORDER BY created_at, name")).all()
    mapping = {sid: number for number, (sid,) in enumerate(sessions, start=1)}
    op.execute("DROP VIEW prunestore_live")
    op.drop_index("prunestore_sessions_name", table_name="prunestore_sessions")
    _move_ids(mapping)
    if postgres:
        for name in _PER_SESSION:
            op.alter_column(name, "session_id", type_=sa.Integer, existing_type=sa.BigInteger)
        op.execute(
            "CREATE SEQUENCE prunestore_sessions_session_id_seq AS integer OWNED BY prunestore_sessions.session_id"
        )
        next_id = sa.text("SELECT setval('prunestore_sessions_session_id_seq', :n, false)")
        op.execute(next_id.bindparams(n=len(sessions) + 1))
        op.alter_column(
            "prunestore_sessions", "session_id", server_default=sa.text("nextval('prunestore_sessions_session_id_seq')")
        )
        op.create_unique_constraint("prunestore_sessions_name_key", "prunestore_sessions", ["name"])
    else:
        with op.batch_alter_table("prunestore_sessions", recreate="always", copy_from=_sessions_table(True)):
            pass
    op.execute(_VIEW)
