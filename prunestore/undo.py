"""The undo journal: what each append overwrote, replayed backwards by `PruneStore.truncate`.

An append writes one "append" row (the session's turn before it) and one row per
value it overwrote: a stored message's base and verdict, a key's row (or that
the key was new), a surviving holder it removed. Taking back every append from
seq `since` on then costs what those appends wrote, not the session's length.
`rebuild` and `fork` write derived state without a journal and clear it; a cut
before the oldest journaled append is recomputed as a batch instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .driver import Driver, Statement
from .incremental import KeyState, MsgState
from .storage import DELETE_KEY, INSERT_HOLDER, UNDO_COLUMNS, UPDATE_VERDICT, UPSERT_KEY

__all__ = ["journal_rows", "Undo", "last_append_at_or_before", "read_undo", "apply_undo"]

_LAST_APPEND = Statement(
    "SELECT since_seq, turn FROM prunestore_undo WHERE session_id = :sid AND since_seq <= :seq AND n = 0 "
    "ORDER BY since_seq DESC LIMIT 1"
)
_ENTRIES_SINCE = Statement(
    "SELECT kind, seq, key, content_hash, base, verdict, support, kept_refs FROM prunestore_undo "
    "WHERE session_id = :sid AND since_seq >= :since ORDER BY since_seq, n"
)
_DELETE_SINCE = Statement("DELETE FROM prunestore_undo WHERE session_id = :sid AND since_seq >= :since")


def journal_rows(
    sid: int,
    since: int,
    turn_before: int,
    changed: Iterable[MsgState],
    keys: Iterable[KeyState],
    holders_removed: Iterable[tuple[bytes, int]],
) -> list[dict]:
    """The undo rows of one append whose first new message got seq `since`."""
    rows: list[tuple] = [("append", None, None, None, None, None, None, None, turn_before)]
    for state in changed:
        assert state.original is not None, "a changed stored message was loaded through the identity map"
        rows.append(("message", state.seq, None, None, *state.original, None, None, None))
    for ks in keys:
        definer, support, kept = ks.original if ks.original is not None else (None, None, None)
        rows.append(("key", definer, ks.key, None, None, None, support, kept, None))
    rows.extend(
        ("holder", seq, None, content_hash, None, None, None, None, None) for content_hash, seq in holders_removed
    )
    return [
        {"sid": sid, "since": since, "n": n, **dict(zip(UNDO_COLUMNS, row, strict=True))} for n, row in enumerate(rows)
    ]


@dataclass
class Undo:
    """What taking back the appends from seq `since` on restores: the oldest value of each thing."""

    since: int
    turn: int
    verdicts: dict[int, tuple[str, str]] = field(default_factory=dict)  # seq -> (base, verdict)
    keys: dict[str, tuple[int | None, int | None, int | None]] = field(default_factory=dict)
    holders: list[tuple[bytes, int]] = field(default_factory=list)


def last_append_at_or_before(driver: Driver, sid: int, seq: int) -> tuple[int, int] | None:
    """(since, turn before) of the journaled append that wrote `seq`, or None when it is not journaled."""
    row = driver.first(_LAST_APPEND, {"sid": sid, "seq": seq})
    return (row[0], row[1]) if row else None


def read_undo(driver: Driver, sid: int, since: int, turn: int) -> Undo:
    """Fold the journal from `since` on into one value per message, key and holder (the oldest wins)."""
    undo = Undo(since, turn)
    for kind, seq, key, content_hash, base, verdict, support, kept in driver.all(
        _ENTRIES_SINCE, {"sid": sid, "since": since}
    ):
        if kind == "message" and seq < since:
            undo.verdicts.setdefault(seq, (base, verdict))
        elif kind == "key":
            undo.keys.setdefault(key, (seq, support, kept))
        elif kind == "holder" and seq < since:
            undo.holders.append((bytes(content_hash), seq))
    return undo


def apply_undo(driver: Driver, sid: int, undo: Undo) -> None:
    """Write the folded values back and drop the journal they came from.

    Rows of messages from `since` on are the caller's to delete.
    """
    verdicts = [{"sid": sid, "seq": seq, "base": b, "verdict": v} for seq, (b, v) in undo.verdicts.items()]
    driver.run_many(UPDATE_VERDICT, verdicts)
    gone = [{"sid": sid, "key": key} for key, (_, support, _) in undo.keys.items() if support is None]
    driver.run_many(DELETE_KEY, gone)
    kept = [
        {"sid": sid, "key": key, "definer_seq": definer, "support": support, "kept_refs": refs}
        for key, (definer, support, refs) in undo.keys.items()
        if support is not None
    ]
    driver.run_many(UPSERT_KEY, kept)
    driver.run_many(INSERT_HOLDER, [{"sid": sid, "content_hash": h, "seq": seq} for h, seq in undo.holders])
    driver.run(_DELETE_SINCE, {"sid": sid, "since": undo.since})
