"""The tables, as SQLAlchemy Core metadata.

Migrations under ``migrations/`` are the source of truth for what a database
holds; this metadata mirrors the newest revision, and a test checks that the
two agree. Every primary key and index of per-session data begins with
``session_id``, so the tables can be distributed or partitioned by session:
the id is computed from the name (`prunestore.sessionids`), and no unique
index spans sessions.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION_TABLE = "prunestore_alembic_version"

metadata = sa.MetaData()


# 64-bit session ids; on SQLite an INTEGER primary key is the rowid itself (64 bits too).
SESSION_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _partial_index(name: str, columns: list[str], where: str) -> sa.Index:
    """An index of the rows matching `where`, on both backends."""
    return sa.Index(name, *columns, sqlite_where=sa.text(where), postgresql_where=sa.text(where))


SETTINGS = sa.Table(
    "prunestore_settings",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

SESSIONS = sa.Table(
    "prunestore_sessions",
    metadata,
    sa.Column("session_id", SESSION_ID, primary_key=True, autoincrement=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("current_turn", sa.BigInteger, nullable=False),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    # A new random value on every write to the session; NULL until its first write after 0003.
    sa.Column("stamp", sa.BigInteger),
    # The prompt's totals under a budget or `clear_at_least` (see `prunestore.engine.prompt`); 0 otherwise.
    sa.Column("prompt_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("pending_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("events", sa.BigInteger, nullable=False, server_default="0"),
    # Where the last eviction walk stopped: below it the prompt holds only held messages.
    sa.Column("prompt_cursor", sa.BigInteger, nullable=False, server_default="0"),
    # Steps that brought an evicted message back, and that let another one join before the prompt's end;
    # NULL for a session stored before 0013 until it is rebuilt (new sessions are written with 0).
    sa.Column("comebacks", sa.BigInteger),
    sa.Column("late_joins", sa.BigInteger),
    # Unix time (seconds) of the session's creation and of its last write.
    sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("updated_at", sa.BigInteger, nullable=False, server_default="0"),
    # Tokens of the session's messages, in all and in the prompt (live).
    sa.Column("tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("live_tokens", sa.BigInteger, nullable=False, server_default="0"),
    # The generation of the store's settings (policy, tokenizer) the session's state was computed under.
    sa.Column("policy_generation", sa.BigInteger, nullable=False, server_default="0"),
    # What its prompts cost so far under the policy's prices (`prunestore.ledger`), as JSON; NULL without prices.
    sa.Column("ledger", sa.Text),
    # How many of its messages are summaries (`Message.summarizes`): with none, an eviction looks none up.
    sa.Column("summary_count", sa.BigInteger, nullable=False, server_default="0"),
    # Pages of names; not unique, since a unique index would span every partition or shard.
    sa.Index("prunestore_sessions_name", "name"),
)
# Indexes of expressions on one backend, which the metadata does not hold: PostgreSQL pages names
# in code point order whatever the database's collation (migration 0011).
POSTGRES_INDEXES = {
    "prunestore_sessions": ['CREATE INDEX prunestore_sessions_name_bytes ON prunestore_sessions (name COLLATE "C")'],
}

MESSAGES = sa.Table(
    "prunestore_messages",
    metadata,
    sa.Column("session_id", SESSION_ID, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("id", sa.Text, nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    # 1 when the content held NUL characters and is stored escaped (PostgreSQL text cannot hold NUL).
    sa.Column("content_escaped", sa.SmallInteger, nullable=False),
    sa.Column("turn", sa.BigInteger, nullable=False),
    sa.Column("tool_key", sa.Text),
    sa.Column("expires_after_turn", sa.BigInteger),
    # The defines/refs fields as given, space-separated (keys cannot hold spaces).
    sa.Column("defines", sa.Text, nullable=False),
    sa.Column("refs", sa.Text, nullable=False),
    sa.Column("metadata", sa.Text),
    sa.Column("tokens", sa.Integer, nullable=False),
    sa.Column("content_hash", sa.LargeBinary(32), nullable=False),
    # Effective keys (fields plus content markers), sorted and space-separated.
    sa.Column("eff_defines", sa.Text, nullable=False),
    sa.Column("eff_refs", sa.Text, nullable=False),
    # The verdict of passes 1-2 alone, and the final verdict after restoration (under a budget: evicted, pending).
    sa.Column("base", sa.String(16), nullable=False),
    sa.Column("verdict", sa.String(16), nullable=False),
    # 1 for a message in the prompt below its session's prompt_cursor (see `prunestore.engine.prompt`).
    sa.Column("held", sa.SmallInteger, nullable=False, server_default="0"),
    # On the first message of each append: the undo journal entry of that append
    # (`prunestore.sql.undo`); NULL elsewhere, and where history predates the journal.
    sa.Column("undo", sa.Text),
    # On the last message of each append: the session's tokens, live tokens and removal events
    # after it, the history of the prompt's size; NULL elsewhere.
    sa.Column("tokens_after", sa.BigInteger),
    sa.Column("live_tokens_after", sa.BigInteger),
    sa.Column("events_after", sa.BigInteger),
    sa.Column("generation_after", sa.BigInteger),  # the settings' generation the append was written under
    # 1 when `tokens` came with the message (`Message.tokens`): a change of counter keeps it.
    sa.Column("tokens_given", sa.SmallInteger, nullable=False, server_default="0"),
    # `Message.at` in microseconds since 1970 (UTC), or NULL: what a policy's `cache_ttl` measures.
    sa.Column("said_at", sa.BigInteger),
    # On the last message of each append, under a policy with prices: the ledger's cost and the cost of
    # sending everything, summed over the turns so far (docs/cost.md); NULL elsewhere.
    sa.Column("cost_after", sa.Float),
    sa.Column("everything_after", sa.Float),
    # A summary's `Message.summarizes` as JSON, how many of those messages are evicted, and where it stands
    # in the prompt (its span's first place); NULL for every other message (docs/semantics.md, "Summaries").
    sa.Column("summarizes", sa.Text),
    sa.Column("gaps", sa.Integer),
    sa.Column("place", sa.BigInteger),
    sa.UniqueConstraint("session_id", "id", name="prunestore_messages_session_id_id_key"),
    # Partial indexes: only messages with a tool key or a TTL pay for them.
    _partial_index("prunestore_messages_tool_key", ["session_id", "tool_key", "seq"], "tool_key IS NOT NULL"),
    _partial_index(
        "prunestore_messages_expiry", ["session_id", "expires_after_turn"], "expires_after_turn IS NOT NULL"
    ),
    # The messages waiting for a removal event, and the prompt's messages below the cursor.
    _partial_index("prunestore_messages_pending", ["session_id", "seq"], "verdict = 'pending'"),
    _partial_index("prunestore_messages_held", ["session_id", "seq"], "held = 1"),
    # The history rows alone, covering what a chart of the prompt's size reads.
    _partial_index(
        "prunestore_messages_appends",
        [
            "session_id",
            "seq",
            "turn",
            "tokens_after",
            "live_tokens_after",
            "events_after",
            "generation_after",
            "cost_after",
            "everything_after",
        ],
        "live_tokens_after IS NOT NULL",
    ),
)

HASH_HOLDERS = sa.Table(
    "prunestore_hash_holders",
    metadata,
    sa.Column("session_id", SESSION_ID, primary_key=True, autoincrement=False),
    sa.Column("content_hash", sa.LargeBinary(32), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sqlite_with_rowid=False,
)

# Who refers to each key: one row per (key, message) of a message's effective refs, written with the
# message. What `explain` reads to name the messages a restored definer is needed by.
REFS = sa.Table(
    "prunestore_refs",
    metadata,
    sa.Column("session_id", SESSION_ID, primary_key=True, autoincrement=False),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sqlite_with_rowid=False,
)

# The tool calls each message makes or answers, by call id, as its provider metadata names them: one row
# per (call id, message), written with the message. What a prompt is read through without the session.
CALLS = sa.Table(
    "prunestore_calls",
    metadata,
    sa.Column("session_id", SESSION_ID, primary_key=True, autoincrement=False),
    sa.Column("call_id", sa.Text, primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sqlite_with_rowid=False,
)

# The summaries that cover each message: one row per (covered message, summary), written with the summary.
# What an eviction reads to move the summaries of what it evicted.
COVERS = sa.Table(
    "prunestore_covers",
    metadata,
    sa.Column("session_id", SESSION_ID, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("summary_seq", sa.BigInteger, primary_key=True),
    sqlite_with_rowid=False,
)

KEYS = sa.Table(
    "prunestore_keys",
    metadata,
    sa.Column("session_id", SESSION_ID, primary_key=True, autoincrement=False),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("definer_seq", sa.BigInteger),
    sa.Column("support", sa.Integer, nullable=False),
    sa.Column("kept_refs", sa.Integer, nullable=False),
    sa.Column("evicted_refs", sa.Integer, nullable=False, server_default="0"),
    sqlite_with_rowid=False,
)

# The receipt of each erasure that erased something, numbered from 1 per session (docs/semantics.md,
# "Erasure"): ids and verdicts only, never what was erased. Not partitioned: an erasure is rare.
ERASURES = sa.Table(
    "prunestore_erasures",
    metadata,
    sa.Column("session_id", SESSION_ID, primary_key=True, autoincrement=False),
    sa.Column("number", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("at", sa.BigInteger, nullable=False),  # microseconds since 1970 (UTC), as a message's time
    sa.Column("receipt", sa.Text, nullable=False),  # JSON: erased, changed, live_added, live_removed
    sqlite_with_rowid=False,
)
