"""The prompt under a budget: totals per session, evicted referrers per key, the prompt's messages indexed.

With `Policy(budget=..., clear_at_least=...)` a message can be live by the
passes and out of the prompt (verdict ``evicted``), or dropped and still in
it until the next removal event (``pending``). The live view lists what is
in the prompt, so it gains ``pending``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_IN_PROMPT = "verdict IN ('kept', 'restored', 'pending')"
_VIEW = (
    "CREATE VIEW prunestore_live AS "
    "SELECT s.name AS session, m.seq, m.id, m.role, m.turn, m.tokens, m.content "
    "FROM prunestore_messages m "
    "JOIN prunestore_sessions s ON s.session_id = m.session_id "
    "WHERE m.{}"
)


def upgrade() -> None:
    # Columns with a constant default are added without rewriting the table on both backends.
    for column in ("prompt_tokens", "pending_tokens", "events"):
        op.add_column("prunestore_sessions", sa.Column(column, sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("prunestore_keys", sa.Column("evicted_refs", sa.Integer, nullable=False, server_default="0"))
    # Pending messages are found without reading the session. (The index of the messages in
    # the prompt that events walk is the store's to make, when it records a budgeted policy:
    # every append would pay for it.)
    where = sa.text("verdict = 'pending'")
    op.create_index(
        "prunestore_messages_pending",
        "prunestore_messages",
        ["session_id", "seq"],
        sqlite_where=where,
        postgresql_where=where,
    )
    op.execute("DROP VIEW prunestore_live")
    op.execute(_VIEW.format(_IN_PROMPT))


def downgrade() -> None:
    op.execute("DROP VIEW prunestore_live")
    op.execute(_VIEW.format("verdict IN ('kept', 'restored')"))
    op.drop_index("prunestore_messages_pending", table_name="prunestore_messages")
    op.execute("DROP INDEX IF EXISTS prunestore_messages_in_prompt")
    op.drop_column("prunestore_keys", "evicted_refs")
    for column in ("events", "pending_tokens", "prompt_tokens"):
        op.drop_column("prunestore_sessions", column)
