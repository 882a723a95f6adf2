"""An index of tool calls: one row per call id a message makes or answers.

A prompt (`render`, a framework's view read afresh) was read from every
message of the session, since whether a message goes out can depend on
pruned ones: a call goes out only with its result. It is now read from the
live messages, the last ones, and the messages that make or answer the
calls they name, found through this index. Each message's call ids are read
from its provider metadata and copied in. On a store whose tables are
hash-partitioned, the new table is partitioned the same way.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_BATCH = 10_000
_PARTITIONS = sa.text(
    "SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass('prunestore_messages') "
    "AND EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = to_regclass('prunestore_messages') AND c.relkind = 'p')"
)
_READ = sa.text(
    "SELECT session_id, seq, metadata FROM prunestore_messages WHERE metadata IS NOT NULL "
    "AND (session_id > :sid OR (session_id = :sid AND seq > :seq)) ORDER BY session_id, seq LIMIT :limit"
)
_INSERT = sa.text("INSERT INTO prunestore_calls (session_id, call_id, seq) VALUES (:sid, :call_id, :seq)")
# The call ids a message's metadata names, as the store read them when this revision was written: a
# revision's meaning never changes with the code around it.
_ID_KEYS = ("tool_call_id", "tool_use_id", "call_id")
_CALL_TYPES = ("tool_use", "server_tool_use", "mcp_tool_use", "tool_call", "function_call", "function")


def call_ids(metadata):
    found = set()
    todo = [(metadata, False)]
    while todo:
        value, in_calls = todo.pop()
        if isinstance(value, dict):
            for key in _ID_KEYS:
                if isinstance(value.get(key), str):
                    found.add(value[key])
            if isinstance(value.get("id"), str) and (in_calls or value.get("type") in _CALL_TYPES):
                found.add(value["id"])
            todo.extend((v, k == "tool_calls") for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((v, in_calls) for v in value)
    return found


def upgrade() -> None:
    conn = op.get_bind()
    postgres = conn.dialect.name == "postgresql"
    partitions = conn.execute(_PARTITIONS).scalar() if postgres else 0
    if partitions:
        conn.exec_driver_sql(
            "CREATE TABLE prunestore_calls (session_id BIGINT NOT NULL, call_id TEXT NOT NULL, seq BIGINT NOT NULL, "
            "CONSTRAINT prunestore_calls_pkey PRIMARY KEY (session_id, call_id, seq)) PARTITION BY HASH (session_id)"
        )
        for remainder in range(partitions):
            conn.exec_driver_sql(
                f"CREATE TABLE prunestore_calls_p{remainder} PARTITION OF prunestore_calls "
                f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder})"
            )
    else:
        op.create_table(
            "prunestore_calls",
            sa.Column(
                "session_id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                primary_key=True,
                autoincrement=False,
            ),
            sa.Column("call_id", sa.Text, primary_key=True),
            sa.Column("seq", sa.BigInteger, primary_key=True),
            sqlite_with_rowid=False,
        )
    sid, seq = -(2**63), 0
    while True:
        rows = conn.execute(_READ, {"sid": sid, "seq": seq, "limit": _BATCH}).all()
        if not rows:
            break
        calls = [
            {"sid": s, "call_id": call, "seq": q} for s, q, text in rows for call in sorted(call_ids(json.loads(text)))
        ]
        if calls:
            conn.execute(_INSERT, calls)
        sid, seq = rows[-1][0], rows[-1][1]


def downgrade() -> None:
    op.drop_table("prunestore_calls")
