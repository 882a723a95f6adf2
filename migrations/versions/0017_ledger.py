"""Keep, per session, the ledger of what its prompts cost under the policy's prices.

The ledger (docs/cost.md, "The ledger") is JSON on the session row, written
by every append when the policy names prices and NULL otherwise; a session
stored before this revision has none until a write under such a policy
replays its messages.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("prunestore_sessions", sa.Column("ledger", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("prunestore_sessions", "ledger")
