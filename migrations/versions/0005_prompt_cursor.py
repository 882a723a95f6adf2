"""Eviction walks start where the last one stopped: a cursor per session, held messages indexed.

Under a budget, an event evicts the prompt's oldest evictable messages.
Instead of an index of every message in the prompt (which every append
paid for), each session keeps where the last walk stopped; below it, the
prompt's messages are those a walk passed and left (pinned, needed) or that
came back since, marked ``held`` in a small partial index. A cursor of 0
(every existing session) holds nothing below it, so no data moves.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("prunestore_sessions", sa.Column("prompt_cursor", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("prunestore_messages", sa.Column("held", sa.SmallInteger, nullable=False, server_default="0"))
    where = sa.text("held = 1")
    op.create_index(
        "prunestore_messages_held",
        "prunestore_messages",
        ["session_id", "seq"],
        sqlite_where=where,
        postgresql_where=where,
    )
    op.execute("DROP INDEX IF EXISTS prunestore_messages_in_prompt")


def downgrade() -> None:
    op.drop_index("prunestore_messages_held", table_name="prunestore_messages")
    op.drop_column("prunestore_messages", "held")
    op.drop_column("prunestore_sessions", "prompt_cursor")
