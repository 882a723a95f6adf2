"""Keep when each message was said (`Message.at`), for a policy's `cache_ttl`.

A provider drops a cached prompt after an idle time; a message said longer
than that after the one before it finds the cache cold, and the prompt keeper
then clears what is pending. The time is stored in microseconds since 1970
(UTC); messages stored before this revision have none (NULL), and no idle
gap is measured across them.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("prunestore_messages", sa.Column("said_at", sa.BigInteger, nullable=True))


def downgrade() -> None:
    op.drop_column("prunestore_messages", "said_at")
