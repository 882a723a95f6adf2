"""Erasure: messages' content removed for good, and the session's state recomputed without it.

An erased message keeps its place, id, turn and time, and nothing it said
(role ``erased``; docs/semantics.md, "Erasure"). The session's derived state
is then rebuilt from what remains, which also clears the undo journal (it
holds content hashes); on SQLite, deleted bytes are overwritten
(``secure_delete``), the recall index is rewritten without the erased text, and the
write-ahead log is checkpointed and emptied.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.engine import Engine

from .clock import from_micros, micros
from .errors import InvalidArgumentError, no_such_message, shorten
from .lifecycle import VERDICTS_FROM, delta_between, rebuild_session
from .model import ERASED, check_identifier
from .policy import Policy
from .results import Erasure
from .sql import recall_index
from .sql.driver import Driver, Statement
from .sql.session_row import SessionRow

_FIND = Statement("SELECT seq, id, role FROM prunestore_messages WHERE session_id = :sid AND id IN :ids")
_ERASE = Statement(
    "UPDATE prunestore_messages SET role = 'erased', content = '', content_escaped = 0, tool_key = NULL, "
    "expires_after_turn = NULL, defines = '', refs = '', metadata = NULL, tokens = 0, tokens_given = 1, "
    "summarizes = NULL, gaps = NULL, place = NULL "
    "WHERE session_id = :sid AND seq = :seq"
)
_RECORD = Statement(
    "INSERT INTO prunestore_erasures (session_id, number, at, receipt) SELECT :sid, coalesce(max(number), 0) + 1, "
    ":at, :receipt FROM prunestore_erasures WHERE session_id = :sid"
)
_COVERING = Statement(
    "SELECT DISTINCT c.summary_seq, m.id, m.role FROM prunestore_covers c JOIN prunestore_messages m "
    "ON m.session_id = c.session_id AND m.seq = c.summary_seq WHERE c.session_id = :sid AND c.seq IN :seqs"
)
_RECEIPTS = Statement("SELECT at, receipt FROM prunestore_erasures WHERE session_id = :sid ORDER BY number")


def erase_locked(driver: Driver, name: str, row: SessionRow, ids: list[str], policy: Policy) -> Erasure:
    """Erase the messages `ids` of the locked session and rebuild its state; the receipt says what moved."""
    sid = row.session_id
    found = {id_: (seq, role) for seq, id_, role in driver.chunks(_FIND, {"sid": sid}, "ids", ids)}
    missing = [id_ for id_ in ids if id_ not in found]
    if missing:
        raise no_such_message("ids", missing[0], name)
    erasing = {seq for seq, role in found.values() if role != ERASED}
    if not erasing:
        return Erasure(name)
    invalidated = _summaries_of(driver, sid, erasing) if row.summaries else {}
    erasing |= invalidated.keys()
    before = driver.all(VERDICTS_FROM, {"sid": sid, "since": 1})
    driver.run_many(_ERASE, [{"sid": sid, "seq": seq} for seq in sorted(erasing)])
    rebuild_session(driver, row, policy)
    if recall_index.kept_by_triggers(driver):  # the erased text's trigrams leave the index's older segments too
        recall_index.purge(driver)
    after = driver.all(VERDICTS_FROM, {"sid": sid, "since": 1})
    delta = delta_between(before, after)
    changed = {
        id_: (was, now)
        for (seq, id_, was), (_, _, now) in zip(before, after, strict=True)
        if was != now and seq not in erasing
    }
    erased = tuple(id_ for seq, id_, _ in before if seq in erasing and seq not in invalidated)
    at = datetime.now(timezone.utc)
    stale = tuple(invalidated[seq] for seq in sorted(invalidated))
    receipt = Erasure(name, erased, changed, delta.live_added, delta.live_removed, at, stale)
    driver.run(_RECORD, {"sid": sid, "at": micros(at), "receipt": _receipt_json(receipt)})
    return receipt


def _summaries_of(driver: Driver, sid: int, seqs: set[int]) -> dict[int, str]:
    """The summaries (seq: id) that cover any of `seqs`, and those that cover them in turn: their text was
    made from what is erased, so it goes too."""
    found: dict[int, str] = {}
    wanted = sorted(seqs)
    while wanted:
        rows = driver.chunks(_COVERING, {"sid": sid}, "seqs", wanted)
        wanted = sorted({seq for seq, _, role in rows if seq not in found and seq not in seqs and role != ERASED})
        found.update((seq, id_) for seq, id_, _ in rows if seq in wanted)
    return found


def receipts(driver: Driver, name: str, sid: int) -> list[Erasure]:
    """The session's erasure receipts, oldest first, as `erase` returned them."""
    return [_receipt_of(name, at, text) for at, text in driver.all(_RECEIPTS, {"sid": sid})]


# What a receipt keeps: ids and verdicts, never content (its session and time are columns of their own).
_KEPT = ("erased", "changed", "live_added", "live_removed", "invalidated")


def _receipt_json(receipt: Erasure) -> str:
    return json.dumps({name: getattr(receipt, name) for name in _KEPT}, separators=(",", ":"))


def _receipt_of(name: str, at: int, text: str) -> Erasure:
    fields = json.loads(text)
    changed = {id_: (was, now) for id_, (was, now) in fields.pop("changed").items()}
    ids: dict[str, Any] = {field: tuple(value) for field, value in fields.items()}
    return Erasure(name, changed=changed, at=from_micros(at), **ids)


def message_ids(ids: str | Iterable[str]) -> list[str]:
    """The ids to erase: one id, or any iterable of them, each checked by name."""
    if isinstance(ids, str):
        ids = [ids]
    elif not isinstance(ids, Iterable):
        raise InvalidArgumentError(f"ids={shorten(ids)}: must be a message id or an iterable of them")
    wanted = list(dict.fromkeys(ids))
    for id_ in wanted:
        check_identifier("ids", id_)
    return wanted


def empty_write_ahead_log(engine: Engine) -> bool:
    """On SQLite, copy the write-ahead log into the database and empty it: its older pages still hold what
    was erased. A reader holding a snapshot keeps the log from being emptied until it finishes: the checkpoint
    is tried again for up to `_CHECKPOINT_WAIT` seconds. Whether the log is empty (always, off SQLite)."""
    if engine.dialect.name != "sqlite":
        return True
    pooled = engine.raw_connection()
    cursor = pooled.cursor()
    cursor.execute("PRAGMA busy_timeout")
    (timeout,) = cursor.fetchone() or (0,)
    try:
        cursor.execute("PRAGMA busy_timeout = 0")  # a busy checkpoint answers at once; this loop waits
        deadline = time.monotonic() + _CHECKPOINT_WAIT
        while True:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            busy, _, _ = cursor.fetchone() or (0, 0, 0)
            if not busy or time.monotonic() >= deadline:
                return not busy
            time.sleep(0.05)
    finally:
        cursor.execute(f"PRAGMA busy_timeout = {int(timeout)}")
        cursor.close()
        pooled.close()


_CHECKPOINT_WAIT = 1.0  # seconds an erasure waits for readers to let the write-ahead log be emptied
