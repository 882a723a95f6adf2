"""When each session was created and last written, so idle sessions can be listed and removed.

Unix time in whole seconds (UTC). Sessions that exist at upgrade get the
upgrade's time for both: a retention rule counts their idleness from then.
No index on the last write: every append writes the session row, and on
PostgreSQL an index on a changing column turns each of those updates from
a heap-only one into one that touches the index too. Finding idle
sessions scans the sessions table, which a retention job can afford.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import time

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for column in ("created_at", "updated_at"):
        op.add_column("prunestore_sessions", sa.Column(column, sa.BigInteger, nullable=False, server_default="0"))
    op.execute(
        sa.text("UPDATE prunestore_sessions SET created_at = :now, updated_at = :now").bindparams(now=int(time.time()))
    )


def downgrade() -> None:
    op.drop_column("prunestore_sessions", "updated_at")
    op.drop_column("prunestore_sessions", "created_at")
