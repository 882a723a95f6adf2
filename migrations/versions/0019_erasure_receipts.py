"""Keep the receipt of every erasure: which messages it erased and what that changed.

`PruneStore.erase` returned its receipt and kept nothing, so an operator
could not tell afterwards when a session's tombstones were made or which
verdicts they moved. One row per erasure that erased something, numbered per
session, holding ids and verdicts as JSON, never content. Erasures made
before this revision have no receipt.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prunestore_erasures",
        sa.Column(
            "session_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column("number", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("receipt", sa.Text, nullable=False),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("prunestore_erasures")
