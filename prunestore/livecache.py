"""The live lists a store has read, kept in memory and checked against each session's change stamp.

A chatbot asks for the live list every turn. Read cold, 7,500 rows cost about
20 ms on SQLite, most of it the driver making cells and Python making objects,
and it grows with the session. Every write to a session sets a new random
stamp on its row, in the transaction that writes (`sql.sessions.update_session`),
so one read of that row tells whether a list read earlier is still the
session's state. An append made through the same store moves its session's
entry forward by naming the seqs whose rows it wrote; the next `live()` reads
just those rows. A write by anyone else (another process or store object, a
truncate, a rebuild) leaves a stamp the entry does not know, and the list is
read again in full, unless the undo journal shows that only appends wrote
since: each append's entry names the stamps it moved the session between
(`sql.undo.changed_since`), so a chain of them from the entry's stamp to the
session's says which rows to read, and a turn written by another process
costs what that turn changed.

The messages are shared between calls: they are immutable, and their
metadata is read-only (`prunestore.frozen`), so no caller can change what the
next call returns.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

from .errors import PruneStoreError, shorten
from .model import StoredMessage
from .sql.calls import prompt_rows
from .sql.driver import Driver, Statement
from .sql.rows import (
    ALL_MESSAGES,
    ANY_BY_SEQ,
    FULL_COLUMNS,
    IN_PROMPT,
    LIVE_BY_SEQ,
    LIVE_MESSAGES,
    content_column,
    metadata_column,
    seq_column,
    stored_message,
)
from .sql.session_row import SessionRow, live_params
from .sql.undo import changed_since
from .views import CachedView, Form, Prompt, View, ViewLinks

# The rows after a seq: what another writer's appends added since an entry was read.
_MESSAGES_AFTER = Statement(f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq > :seq")
_LIVE_AFTER = Statement(
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq > :seq AND {IN_PROMPT}"
)

_PLACE = attrgetter("place")
DEFAULT_LIVE_CACHE_BYTES = 64 * 2**20
_ROW_OVERHEAD = 900  # bytes a cached row costs beyond its text: its tuple and cells, a message object (tracemalloc)


def check_cache_bytes(live_cache_bytes: object) -> None:
    if isinstance(live_cache_bytes, bool) or not isinstance(live_cache_bytes, int) or live_cache_bytes < 0:
        raise PruneStoreError(
            f"live_cache_bytes={shorten(live_cache_bytes)}: expected a number of bytes (an int >= 0; 0 turns it off)"
        )


def _size(rows: list[tuple]) -> int:
    """Roughly the bytes the rows take: their content and metadata text (columns 3 and 6), plus overhead."""
    text = sum(map(len, map(content_column, rows))) + sum(map(len, filter(None, map(metadata_column, rows))))
    return text + len(rows) * _ROW_OVERHEAD


@dataclass(frozen=True, slots=True)
class CachedLive:
    """One session's live rows and messages as of `stamp`, once the rows at the `pending` seqs are read again."""

    sid: int
    stamp: int
    rows: list[tuple]  # live rows as selected with `sql.rows.FULL_COLUMNS`, in seq order
    shared: list[StoredMessage]  # the message of each row, handed to every caller
    size: int
    pending: frozenset[int] = frozenset()
    last_seq: int = 0  # the session's, at `stamp`
    ordered: list[StoredMessage] | None = None  # `shared` in the prompt's order, where it differs (summaries)

    @classmethod
    def read(cls, sid: int, stamp: int, rows: list[tuple], last_seq: int) -> CachedLive:
        """An entry of freshly read rows."""
        shared = [stored_message(r, frozen=True) for r in rows]
        return cls(sid, stamp, rows, shared, _size(rows), last_seq=last_seq, ordered=in_prompt_order(shared))

    def patched(self, fresh: list[tuple]) -> CachedLive:
        """This entry with the pending seqs' rows replaced by `fresh` (their live rows, read at `stamp`).

        Rows are found by bisection and the lists rebuilt from slices, so the
        Python work follows the rows changed, not the session's length.
        """
        rows, shared = self.rows, self.shared
        found = [i for i in (_position(rows, seq) for seq in sorted(self.pending)) if i >= 0]
        size = self.size - _size([rows[i] for i in found]) + _size(fresh)
        rows, shared = _without(rows, found), _without(shared, found)  # rows sort by seq first
        places = [
            (bisect_left(rows, seq_column(r), key=seq_column), r) for r in sorted(fresh)
        ]  # rows sort by seq first
        messages = [(i, stored_message(r, frozen=True)) for i, r in places]
        shared = _with(shared, messages)
        ordered = in_prompt_order(shared) if self.ordered or any(m.place is not None for _, m in messages) else None
        return replace(self, rows=_with(rows, places), shared=shared, size=size, pending=frozenset(), ordered=ordered)

    def messages(self) -> list[StoredMessage]:
        # A new list, at C speed; the messages (and their metadata) are read-only.
        return (self.shared if self.ordered is None else self.ordered)[:]


