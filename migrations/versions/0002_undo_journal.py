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
    # Sessions written before this revision have no journal; truncating them
    # into that history falls back to a batch over the kept prefix.
    op.create_table(
        "prunestore_undo",
        sa.Column("session_id", sa.Integer, primary_key=True),
        sa.Column("since_seq", sa.BigInteger, primary_key=True),
        sa.Column("n", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("seq", sa.BigInteger),
        sa.Column("key", sa.Text),
        sa.Column("content_hash", sa.LargeBinary(32)),
        sa.Column("base", sa.String(16)),
        sa.Column("verdict", sa.String(16)),
        sa.Column("support", sa.Integer),
        sa.Column("kept_refs", sa.Integer),
        sa.Column("turn", sa.BigInteger),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("prunestore_undo")
