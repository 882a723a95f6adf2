"""An index of who refers to each key: one row per key a message refers to.

`explain` names the messages in the prompt that a restored definer is
needed by; it read the references of every such message of the session,
and now reads the rows of the keys it names. Each message's effective refs
(``eff_refs``, the keys its references count for) are copied in. On a
store whose tables are hash-partitioned, the new table is partitioned the
same way.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_BATCH = 10_000
_PARTITIONS = sa.text(
    "SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass('prunestore_messages') "
    "AND EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = to_regclass('prunestore_messages') AND c.relkind = 'p')"
)
_READ = sa.text(
    "SELECT session_id, seq, eff_refs FROM prunestore_messages WHERE eff_refs <> '' "
    "AND (session_id > :sid OR (session_id = :sid AND seq > :seq)) ORDER BY session_id, seq LIMIT :limit"
)
_INSERT = sa.text("INSERT INTO prunestore_refs (session_id, key, seq) VALUES (:sid, :key, :seq)")


def upgrade() -> None:
    conn = op.get_bind()
    postgres = conn.dialect.name == "postgresql"
    partitions = conn.execute(_PARTITIONS).scalar() if postgres else 0
    if partitions:
        conn.exec_driver_sql(
            "CREATE TABLE prunestore_refs (session_id BIGINT NOT NULL, key TEXT NOT NULL, seq BIGINT NOT NULL, "
            "CONSTRAINT prunestore_refs_pkey PRIMARY KEY (session_id, key, seq)) PARTITION BY HASH (session_id)"
        )
        for remainder in range(partitions):
            conn.exec_driver_sql(
                f"CREATE TABLE prunestore_refs_p{remainder} PARTITION OF prunestore_refs "
                f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder})"
            )
    else:
        op.create_table(
            "prunestore_refs",
            sa.Column(
                "session_id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                primary_key=True,
                autoincrement=False,
            ),
            sa.Column("key", sa.Text, primary_key=True),
            sa.Column("seq", sa.BigInteger, primary_key=True),
            sqlite_with_rowid=False,
        )
    sid, seq = -(2**63), 0
    while True:
        rows = conn.execute(_READ, {"sid": sid, "seq": seq, "limit": _BATCH}).all()
        if not rows:
            break
        refs = [{"sid": s, "key": key, "seq": q} for s, q, text in rows for key in sorted(set(text.split()))]
        conn.execute(_INSERT, refs)
        sid, seq = rows[-1][0], rows[-1][1]


def downgrade() -> None:
    op.drop_table("prunestore_refs")