def in_prompt_order(messages: list[StoredMessage]) -> list[StoredMessage] | None:
    """The messages (in seq order) in the prompt's order, where a summary among them moves one; else None."""
    if not any(map(_PLACE, messages)):  # places are seqs, from 1
        return None
    return sorted(messages, key=StoredMessage.prompt_order)


def _position(rows: list[tuple], seq: int) -> int:
    """Where the row of `seq` is in `rows` (sorted by seq), or -1."""
    i = bisect_left(rows, seq, key=seq_column)
    return i if i < len(rows) and rows[i][0] == seq else -1


def _without(items: list, positions: list[int]) -> list:
    """`items` less those at `positions` (ascending), copied in slices."""
    out: list = []
    start = 0
    for i in positions:
        out += items[start:i]
        start = i + 1
    return out + items[start:]


def _with(items: list, insertions: Iterable[tuple[int, object]]) -> list:
    """`items` with each `(position, item)` (ascending) placed before the item now at that position."""
    out: list = []
    start = 0
    for i, item in insertions:
        out += items[start:i]
        out.append(item)
        start = i
    return out + items[start:]


class LiveCache:
    """Entries by session name (and view), least recently used first, within about `max_bytes` of memory.

    Each session has its live list (view None) and any `views.View` an
    adapter asked for; a write moves all of them forward together.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str | None], CachedLive | CachedView] = OrderedDict()
        self._views: dict[str, set[str | None]] = {}  # session name -> the views it has entries for
        self._size = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """The estimated bytes held."""
        return self._size

    def get(self, name: str, session: SessionRow, view: str | None = None) -> Any:
        """The cached entry under this name and view, when its key is the row's (its stamp may be older)."""
        with self._lock:
            entry = self._entries.get((name, view))
            if entry is None or entry.sid != session.session_id:
                return None
            self._entries.move_to_end((name, view))
            return entry

    def put(self, name: str, entry: CachedLive | CachedView, view: str | None = None) -> None:
        if entry.size > self.max_bytes:
            with self._lock:
                self._drop((name, view))
            return
        with self._lock:
            self._drop((name, view))
            self._entries[name, view] = entry
            self._views.setdefault(name, set()).add(view)
            self._size += entry.size
            while self._size > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def advance(
        self,
        name: str,
        sid: int,
        before: int | None,
        after: int,
        seqs: Iterable[int],
        cut: int | None,
        last_seq: int,
    ) -> None:
        """Record a committed write of this store that took the session from stamp `before` to `after`
        (and its last seq to `last_seq`), writing the rows at `seqs`, after taking back every message after
        seq `cut` (when given)."""
        seqs = frozenset(seqs)
        with self._lock:
            for view in list(self._views.get(name, ())):
                entry = self._entries[name, view]
                if entry.sid == sid and entry.stamp == before:
                    moved = {"stamp": after, "pending": entry.pending.union(seqs), "last_seq": last_seq}
                    if cut is not None and isinstance(entry, CachedView):
                        moved["cut"] = cut if entry.cut is None else min(cut, entry.cut)
                    self._entries[name, view] = replace(entry, **moved)  # type: ignore[arg-type]
                # else someone else wrote in between: the entry stays as it is, for the next read to catch up
                # through the journal (this write's entry included) or to read again

    def forget(self, name: str | None = None) -> None:
        """Drop one session's entries, or (with None) all of them."""
        with self._lock:
            if name is None:
                self._entries.clear()
                self._views.clear()
                self._size = 0
            else:
                for view in list(self._views.get(name, ())):
                    self._drop((name, view))

    def _drop(self, key: tuple[str, str | None]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._size -= entry.size
            views = self._views[key[0]]
            views.discard(key[1])
            if not views:
                del self._views[key[0]]


def read_live(cache: LiveCache, driver: Driver, name: str, row: SessionRow) -> list[StoredMessage]:
    """The session's live messages through the cache: kept, patched from the rows an own append wrote, or read."""
    if not cache.max_bytes or row.stamp is None:  # no stamp: not written since revision 0003
        messages = [stored_message(r, frozen=True) for r in driver.all(LIVE_MESSAGES, live_params(row))]
        return in_prompt_order(messages) or messages
    sid = row.session_id
    entry = _current(cache, driver, name, row)
    if entry is None:
        entry = CachedLive.read(sid, row.stamp, driver.all(LIVE_MESSAGES, live_params(row)), row.last_seq)
        cache.put(name, entry)
        return entry.messages()
    if entry.pending or entry.last_seq < row.last_seq:
        fresh = driver.chunks(LIVE_BY_SEQ, {"sid": sid}, "seqs", sorted(entry.pending))
        if entry.last_seq < row.last_seq:
            fresh += driver.all(_LIVE_AFTER, {"sid": sid, "seq": entry.last_seq})
        entry = replace(entry.patched(fresh), last_seq=row.last_seq)
        cache.put(name, entry)
    return entry.messages()


def _current(cache: LiveCache, driver: Driver, name: str, row: SessionRow, view: str | None = None) -> Any:
    """The cached entry at the row's stamp: as it is, or one read at an earlier stamp moved to the row's
    when only appends wrote since (their journal says what they changed; the rows after the entry's last
    seq are new); else None. The rows are read by the caller: the entry's last seq stays, and its pending
    seqs gain what the appends changed."""
    entry = cache.get(name, row, view)
    if entry is None or entry.stamp == row.stamp:
        return entry
    assert row.stamp is not None
    changed = changed_since(driver, row.session_id, entry.last_seq, entry.stamp, row.stamp)
    if changed is None:
        return None
    return replace(entry, stamp=row.stamp, pending=entry.pending.union(changed))


def read_view(cache: LiveCache, driver: Driver, name: str, row: SessionRow, form: Form) -> Prompt:
    """The session's prompt in `form`'s objects through the cache, kept and patched like `read_live`'s list."""
    sid, stamp = row.session_id, row.stamp
    cached = cache.max_bytes > 0 and stamp is not None
    entry = _current(cache, driver, name, row, form.name) if cached else None
    if entry is not None and (entry.pending or entry.cut is not None or entry.last_seq < row.last_seq):
        rows = driver.chunks(ANY_BY_SEQ, {"sid": sid}, "seqs", sorted(entry.pending))
        if entry.last_seq < row.last_seq:
            rows += driver.all(_MESSAGES_AFTER, {"sid": sid, "seq": entry.last_seq})
        assert stamp is not None  # the entry matched the row's stamp
        if entry.view.apply(rows, entry.cut, (entry.base, stamp)):
            entry = CachedView(sid, stamp, entry.view, entry.view.size, last_seq=row.last_seq, base=stamp)
            cache.put(name, entry, form.name)
        else:  # another thread moved the view on from a later state than the one read here
            entry = None
    if entry is None:
        view = View(form, stamp=stamp)
        links = ViewLinks(form)
        read = prompt_rows(driver, row, links) if getattr(form, "indexed", False) else None
        if read is None:
            view.apply(driver.all(ALL_MESSAGES, {"sid": sid}))
        else:
            view.apply([r for r, _ in read], read=links.read)
            view.known = {seq_column(r) for r, _ in read}
        if cached:
            assert stamp is not None
            cache.put(name, CachedView(sid, stamp, view, view.size, last_seq=row.last_seq, base=stamp), form.name)
        return view.prompt()
    return entry.view.prompt()
