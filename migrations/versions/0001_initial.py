"""Initial schema: sessions, messages with verdicts, the key and hash indexes, the live view.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prunestore_settings",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "prunestore_sessions",
        sa.Column("session_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.Text, nullable=False, unique=True),
        sa.Column("current_turn", sa.BigInteger, nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "prunestore_messages",
        sa.Column("session_id", sa.Integer, primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True),
        sa.Column("id", sa.Text, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("content_escaped", sa.SmallInteger, nullable=False),
        sa.Column("turn", sa.BigInteger, nullable=False),
        sa.Column("tool_key", sa.Text),
        sa.Column("expires_after_turn", sa.BigInteger),
        sa.Column("defines", sa.Text, nullable=False),
        sa.Column("refs", sa.Text, nullable=False),
        sa.Column("metadata", sa.Text),
        sa.Column("tokens", sa.Integer, nullable=False),
        sa.Column("content_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("eff_defines", sa.Text, nullable=False),
        sa.Column("eff_refs", sa.Text, nullable=False),
        sa.Column("base", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.UniqueConstraint("session_id", "id", name="prunestore_messages_session_id_id_key"),
    )
    # Partial indexes: only messages with a tool key or a TTL pay for them.
    for name, columns, column in (
        ("prunestore_messages_tool_key", ["session_id", "tool_key", "seq"], "tool_key"),
        ("prunestore_messages_expiry", ["session_id", "expires_after_turn"], "expires_after_turn"),
    ):
        where = sa.text(f"{column} IS NOT NULL")
        op.create_index(name, "prunestore_messages", columns, sqlite_where=where, postgresql_where=where)
    op.create_table(
        "prunestore_hash_holders",
        sa.Column("session_id", sa.Integer, primary_key=True),
        sa.Column("content_hash", sa.LargeBinary(32), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "prunestore_keys",
        sa.Column("session_id", sa.Integer, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("definer_seq", sa.BigInteger),
        sa.Column("support", sa.Integer, nullable=False),
        sa.Column("kept_refs", sa.Integer, nullable=False),
        sqlite_with_rowid=False,
    )
    op.execute(
        "CREATE VIEW prunestore_live AS "
        "SELECT s.name AS session, m.seq, m.id, m.role, m.turn, m.tokens, m.content "
        "FROM prunestore_messages m "
        "JOIN prunestore_sessions s ON s.session_id = m.session_id "
        "WHERE m.verdict IN ('kept', 'restored')"
    )


def downgrade() -> None:
    op.execute("DROP VIEW prunestore_live")
    op.drop_table("prunestore_keys")
    op.drop_table("prunestore_hash_holders")
    op.drop_index("prunestore_messages_expiry", table_name="prunestore_messages")
    op.drop_index("prunestore_messages_tool_key", table_name="prunestore_messages")
    op.drop_table("prunestore_messages")
    op.drop_table("prunestore_sessions")
    op.drop_table("prunestore_settings")
