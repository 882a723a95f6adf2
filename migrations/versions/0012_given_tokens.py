"""A message's token count may come with it (`Message.tokens`, say from the provider's usage).

Such a count is the message's own: a change of counter keeps it, and
`verify` compares it with itself. This adds the column that says which
counts were given; every message stored before was counted.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("prunestore_messages", sa.Column("tokens_given", sa.SmallInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("prunestore_messages", "tokens_given")
