"""The undo journal: what each append overwrote, replayed backwards by `PruneStore.truncate`.

Each append stores, in the ``undo`` column of its first message row (written
anyway, so the journal costs an append no extra page), compact JSON with the
session's turn before it and the values it overwrote: a stored message's base
and verdict, a key's row or that the key was new, a surviving holder it
removed. Taking back every append from seq `since` on then costs what those
appends wrote, not the session's length. `rebuild` and `fork` write derived
state without a journal and clear it; a cut before the oldest journaled
append is recomputed as a batch instead.

Each entry also names the session's stamp before and after its append. A
store that read the session at one stamp follows the entries from there
(`changed_since`): when they chain, stamp to stamp, up to the session's
stamp now, only appends wrote since, and what they changed is known.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..engine.prompt import PromptCounters
from ..engine.state import KeyState, MsgState
from ..model import LIVE_VERDICTS
from .driver import Driver, Statement
from .rows import DELETE_KEY, INSERT_HOLDER, UPDATE_VERDICT, UPSERT_KEY

# Walks back along the primary key from `seq` to the first message of its append.
_LAST_APPEND = Statement(
    "SELECT seq, undo FROM prunestore_messages WHERE session_id = :sid AND seq <= :seq AND undo IS NOT NULL "
    "ORDER BY seq DESC LIMIT 1"
)
_ENTRIES_SINCE = Statement(
    "SELECT undo FROM prunestore_messages WHERE session_id = :sid AND seq >= :since AND undo IS NOT NULL ORDER BY seq"
)
_ENTRIES_AFTER = Statement(
    "SELECT seq, undo FROM prunestore_messages WHERE session_id = :sid AND seq > :seq AND undo IS NOT NULL ORDER BY seq"
)
CLEAR_JOURNAL = Statement("UPDATE prunestore_messages SET undo = NULL WHERE session_id = :sid AND undo IS NOT NULL")


def journal_entry(
    turn_before: int,
    changed: Iterable[MsgState],
    keys: Iterable[KeyState],
    holders_removed: Iterable[tuple[bytes, int]],
    prompt_before: PromptCounters | None = None,
    stamps: tuple[int | None, int] | None = None,
) -> str:
    """The undo entry of one append: ``[turn before, messages, keys, holders, prompt totals before, stamps]``
    as JSON.

    Messages are ``[seq, base, verdict]``, keys ``[key, definer, support,
    kept_refs, evicted_refs]`` (or ``[key]`` for a key the append created),
    holders ``[content hash as hex, seq]``, the prompt totals ``[tokens,
    pending, events, cursor, comebacks, late joins]`` (``[]`` or left out
    when all are 0; entries written before the totals existed have four parts and a
    key's evicted_refs is then 0; before the cursor, three totals, and the
    cursor is then 0; before the comebacks, four, and the counts are then
    unknown, None), the stamps ``[before, after]`` (left out by entries written before them).
    """
    messages = []
    for state in changed:
        assert state.original is not None, "a changed stored message was loaded through the identity map"
        messages.append([state.seq, *state.original])
    key_rows = [[ks.key, *ks.original] if ks.original is not None else [ks.key] for ks in keys]
    holders = [[content_hash.hex(), seq] for content_hash, seq in holders_removed]
    entry: list = [turn_before, messages, key_rows, holders]
    if prompt_before is not None and prompt_before != PromptCounters():
        entry.append([*prompt_before.values(), prompt_before.cursor, *prompt_before.breaks()])
    if stamps is not None:
        if len(entry) == 4:
            entry.append([])  # the totals' place, so that readers find them where they always were
        entry.append(list(stamps))
    return json.dumps(entry, separators=(",", ":"))


@dataclass
class Undo:
    """What taking back the appends from seq `since` on restores: the oldest value of each thing."""

    since: int
    turn: int
    verdicts: dict[int, tuple[str, str]] = field(default_factory=dict)  # seq -> (base, verdict)
    keys: dict[str, tuple[int | None, int, int, int] | None] = field(default_factory=dict)  # None: the key was new
    holders: list[tuple[bytes, int]] = field(default_factory=list)
    prompt: PromptCounters | None = None


def last_append_at_or_before(driver: Driver, sid: int, seq: int) -> tuple[int, int] | None:
    """(since, turn before) of the journaled append that wrote `seq`, or None when it is not journaled."""
    row = driver.first(_LAST_APPEND, {"sid": sid, "seq": seq})
    if row is None:
        return None
    since, entry = row
    return since, json.loads(entry)[0]


def changed_by_append(driver: Driver, sid: int, last_seq: int) -> set[int] | None:
    """The seqs of the stored messages that the append ending at `last_seq` changed, from its journal entry;
    None where that append is not journaled."""
    row = driver.first(_LAST_APPEND, {"sid": sid, "seq": last_seq})
    if row is None:
        return None
    _, entry = row
    return {seq for seq, *_ in json.loads(entry)[1]}


def changed_since(driver: Driver, sid: int, seq: int, stamp: int, now: int) -> set[int] | None:
    """The seqs up to `seq` that the session's appends after `seq` changed, when those appends alone took
    the session from `stamp` to its stamp `now`; None when anything else wrote in between (a truncate,
    a rebuild, an erasure, an import) or the journal does not reach."""
    changed: set[int] = set()
    entries = driver.all(_ENTRIES_AFTER, {"sid": sid, "seq": seq})
    if not entries or entries[0][0] != seq + 1:  # the first new row must begin an append
        return None
    for _, entry in entries:
        _, messages, *rest = json.loads(entry)
        if len(rest) < 4 or rest[3][0] != stamp:
            return None
        changed.update(s for s, *_ in messages if s <= seq)
        stamp = rest[3][1]
    return changed if stamp == now else None


def read_undo(driver: Driver, sid: int, since: int, turn: int) -> Undo:
    """Fold the journal from `since` on into one value per message, key and holder (the oldest wins)."""
    undo = Undo(since, turn)
    for (entry,) in driver.all(_ENTRIES_SINCE, {"sid": sid, "since": since}):
        _, messages, keys, holders, *prompt = json.loads(entry)
        if undo.prompt is None:
            totals = prompt[0] if prompt else []
            unknown = [None, None] if 0 < len(totals) <= 4 else []  # written before the counts of comebacks
            undo.prompt = PromptCounters(*totals, *unknown)
        for seq, base, verdict in messages:
            if seq < since:  # rows from `since` on are deleted anyway
                undo.verdicts.setdefault(seq, (base, verdict))
        for key, *values in keys:
            undo.keys.setdefault(
                key, (values[0], values[1], values[2], values[3] if len(values) > 3 else 0) if values else None
            )
        undo.holders.extend((bytes.fromhex(h), seq) for h, seq in holders if seq < since)
    return undo


def apply_undo(driver: Driver, sid: int, undo: Undo) -> None:
    """Write the folded values back. Rows of messages from `since` on (and their journal) are the caller's to delete."""
    holds = (undo.prompt or PromptCounters()).holds
    verdicts = [
        {"sid": sid, "seq": seq, "base": b, "verdict": v, "held": int(holds(seq, v in LIVE_VERDICTS))}
        for seq, (b, v) in undo.verdicts.items()
    ]
    driver.run_many(UPDATE_VERDICT, verdicts)
    driver.run_many(DELETE_KEY, [{"sid": sid, "key": key} for key, old in undo.keys.items() if old is None])
    kept = [
        {"sid": sid, "key": key, "definer_seq": old[0], "support": old[1], "kept_refs": old[2], "evicted_refs": old[3]}
        for key, old in undo.keys.items()
        if old is not None
    ]
    driver.run_many(UPSERT_KEY, kept)
    driver.run_many(INSERT_HOLDER, [{"sid": sid, "content_hash": h, "seq": seq} for h, seq in undo.holders])
