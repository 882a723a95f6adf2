"""Summaries: what a summary stands for, and who covers each message.

A message with ``summarizes`` (docs/semantics.md, "Summaries") stores the
ids it names as JSON (``summarizes``), how many of them the budget keeps
evicted (``gaps``: while above 0 the summary is needed) and where it stands
in the prompt (``place``: the place of the first message it covers, which is
that message's seq, or its own place for a summary). ``prunestore_covers``
holds one row per (covered message, summary), so an eviction finds the
summaries that cover a message; a session's row counts its summaries, so a
session without any looks nothing up. Nothing stored before this revision
is a summary, so nothing is copied in. On a store whose tables are
hash-partitioned, the new table is partitioned the same way.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_PARTITIONS = sa.text(
    "SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass('prunestore_messages') "
    "AND EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = to_regclass('prunestore_messages') AND c.relkind = 'p')"
)


def upgrade() -> None:
    conn = op.get_bind()
    postgres = conn.dialect.name == "postgresql"
    partitions = conn.execute(_PARTITIONS).scalar() if postgres else 0
    if partitions:
        conn.exec_driver_sql(
            "CREATE TABLE prunestore_covers (session_id BIGINT NOT NULL, seq BIGINT NOT NULL, "
            "summary_seq BIGINT NOT NULL, "
            "CONSTRAINT prunestore_covers_pkey PRIMARY KEY (session_id, seq, summary_seq)) "
            "PARTITION BY HASH (session_id)"
        )
        for remainder in range(partitions):
            conn.exec_driver_sql(
                f"CREATE TABLE prunestore_covers_p{remainder} PARTITION OF prunestore_covers "
                f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder})"
            )
    else:
        op.create_table(
            "prunestore_covers",
            sa.Column(
                "session_id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                primary_key=True,
                autoincrement=False,
            ),
            sa.Column("seq", sa.BigInteger, primary_key=True),
            sa.Column("summary_seq", sa.BigInteger, primary_key=True),
            sqlite_with_rowid=False,
        )
    op.add_column("prunestore_messages", sa.Column("summarizes", sa.Text, nullable=True))
    op.add_column("prunestore_messages", sa.Column("gaps", sa.Integer, nullable=True))
    op.add_column("prunestore_messages", sa.Column("place", sa.BigInteger, nullable=True))
    op.add_column("prunestore_sessions", sa.Column("summary_count", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("prunestore_sessions", "summary_count")
    op.drop_column("prunestore_messages", "place")
    op.drop_column("prunestore_messages", "gaps")
    op.drop_column("prunestore_messages", "summarizes")
    op.drop_table("prunestore_covers")
