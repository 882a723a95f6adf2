"""Index messages' text by trigram on SQLite, so a recall by words need not read the session.

A recall by words read the session back from its newest message until
enough matched: quick when a match is recent, a pass over the session's text
when the only one is near the start. An FTS5 table with the trigram
tokenizer now holds each message's text, case folded, under the rowid
``number << 32 | seq``, where each session gets a small number of its own
(session ids are 64-bit hashes; ``prunestore_recall_sessions``), and triggers on the messages table keep it as
messages are written, copied, erased and removed. The messages already
stored are indexed here.

Where SQLite lacks FTS5's trigram tokenizer (before 3.34), nothing is made
and recall reads the session as before. PostgreSQL is left as it is.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from alembic import op

from prunestore.sql import recall_index

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# Session ids are 64-bit hashes: each session indexed gets a small number, its entries' high bits.
_NUMBERED = (
    "INSERT OR IGNORE INTO prunestore_recall_sessions (session_id) SELECT new.session_id WHERE new.content <> '';"
)
_INDEX_NEW = (
    "INSERT INTO prunestore_recall (rowid, text) SELECT (number << 32) | new.seq, "
    "prunestore_fold(new.content, new.content_escaped) FROM prunestore_recall_sessions "
    "WHERE session_id = new.session_id AND new.content <> '';"
)
_UNINDEX_OLD = (
    "DELETE FROM prunestore_recall WHERE rowid = "
    "(SELECT (number << 32) | old.seq FROM prunestore_recall_sessions WHERE session_id = old.session_id);"
)
_CREATE = [
    "CREATE TABLE prunestore_recall_sessions (number INTEGER PRIMARY KEY, session_id INTEGER NOT NULL UNIQUE)",
    "CREATE VIRTUAL TABLE prunestore_recall USING fts5(text, tokenize = 'trigram case_sensitive 1', detail = none)",
    f"CREATE TRIGGER prunestore_recall_insert AFTER INSERT ON prunestore_messages BEGIN {_NUMBERED} {_INDEX_NEW} END",
    f"CREATE TRIGGER prunestore_recall_delete AFTER DELETE ON prunestore_messages BEGIN {_UNINDEX_OLD} END",
    "CREATE TRIGGER prunestore_recall_update AFTER UPDATE OF session_id, seq, content, content_escaped "
    f"ON prunestore_messages BEGIN {_UNINDEX_OLD} {_NUMBERED} {_INDEX_NEW} END",
]
_DROP = [
    "DROP TRIGGER IF EXISTS prunestore_recall_insert",
    "DROP TRIGGER IF EXISTS prunestore_recall_delete",
    "DROP TRIGGER IF EXISTS prunestore_recall_update",
    "DROP TABLE IF EXISTS prunestore_recall",
    "DROP TABLE IF EXISTS prunestore_recall_sessions",
]


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite" or not recall_index.available():
        return
    recall_index.register(bind.connection.dbapi_connection)  # also when Alembic is run by hand
    for statement in _CREATE:
        op.execute(statement)
    op.execute(
        "INSERT INTO prunestore_recall_sessions (session_id) SELECT DISTINCT session_id FROM prunestore_messages "
        "WHERE content <> '' ORDER BY session_id"
    )
    op.execute(
        "INSERT INTO prunestore_recall (rowid, text) SELECT (number << 32) | seq, "
        "prunestore_fold(content, content_escaped) FROM prunestore_messages JOIN prunestore_recall_sessions "
        "USING (session_id) WHERE content <> ''"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in _DROP:
            op.execute(statement)
