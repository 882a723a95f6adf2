"""Which policy and tokenizer each session's state was computed under.

A policy (or tokenizer) change rebuilds every session and numbers the new
settings with the next generation; each session row records the generation
its stored state belongs to. A store object opened before the change sees
the newer generation on the next session row it reads and takes up the new
settings, so no write is made under a policy the store no longer has.
Existing sessions belong to generation 0, the settings as they are. The
tokenizer's name is recorded by the first store opened after this upgrade.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "prunestore_sessions", sa.Column("policy_generation", sa.BigInteger, nullable=False, server_default="0")
    )


def downgrade() -> None:
    op.drop_column("prunestore_sessions", "policy_generation")
    op.execute("DELETE FROM prunestore_settings WHERE name IN ('generation', 'tokenizer')")
