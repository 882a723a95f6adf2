"""Which settings each point of a session's history was recorded under.

The last message of each append records the session's tokens after it (0008);
it now records the generation of the store's settings too, and the settings
keep each generation's policy, so a chart of the history can draw each
budget where it applied and mark where the policy changed. History recorded
before this belongs to generation 0.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_INDEX = "prunestore_messages_appends"
_HISTORY = ["session_id", "seq", "turn", "tokens_after", "live_tokens_after", "events_after"]
_WHERE = sa.text("live_tokens_after IS NOT NULL")


def upgrade() -> None:
    op.add_column("prunestore_messages", sa.Column("generation_after", sa.BigInteger))
    op.execute("UPDATE prunestore_messages SET generation_after = 0 WHERE live_tokens_after IS NOT NULL")
    op.drop_index(_INDEX, "prunestore_messages")
    op.create_index(
        _INDEX, "prunestore_messages", [*_HISTORY, "generation_after"], sqlite_where=_WHERE, postgresql_where=_WHERE
    )


def downgrade() -> None:
    op.drop_index(_INDEX, "prunestore_messages")
    op.create_index(_INDEX, "prunestore_messages", _HISTORY, sqlite_where=_WHERE, postgresql_where=_WHERE)
    op.drop_column("prunestore_messages", "generation_after")
    op.execute("DELETE FROM prunestore_settings WHERE name LIKE 'policy.%'")
