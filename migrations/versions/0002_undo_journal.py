"""The undo journal: what each append overwrote, so truncate costs the suffix, not the session.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The journal rides on the first message row of each append, which is written
    # anyway: no other table, index or page is touched per append. Sessions written
    # before this revision have no journal; truncating them into that history falls
    # back to a batch over the kept prefix. Adding a nullable column is instant on
    # both backends.
    op.add_column("prunestore_messages", sa.Column("undo", sa.Text))


def downgrade() -> None:
    op.drop_column("prunestore_messages", "undo")
