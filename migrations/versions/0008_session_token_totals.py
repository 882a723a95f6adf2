"""Token totals per session, and the prompt's size as each append left it.

Sessions carry their tokens, in all and in the prompt, kept up to date by
every write, so a page of sessions shows them without reading a session's
messages. The last message of each append records the session's totals and
removal events after that append: the history of the prompt's size, read
through a partial index of those rows alone. Existing sessions get their
totals from their messages; their history starts with one record, on their
last message.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_HISTORY = ("tokens_after", "live_tokens_after", "events_after")
_INDEX = "prunestore_messages_appends"
_LIVE = "verdict IN ('kept', 'restored', 'pending')"


def upgrade() -> None:
    for column in ("tokens", "live_tokens"):
        op.add_column("prunestore_sessions", sa.Column(column, sa.BigInteger, nullable=False, server_default="0"))
    for column in _HISTORY:
        op.add_column("prunestore_messages", sa.Column(column, sa.BigInteger))
    op.execute(
        "UPDATE prunestore_sessions SET "
        "tokens = (SELECT coalesce(sum(m.tokens), 0) FROM prunestore_messages m "
        "WHERE m.session_id = prunestore_sessions.session_id), "
        "live_tokens = (SELECT coalesce(sum(m.tokens), 0) FROM prunestore_messages m "
        f"WHERE m.session_id = prunestore_sessions.session_id AND m.{_LIVE})"
    )
    mine = "FROM prunestore_sessions s WHERE s.session_id = prunestore_messages.session_id"
    op.execute(
        f"UPDATE prunestore_messages SET tokens_after = (SELECT s.tokens {mine}), "
        f"live_tokens_after = (SELECT s.live_tokens {mine}), events_after = (SELECT s.events {mine}) "
        "WHERE (session_id, seq) IN (SELECT session_id, last_seq FROM prunestore_sessions)"
    )
    where = sa.text("live_tokens_after IS NOT NULL")
    op.create_index(
        _INDEX,
        "prunestore_messages",
        ["session_id", "seq", "turn", *_HISTORY],
        sqlite_where=where,
        postgresql_where=where,
    )


def downgrade() -> None:
    op.drop_index(_INDEX, "prunestore_messages")
    for column in reversed(_HISTORY):
        op.drop_column("prunestore_messages", column)
    op.drop_column("prunestore_sessions", "live_tokens")
    op.drop_column("prunestore_sessions", "tokens")
