"""Keep, on each append's last message, what the session's prompts had cost so far.

Beside the history of the prompt's size (`tokens_after` and the rest): the
ledger's cost and the cost of sending everything, both summed over the turns
up to that append and priced with the policy's prices, for the chart of a
session's cost. NULL where the policy named no prices, and on appends stored
before this revision.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("prunestore_messages", sa.Column("cost_after", sa.Float, nullable=True))
    op.add_column("prunestore_messages", sa.Column("everything_after", sa.Float, nullable=True))


def downgrade() -> None:
    op.drop_column("prunestore_messages", "everything_after")
    op.drop_column("prunestore_messages", "cost_after")
