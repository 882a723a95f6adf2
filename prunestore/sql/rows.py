"""Every column list and row decoder: the one place that knows the order of a row's columns.

Statements are prepared once at import; they use only syntax SQLite (3.24+)
and PostgreSQL share (``ON CONFLICT``, ``LIMIT``), so one text serves both.
The only per-backend difference here is how a writer locks its session.
They run on the driver's connection (see `driver`): the append path is hot.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from operator import itemgetter
from typing import NamedTuple

from ..clock import from_micros
from ..engine.ledger import Ledger
from ..engine.prompt import PromptCounters
from ..engine.state import KeyState, MsgState, Totals
from ..frozen import freeze
from ..model import (
    EVICTED,
    LIVE_VERDICTS,
    PASS_1_SURVIVORS,
    SURVIVING_VERDICTS,
    StoredMessage,
    was_restored,
)
from ..results import HistoryPoint, SessionSummary
from .driver import Statement
from .session_row import SESSION_COLUMNS, SESSION_WIDTH, SessionRow
from .values import decode_content, split_keys

_STATE = (
    "seq, id, role, tool_key, expires_after_turn, eff_defines, eff_refs, content_hash, base, verdict, turn, tokens, "
    "said_at, gaps, place"
)


def sql_set(values: Iterable[str]) -> str:
    """A set of the model's names (verdicts, roles) as SQL text, in parentheses. Names are letters only."""
    assert all(v.isalpha() for v in values)
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# The messages in the prompt; a partial index of the same condition serves the reads that ask for it.
IN_PROMPT = f"verdict IN {sql_set(LIVE_VERDICTS)}"
_SURVIVES_PASS_1 = f"base IN {sql_set(PASS_1_SURVIVORS)}"


def message_columns(alias: str = "", content: str | None = None) -> str:
    """The select list a `StoredMessage` is read from (`stored_message`), of `MESSAGE_WIDTH` columns.

    `content` replaces the content column (an expression that reads part of it).

    Fields that are nearly always at their default (escaped content, a TTL,
    the defines/refs fields, a base equal to the verdict, given tokens, a time, a summary's place and
    ids) travel in one text column, NULL when all are: reading thousands of rows costs about 0.1 µs a
    column a row in the driver, which showed in `live()`. Keys cannot hold
    "|", so it can separate them; the ids (JSON, which may) come last.
    """
    a = f"{alias}." if alias else ""
    rare = (
        f"CASE WHEN {a}content_escaped = 0 AND {a}expires_after_turn IS NULL AND {a}defines = '' AND {a}refs = '' "
        f"AND {a}base = {a}verdict AND {a}tokens_given = 0 AND {a}said_at IS NULL AND {a}summarizes IS NULL "
        "THEN NULL ELSE "
        f"CAST({a}content_escaped AS TEXT) || '|' || COALESCE(CAST({a}expires_after_turn AS TEXT), '') || '|' || "
        f"{a}defines || '|' || {a}refs || '|' || {a}base || '|' || CAST({a}tokens_given AS TEXT) || '|' || "
        f"COALESCE(CAST({a}said_at AS TEXT), '') || '|' || COALESCE(CAST({a}place AS TEXT), '') || '|' || "
        f"COALESCE({a}summarizes, '') END"
    )
    text = content or f"{a}content"
    return f"{a}seq, {a}id, {a}role, {text}, {a}turn, {a}tool_key, {a}metadata, {a}tokens, {a}verdict, {rare}"


FULL_COLUMNS = message_columns()
MESSAGE_WIDTH = 10  # columns in FULL_COLUMNS; derived columns selected after them start here
VERDICT_COLUMN = 8
TOKENS_COLUMN = 7
_MESSAGE_COLUMNS = (
    "session_id, seq, id, role, content, content_escaped, turn, tool_key, expires_after_turn, "
    "defines, refs, metadata, tokens, tokens_given, content_hash, eff_defines, eff_refs, base, verdict, held, undo, "
    "said_at, summarizes, gaps, place, "
    "tokens_after, live_tokens_after, events_after, generation_after, cost_after, everything_after"
)


_WITH_IDS_COLUMNS = "SELECT " + ", ".join("s." + c for c in SESSION_COLUMNS.split(", ")) + ", " + message_columns("m")
_WITH_IDS = (
    _WITH_IDS_COLUMNS + " FROM prunestore_sessions s LEFT JOIN prunestore_messages m "
    "ON m.session_id = s.session_id AND m.id IN :ids WHERE s.session_id = :sid"
)
SESSION_WITH_IDS = Statement(_WITH_IDS)


