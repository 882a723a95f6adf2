"""Make room for the recall index, which a store may be given.

``prunestore db recall-index`` gives a store an index of its messages' text
by trigram: on SQLite kept by triggers that call a function each connection
of this version registers, on PostgreSQL two indexes of the messages table.
This revision creates nothing: it marks the stores such triggers may be in,
so an older version, which cannot write to them, refuses to open them
instead of failing on every append; a downgrade below it drops the index
where there is one.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_DROP = [
    "DROP TRIGGER IF EXISTS prunestore_recall_insert",
    "DROP TRIGGER IF EXISTS prunestore_recall_delete",
    "DROP TRIGGER IF EXISTS prunestore_recall_update",
    "DROP TABLE IF EXISTS prunestore_recall",
    "DROP TABLE IF EXISTS prunestore_recall_sessions",
]


def upgrade() -> None:
    pass


_DROP_POSTGRES = [
    "DROP INDEX IF EXISTS prunestore_messages_trigrams",
    "DROP INDEX IF EXISTS prunestore_messages_unusual",
]


def downgrade() -> None:
    for statement in _DROP if op.get_bind().dialect.name == "sqlite" else _DROP_POSTGRES:
        op.execute(statement)
