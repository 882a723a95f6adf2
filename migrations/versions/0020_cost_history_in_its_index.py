"""Let the chart read a session's history from its index alone again.

The history rows (each append's last message) have a partial index holding
every column the chart reads, so the read never touches the table. The cost
columns added in 0018 were not in it, and each of those reads went to the
table row by row. The index is made again with them.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_INDEX = "prunestore_messages_appends"
_HISTORY = ["session_id", "seq", "turn", "tokens_after", "live_tokens_after", "events_after", "generation_after"]
_WHERE = sa.text("live_tokens_after IS NOT NULL")


def _index(columns: list[str]) -> None:
    op.drop_index(_INDEX, "prunestore_messages")
    op.create_index(_INDEX, "prunestore_messages", columns, sqlite_where=_WHERE, postgresql_where=_WHERE)


def upgrade() -> None:
    _index([*_HISTORY, "cost_after", "everything_after"])


def downgrade() -> None:
    _index(_HISTORY)
