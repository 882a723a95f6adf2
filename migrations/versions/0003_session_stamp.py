"""A change stamp on each session, so a process can keep its live list between turns.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every write to a session sets a new random stamp in the transaction that
    # changes it (see `prunestore.livecache`). Sessions written before this
    # revision have none (NULL) and are read uncached until their next write.
    # Adding a nullable column is instant on both backends.
    op.add_column("prunestore_sessions", sa.Column("stamp", sa.BigInteger))


def downgrade() -> None:
    op.drop_column("prunestore_sessions", "stamp")
