"""Count, per session, the steps that put a message back before the prompt's end without an event.

Under a budget, a comeback (an evicted message a new reference brings back)
or a late join (a restored definer the passes had dropped, the next copy of
a passage) puts a message before the end of the prompt, where the
provider's prompt cache breaks. The counts are kept with the prompt's
totals. A session stored before this revision has no count (NULL) until a
rebuild replays its messages; a session created after it starts at 0.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("prunestore_sessions", sa.Column("comebacks", sa.BigInteger, nullable=True))
    op.add_column("prunestore_sessions", sa.Column("late_joins", sa.BigInteger, nullable=True))


def downgrade() -> None:
    op.drop_column("prunestore_sessions", "late_joins")
    op.drop_column("prunestore_sessions", "comebacks")