# Lists of at least this many values are looked up by `_probed` on PostgreSQL. One value keeps IN, which
# costs less to run on the path of every single-message append (0.78 ms against 0.80 in all).
PROBED_FROM = 2


def _probed(array: str, column: str, sql_type: str) -> str:
    """PostgreSQL's rows of the session whose `column` is in the array parameter: one index probe each.

    psycopg prepares a statement it runs often, and PostgreSQL may then plan
    it once, for any values, on the statistics of that moment. On statistics
    that make the session look small (a store's tables are analyzed empty
    when they are made) the plan of ``IN`` a long list reads the whole
    session and compares each row with every value: 270 ms for 500 ids in a
    session of 20,000 messages. A subquery with ``LIMIT 1`` per value has
    one plan, the index probe (1 ms for those 500).
    """
    return (
        f"unnest(CAST(:{array} AS {sql_type}[])) AS wanted(value) CROSS JOIN LATERAL (SELECT * FROM "
        f"prunestore_messages x WHERE x.session_id = :sid AND x.{column} = wanted.value LIMIT 1) AS m"
    )


# After waiting for the lock, PostgreSQL returns the session row's newest version
# but the joined messages of the statement's snapshot, which may miss messages
# the previous lock holder committed. The last column says whether the row
# changed since the snapshot (its xmin differs): then the ids are read again.
_XMIN = ", s.xmin = (SELECT x.xmin FROM prunestore_sessions x WHERE x.session_id = :sid) FROM prunestore_sessions s"
LOCK_SESSION_WITH_IDS_PG = Statement(_WITH_IDS.replace(" FROM prunestore_sessions s", _XMIN) + " FOR UPDATE OF s")
LOCK_SESSION_PROBING_IDS_PG = Statement(
    _WITH_IDS_COLUMNS + _XMIN + f" LEFT JOIN LATERAL (SELECT m.* FROM {_probed('ids', 'id', 'text')}) AS m ON true "
    "WHERE s.session_id = :sid FOR UPDATE OF s"
)
MESSAGES_BY_ID = Statement(f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND id IN :ids")
ID_AT = Statement("SELECT id FROM prunestore_messages WHERE session_id = :sid AND seq = :seq")
MESSAGES_BY_SEQ = Statement(f"SELECT {_STATE} FROM prunestore_messages WHERE session_id = :sid AND seq IN :seqs")
MESSAGES_PROBING_SEQS_PG = Statement(f"SELECT {_STATE} FROM {_probed('seqs', 'seq', 'bigint')}")


def for_list(postgres: bool, values: list, listed: Statement, probed: Statement) -> Statement:
    """`probed` (PostgreSQL's statement of `_probed` lookups) for `PROBED_FROM` values or more, else `listed`."""
    return probed if postgres and len(values) >= PROBED_FROM else listed


LAST_TOOL_HOLDER = Statement(
    f"SELECT {_STATE} FROM prunestore_messages WHERE session_id = :sid AND tool_key = :tool_key "
    "ORDER BY seq DESC LIMIT 1"
)
EXPIRING = Statement(
    f"SELECT {_STATE} FROM prunestore_messages WHERE session_id = :sid "
    f"AND expires_after_turn >= :lo AND expires_after_turn < :hi AND {_SURVIVES_PASS_1}"
)
KEYS_BY_NAME = Statement(
    "SELECT key, definer_seq, support, kept_refs, evicted_refs FROM prunestore_keys WHERE session_id = :sid "
    "AND key IN :keys"
)
# What the store reads of a session's messages: the prompt (all of it, or some seqs of it) and every message.
# The prompt's messages in order (`live_params` gives the parameters): below the session's cursor the held
# ones, through their partial index, and every row from it on, so the read costs about what the prompt
# spans, not the session's length (see `engine.prompt`).
LIVE_MESSAGES = Statement(
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND held = 1 AND seq < :cursor "
    f"AND {IN_PROMPT} UNION ALL "
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq >= :cursor AND {IN_PROMPT} "
    "ORDER BY seq"
)
LIVE_BY_SEQ = Statement(
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq IN :seqs AND {IN_PROMPT}"
)
ALL_MESSAGES = Statement(f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid ORDER BY seq")
# Every message with its derived columns (content hash, effective keys, held), for verify and rebuild.
AUDIT = Statement(
    f"SELECT {FULL_COLUMNS}, content_hash, eff_defines, eff_refs, held, gaps FROM prunestore_messages "
    "WHERE session_id = :sid ORDER BY seq"
)
# A replay's input: each message's state, and the ids a summary covers (JSON, else NULL).
STATES_IN_ORDER = Statement(
    f"SELECT {_STATE}, summarizes FROM prunestore_messages WHERE session_id = :sid ORDER BY seq"
)
ANY_BY_SEQ = Statement(f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq IN :seqs")
TIME_OF = Statement("SELECT said_at FROM prunestore_messages WHERE session_id = :sid AND seq = :seq")
LAST_TIME = Statement("SELECT seq, said_at FROM prunestore_messages WHERE session_id = :sid ORDER BY seq DESC LIMIT 1")
PENDING_ROWS = Statement(f"SELECT {_STATE} FROM prunestore_messages WHERE session_id = :sid AND verdict = 'pending'")
# The prompt's live messages in order: below the session's cursor the held ones (a partial
# index), from it on every row (the primary key), which walks pass once.
HELD_AFTER = Statement(
    f"SELECT {_STATE} FROM prunestore_messages WHERE session_id = :sid AND held = 1 AND seq > :after "
    "AND seq < :cursor ORDER BY seq LIMIT :limit"
)
IN_PROMPT_BETWEEN = Statement(
    "SELECT count(*), coalesce(sum(tokens), 0) FROM prunestore_messages WHERE session_id = :sid "
    f"AND seq >= :lo AND seq < :hi AND {IN_PROMPT}"
)


def counted(row) -> tuple[int, int]:
    """An `IN_PROMPT_BETWEEN` row: messages and tokens."""
    return (int(row[0]), int(row[1])) if row else (0, 0)


LIVE_AFTER = Statement(
    f"SELECT {_STATE} FROM prunestore_messages WHERE session_id = :sid AND seq > :after "
    f"AND verdict IN {sql_set(SURVIVING_VERDICTS)} ORDER BY seq LIMIT :limit"
)
# What an append reads ahead (`locked_rows.read_ahead`): its keys with their last definers' states, and the
# messages whose expiry the append's turns may cross, from the session's current turn on.
_KEY_COLUMNS = "key, definer_seq, support, kept_refs, evicted_refs"
KEYS_WITH_DEFINERS = Statement(
    "SELECT "
    + ", ".join([*("k." + c for c in _KEY_COLUMNS.split(", ")), *("m." + c for c in _STATE.split(", "))])
    + " FROM prunestore_keys k LEFT JOIN prunestore_messages m "
    "ON m.session_id = k.session_id AND m.seq = k.definer_seq WHERE k.session_id = :sid AND k.key IN :keys"
)
EXPIRING_BEFORE = Statement(
    f"SELECT {_STATE} FROM prunestore_messages WHERE session_id = :sid AND expires_after_turn >= "
    "(SELECT current_turn FROM prunestore_sessions WHERE session_id = :sid) AND expires_after_turn < :hi "
    f"AND {_SURVIVES_PASS_1}"
)
FIRST_HOLDER_AFTER = Statement(
    "SELECT seq FROM prunestore_hash_holders WHERE session_id = :sid AND content_hash = :content_hash "
    "AND seq > :after ORDER BY seq LIMIT 1"
)
INSERT_MESSAGE = Statement(
    f"INSERT INTO prunestore_messages ({_MESSAGE_COLUMNS}) VALUES ("
    + ", ".join(":" + c.strip() for c in _MESSAGE_COLUMNS.split(","))
    + ")"
)
UPDATE_VERDICT = Statement(
    "UPDATE prunestore_messages SET base = :base, verdict = :verdict, held = :held "
    "WHERE session_id = :sid AND seq = :seq"
)
# A summary's count of evicted messages it covers (`engine.state.MsgState.gaps`), written as it moves, and
# counted again from the covers where a cut puts verdicts back.
UPDATE_GAPS = Statement("UPDATE prunestore_messages SET gaps = :gaps WHERE session_id = :sid AND seq = :seq")
RECOUNT_GAPS = Statement(
    "UPDATE prunestore_messages SET gaps = (SELECT count(*) FROM prunestore_covers c JOIN prunestore_messages x "
    "ON x.session_id = c.session_id AND x.seq = c.seq WHERE c.session_id = :sid "
    "AND c.summary_seq = prunestore_messages.seq AND x.verdict = 'evicted') "
    "WHERE session_id = :sid AND gaps IS NOT NULL"
)
INSERT_COVER = Statement(
    "INSERT INTO prunestore_covers (session_id, seq, summary_seq) VALUES (:sid, :seq, :summary_seq)"
)
SUMMARIES_COVERING = Statement(
    "SELECT " + ", ".join("m." + c for c in _STATE.split(", ")) + " FROM prunestore_covers c "
    "JOIN prunestore_messages m ON m.session_id = c.session_id AND m.seq = c.summary_seq "
    "WHERE c.session_id = :sid AND c.seq = :seq"
)
UPSERT_KEY = Statement(
    "INSERT INTO prunestore_keys (session_id, key, definer_seq, support, kept_refs, evicted_refs) "
    "VALUES (:sid, :key, :definer_seq, :support, :kept_refs, :evicted_refs) "
    "ON CONFLICT (session_id, key) DO UPDATE SET definer_seq = excluded.definer_seq, "
    "support = excluded.support, kept_refs = excluded.kept_refs, evicted_refs = excluded.evicted_refs"
)
INSERT_HOLDER = Statement(
    "INSERT INTO prunestore_hash_holders (session_id, content_hash, seq) VALUES (:sid, :content_hash, :seq)"
)
DELETE_HOLDER = Statement(
    "DELETE FROM prunestore_hash_holders WHERE session_id = :sid AND content_hash = :content_hash AND seq = :seq"
)
INSERT_REF = Statement("INSERT INTO prunestore_refs (session_id, key, seq) VALUES (:sid, :key, :seq)")
DELETE_KEY = Statement("DELETE FROM prunestore_keys WHERE session_id = :sid AND key = :key")

_new_object, _set_attribute = object.__new__, object.__setattr__


def stored_message(row, frozen: bool = False) -> StoredMessage:
    """A `StoredMessage` from a row selected with `FULL_COLUMNS`; `frozen` makes its metadata read-only.

    Rows were validated on the way in, so the checks are skipped, and the
    instance is made as `model.unchecked` makes it, inline: a cold `live()`
    builds thousands of these, and the call alone was an eighth of the cost.
    """
    seq, id_, role, content, turn, tool_key, metadata, tokens, verdict, rare = row
    expires: int | None = None
    defines: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()
    base = verdict
    given = False
    summarizes: tuple[str, ...] = ()
    place: int | None = None
    at = None
    if rare is not None:
        escaped, ttl, defines_text, refs_text, base, tokens_given, said_at, place_text, ids = rare.split("|", 8)
        given = tokens_given != "0"
        at = from_micros(int(said_at)) if said_at else None
        if escaped != "0":
            content = decode_content(content, int(escaped))
        expires = int(ttl) if ttl else None
        defines, refs = split_keys(defines_text), split_keys(refs_text)
        if ids:
            summarizes, place = tuple(json.loads(ids)), int(place_text)
    message = _new_object(StoredMessage)
    _set_attribute(
        message,
        "__dict__",
        {
            "id": id_,
            "role": role,
            "content": content,
            "turn": turn,
            "tool_key": tool_key,
            "expires_after_turn": expires,
            "defines": defines,
            "refs": refs,
            "metadata": None if metadata is None else freeze(json.loads(metadata)) if frozen else json.loads(metadata),
            "seq": seq,
            "verdict": verdict,
            "tokens": tokens,
            "base": base,
            "tokens_given": given,
            "at": at,
            "summarizes": summarizes,
            "place": place,
        },
    )
    return message


def session_row(row) -> tuple[SessionRow, str]:
    """A row selected with the session's columns (`SELECT_SESSION` and the locks): the row, and its name."""
    sid, turn, last_seq, stamp, *prompt, tokens, live, generation, name, ledger, summaries = row[:SESSION_WIDTH]
    session = SessionRow(sid, turn, last_seq, stamp, PromptCounters(*prompt), Totals(tokens, live), generation)
    session.ledger, session.summaries = ledger, summaries
    return session, name


def session_summary(row) -> SessionSummary:
    """A row selected with `SUMMARY_COLUMNS`."""
    summary = SessionSummary(*row[:-1])
    return summary if row[-1] is None else replace(summary, ledger=Ledger.from_json(row[-1]).totals())


def history_point(row) -> HistoryPoint:
    """A row selected with `HISTORY_COLUMNS`."""
    return HistoryPoint(*row)


def joined_message(row, postgres: bool) -> StoredMessage | None:
    """The message a `SESSION_WITH_IDS` row joins to its session's columns; None where it joined none."""
    columns = row[SESSION_WIDTH : -1 if postgres else None]
    return None if columns[0] is None else stored_message(columns)


def lock_saw_the_latest(row) -> bool:
    """Whether the statement of a `LOCK_SESSION_WITH_IDS_PG` row read the locked row's newest version."""
    return bool(row[-1])


def keyed_message(row) -> tuple[str, StoredMessage]:
    """A `DEFINERS` row: the key, and the message that last defined it."""
    return row[0], stored_message(row[1:])


class Audited(NamedTuple):
    """A message as `AUDIT` reads it, with its derived columns as stored."""

    message: StoredMessage
    content_hash: bytes
    eff_defines: str
    eff_refs: str
    held: bool
    gaps: int | None


def audited(row) -> Audited:
    """A row selected by `AUDIT`."""
    content_hash, eff_defines, eff_refs, held, gaps = row[MESSAGE_WIDTH:]
    return Audited(stored_message(row[:MESSAGE_WIDTH]), bytes(content_hash), eff_defines, eff_refs, bool(held), gaps)


def hashed(row) -> tuple[StoredMessage, bytes]:
    """A row selected with `FULL_COLUMNS` (or `message_columns`) and then ``content_hash``: the message, its hash."""
    return stored_message(row[:MESSAGE_WIDTH]), bytes(row[MESSAGE_WIDTH])


def with_length(row) -> tuple[StoredMessage, bytes, int]:
    """A window's row: `hashed`, then the content's whole length (negative where the content read is whole)."""
    message, content_hash = hashed(row)
    length = row[MESSAGE_WIDTH + 1]
    return message, content_hash, length if length >= 0 else len(message.content)


# Columns of a row selected with `FULL_COLUMNS`, as getters (they run per row on the cold read paths).
seq_column = itemgetter(0)


content_column = itemgetter(3)
metadata_column = itemgetter(6)  # the metadata as stored (JSON text), or None


def verdict_row(row) -> tuple[int, str, str, int]:
    """(seq, id, verdict, tokens) of a row selected with `FULL_COLUMNS`, as `VERDICTS_OF` selects them."""
    return row[0], row[1], row[VERDICT_COLUMN], row[TOKENS_COLUMN]


def seq_and_time(rows: list[tuple]) -> tuple[int, int | None] | None:
    """(seq, said_at) of the one `LAST_TIME` row, or None for an empty session."""
    return (rows[0][0], rows[0][1]) if rows else None


def first_value(rows: list[tuple]) -> object:
    """The first column of the first row, or None where there is none."""
    return rows[0][0] if rows else None


def key_state(row) -> KeyState:
    """A `KeyState` from a row selected by `KEYS_BY_NAME`."""
    key, definer, support, kept_refs, evicted_refs = row
    return KeyState(key, definer, support, kept_refs, evicted_refs)


def key_with_definer(row) -> tuple[KeyState, MsgState | None]:
    """A `KEYS_WITH_DEFINERS` row: the key, and its last definer's state (None where nothing defines it)."""
    definer = row[5:]
    return key_state(row[:5]), msg_state(definer) if definer[0] is not None else None


def msg_state(row) -> MsgState:
    seq, id_, role, tool_key, expires, defines, refs, content_hash, base, verdict, turn, tokens, at, gaps, place = row
    evicted = verdict == EVICTED
    return MsgState(
        seq=seq,
        id=id_,
        role=role,
        tool_key=tool_key,
        expires_after_turn=expires,
        defines=split_keys(defines),
        refs=split_keys(refs),
        content_hash=bytes(content_hash),
        base=base,
        restored=was_restored(base, verdict),
        turn=turn,
        tokens=tokens,
        visible=verdict in LIVE_VERDICTS,
        evicted=evicted,
        at=at,
        gaps=gaps,
        place=place,
    )


def replayed_state(row) -> MsgState:
    """A row of `STATES_IN_ORDER`: the state, with the ids a summary covers (which a replay resolves)."""
    state = msg_state(row[:-1])
    state.summarizes = () if row[-1] is None else tuple(json.loads(row[-1]))
    return state


DEFINERS = Statement(
    f"SELECT k.key, {message_columns('m')} FROM prunestore_keys k JOIN prunestore_messages m "
    "ON m.session_id = k.session_id AND m.seq = k.definer_seq WHERE k.session_id = :sid AND k.key IN :keys"
)
