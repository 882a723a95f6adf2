"""Session names in code point order on PostgreSQL too, whatever the database's collation.

Pages of session names compare and sort ``name COLLATE "C"`` on PostgreSQL
(UTF-8 bytes, the order SQLite uses), so a page is the same on both backends
and a prefix is a range of the index. This adds that index; the one on
``name`` in the database's collation stays (the name of a session never
changes, so it costs no write).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute('CREATE INDEX prunestore_sessions_name_bytes ON prunestore_sessions (name COLLATE "C")')


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX prunestore_sessions_name_bytes")
