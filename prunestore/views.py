"""A session's prompt in a framework's own objects, kept up to date from each append like the live list.

An adapter (LangChain, the Agents SDK) describes its objects with a `Form`:
what a stored message becomes, which tool calls it makes or answers, and how
to send it without some of its calls. A `View` turns the session's messages
into the prompt:

- a live message is sent as it was given, in append order;
- a tool call is removed from its message when its result is stored and
  pruned; a call with no result yet stays while only results follow its
  message (its result is on its way), and is removed once any other
  message follows (the conversation went on without it: providers refuse a
  call without its result). Where each call is a message of its own
  (`Unit.joins`), consecutive calls are one step: parallel calls wait
  together;
- a message left with no calls and no content is not sent; a message that
  was empty as given is;
- a pruned message whose calls have live results is sent with those calls
  only, so no result goes without its call;
- a message that leads the next one (reasoning before the output it
  preceded) is sent only while the message stored right after it is sent,
  or, where that is one of parallel calls stored apart, while any of them
  is: it goes with the last of them.

A result answers the latest call with its call id made before it (providers
reuse ids). The view keeps, per message that makes or answers calls, only
what these rules need, and applies changed rows in time proportional to the
rows: after the store's own append, `PruneStore.view` reads the rows that
append changed and patches the prompt, as `live()` does for the live list.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .model import PENDING, StoredMessage
from .sql.rows import metadata_column, seq_column, stored_message

_ITEM_OVERHEAD = (
    1150  # bytes a message costs beyond its text: the framework's object and this view's bookkeeping (tracemalloc)
)


@dataclass(frozen=True, slots=True)
class Unit:
    """What one stored message is to a framework: its object, the calls it makes, the call it answers."""

    item: Any
    calls: tuple[str, ...] = ()
    answers: str | None = None
    leads: bool = False  # sent only while the message stored right after it is sent
    # A call stored apart from the calls before it (each Responses call is an item): it joins their step, so
    # they go on waiting for their results, as parallel calls do.
    joins: bool = False


class Form(Protocol):
    """A framework's objects, as a `View` needs them."""

    name: str  # names the view in the store's cache
    # A form may say ``indexed = True`` when every call id its `unit` reads is one the store's index of
    # calls finds in the metadata (`prunestore.sql.calls.call_ids`): a fresh view then reads only the
    # messages that decide the prompt, not the session. Without it, a fresh view reads every message.

    def unit(self, message: StoredMessage) -> Unit:
        """The framework's object for a stored message, with the call ids it makes or answers."""
        ...

    def without_calls(self, item: Any, dropped: frozenset[str]) -> Any | None:
        """`item` without the calls in `dropped`; None when nothing is left to send."""
        ...


@dataclass
class View:
    """The prompt of one session in one `Form`, and what it takes to patch it.

    `apply` is idempotent (a row applied twice changes nothing more), so two
    threads patching with the same rows agree. `stamp` is the session's stamp
    whose state the view holds: a patch names the stamp it starts from and the
    one it reaches, and one that would start elsewhere (a thread that read an
    older state) is refused rather than mixed in.
    """

    form: Form
    order: list[int] = field(default_factory=list)  # seqs of the items sent, ascending
    items: list[Any] = field(default_factory=list)
    callers: dict[int, Unit] = field(default_factory=dict)  # every message that makes calls
    live: dict[int, bool] = field(default_factory=dict)  # of callers and results
    answered: dict[int, dict[str, int]] = field(default_factory=dict)  # caller seq -> call id -> result seq
    owners: dict[int, int] = field(default_factory=dict)  # result seq -> the caller it answers
    answers: dict[int, str] = field(default_factory=dict)  # result seq -> the call id it answers
    latest: dict[str, list[int]] = field(default_factory=dict)  # call id -> seqs of its callers, ascending
    # The callers of the conversation's last step (one, or consecutive ones that join), while only results
    # follow: their calls without a result wait.
    waiting: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # seqs of the messages that are not results, ascending
    leaders: dict[int, Any] = field(default_factory=dict)  # seq of a message that leads -> its item (None: pruned)
    pending: set[int] = field(default_factory=set)  # seqs of the messages sent until the next removal event
    last_seq: int = 0
    size: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stamp: int | None = None
    # Seqs of the messages read, when the view was built from the rows that decide the prompt
    # (`prunestore.sql.calls`) rather than from every message: a patch it cannot take exactly is refused.
    known: set[int] | None = None

    def apply(
        self,
        rows: Iterable[tuple],
        cut: int | None = None,
        moves: tuple[int | None, int | None] | None = None,
        read: Mapping[int, tuple[StoredMessage, Unit]] | None = None,
    ) -> bool:
        """Take in rows read with `sql.rows.FULL_COLUMNS` (new ones, and old ones whose verdict changed),
        after forgetting the messages after seq `cut` (when given: a truncate or pop took them back).

        With `moves` (stamp from, stamp to), only a view at the first stamp takes them in, or one already at
        the second; False when the view is at neither (the caller reads the session afresh). `read` holds
        the messages of some of the rows with their units, already made (`ViewLinks`), by seq."""
        made = dict(read or {})
        with self.lock:
            if moves is not None:
                if self.stamp == moves[1]:
                    return True
                if self.stamp != moves[0]:
                    return False
            rows = sorted(rows, key=seq_column)
            if self.known is not None and not self._can_take(rows, cut, made):
                return False
            if moves is not None:
                self.stamp = moves[1]
            if cut is not None:
                self._cut(cut)
            sent: dict[int, Any | None] = {}  # what changed messages that make no calls send now
            dirty: set[int] = set()
            for row in rows:
                message, known_unit = made.get(seq_column(row)) or (stored_message(row), None)
                seq, live = message.seq, message.live
                if message.verdict == PENDING:
                    self.pending.add(seq)
                else:
                    self.pending.discard(seq)
                unit = None
                if seq > self.last_seq or seq not in self.callers:
                    unit = known_unit or self.form.unit(message)
                if seq > self.last_seq:
                    dirty.update(self._register(seq, unit, len(message.content) + len(metadata_column(row) or "")))
                if seq in self.live:  # it makes calls, or answers one
                    self.live[seq] = live
                    dirty.add(self.owners.get(seq, seq))
                if unit is not None and seq not in self.callers:
                    if unit.leads:
                        self.leaders[seq] = unit.item if live else None
                    else:
                        sent[seq] = unit.item if live else None
                dirty.add(seq)
            for seq in sorted(dirty):
                if seq not in self.leaders:
                    self._place(seq, self._render(seq, sent))
            self._lead(dirty)
        return True

    def _can_take(self, rows: list[tuple], cut: int | None, read: dict[int, tuple[StoredMessage, Unit]]) -> bool:
        """Whether a view built from some of the messages takes `rows` as one built from all would: not
        after a cut (the conversation's last step may be a message it never read), nor an old message it
        never read that makes or answers calls, nor a new result of a call it knows no message of.

        Each row's message and unit go into `read`, for `apply` to take them in without reading them again."""
        known = self.known
        if cut is not None or known is None:
            return False
        made: set[str] = set()  # calls made by the new rows, which their results after them answer
        for row in rows:
            seq = seq_column(row)
            if seq not in read:
                message = stored_message(row)
                read[seq] = (message, self.form.unit(message))
            unit = read[seq][1]
            if seq <= self.last_seq and seq not in known and (unit.calls or unit.answers is not None):
                return False
            if seq > self.last_seq:
                if (
                    unit.answers is not None
                    and not unit.calls
                    and unit.answers not in self.latest
                    and unit.answers not in made
                ):
                    return False
                made.update(unit.calls)
        return True

    def _register(self, seq: int, unit: Unit | None, text_size: int) -> Iterable[int]:
        """Index a message new to the view: the calls it makes, or which caller it answers.

        Returns the callers whose calls it leaves abandoned (they send less now).
        """
        assert unit is not None
        self.last_seq = seq
        if self.known is not None:
            self.known.add(seq)
        self.size += text_size + _ITEM_OVERHEAD
        callers = self.latest.get(unit.answers) if unit.answers is not None and not unit.calls else None
        if callers:  # a result whose call the session does not hold is an ordinary message
            caller = callers[-1]
            self.answered[caller][unit.answers] = seq  # type: ignore[index]
            self.owners[seq], self.answers[seq], self.live[seq] = caller, unit.answers, False  # type: ignore[assignment]
            return ()
        self.steps.append(seq)
        abandoned: list[int] = []
        if not (unit.calls and unit.joins and self.waiting):
            abandoned, self.waiting = self.waiting, []
        if unit.calls:
            self.callers[seq], self.answered[seq], self.live[seq] = unit, {}, False
            self.waiting.append(seq)
            for call in unit.calls:
                self.latest.setdefault(call, []).append(seq)
        return abandoned

    @property
    def moved_on(self) -> int:
        """The seq where the conversation's last step began: calls without a result before it are abandoned."""
        if self.waiting:
            return self.waiting[0]
        return self.steps[-1] if self.steps else 0

    def _last_step(self) -> list[int]:
        """The callers of the last step, read back from the last message that is not a result."""
        callers: list[int] = []
        for seq in reversed(self.steps):
            unit = self.callers.get(seq)
            if unit is None:
                break
            callers.insert(0, seq)
            if not unit.joins:
                break
        return callers

    def _cut(self, last: int) -> None:
        """Forget the messages after seq `last`, as if never applied; costs what is cut.

        What the cut changed in the messages kept comes after, in `apply`'s rows.
        """
        dirty: set[int] = set()
        while self.owners and (seq := next(reversed(self.owners))) > last:  # results, last first (seq order)
            caller, call = self.owners.pop(seq), self.answers.pop(seq)
            del self.live[seq]
            results = self.answered.get(caller)
            if results is not None and results.get(call) == seq:  # an earlier result of the call answers it again
                earlier = [s for s in reversed(self.owners) if self.owners[s] == caller and self.answers[s] == call][:1]
                if earlier:
                    results[call] = earlier[0]
                else:
                    del results[call]
            dirty.add(caller)
        while self.steps and self.steps[-1] > last:
            seq = self.steps.pop()
            unit = self.callers.pop(seq, None)
            if unit is not None:
                del self.answered[seq], self.live[seq]
                for call in unit.calls:
                    callers = self.latest[call]
                    callers.remove(seq)
                    if not callers:
                        del self.latest[call]
        i = bisect_left(self.order, last + 1)
        del self.order[i:], self.items[i:]
        while self.leaders and next(reversed(self.leaders)) > last:  # registered in seq order
            self.leaders.popitem()
        self.pending = {seq for seq in self.pending if seq <= last}
        self.last_seq = min(self.last_seq, last)
        self.waiting = self._last_step()
        dirty.update(self.waiting or self.steps[-1:])  # their calls without a result wait again
        for seq in sorted(s for s in dirty if s in self.callers and s <= last):
            self._place(seq, self._render(seq, {}))
        self._lead({*dirty, last + 1})

    def _render(self, seq: int, sent: dict[int, Any | None]) -> Any | None:
        caller = self.callers.get(seq)
        if caller is None:
            return sent[seq]
        results = self.answered[seq]
        pruned = frozenset(  # calls whose result was pruned, and those abandoned
            c for c in caller.calls if (not self.live[results[c]] if c in results else seq < self.moved_on)
        )
        if self.live[seq]:
            return self.form.without_calls(caller.item, pruned) if pruned else caller.item
        needed = frozenset(c for c in caller.calls if c in results and self.live[results[c]])
        return self.form.without_calls(caller.item, frozenset(caller.calls) - needed) if needed else None

    def _lead(self, changed: Iterable[int]) -> None:
        """Place again the leaders of the messages in `changed` (and the leaders themselves), the last first:
        a leader is sent while it is live and what it leads is sent (the message after it, which may be a
        leader too; or any of the parallel calls stored from there on, which share their reasoning)."""
        todo = {seq for c in changed for seq in (c, self._group_start(c) - 1) if seq in self.leaders}
        while todo:
            seq = max(todo)
            todo.discard(seq)
            item, before = self.leaders[seq], self._sent(seq)
            self._place(seq, item if item is not None and any(map(self._sent, self._led(seq))) else None)
            if self._sent(seq) != before and seq - 1 in self.leaders:
                todo.add(seq - 1)

    def _joins(self, seq: int) -> bool:
        unit = self.callers.get(seq)
        return unit is not None and unit.joins

    def _group_start(self, seq: int) -> int:
        """The first of the calls stored apart that `seq` is one of, consecutive (`seq` itself otherwise)."""
        while self._joins(seq) and self._joins(seq - 1):
            seq -= 1
        return seq

    def _led(self, seq: int) -> Iterable[int]:
        """What the leader at `seq` leads: the message after it and, when that is a call stored apart, the
        calls stored consecutively with it."""
        after = seq + 1
        yield after
        while self._joins(after) and self._joins(after + 1):
            after += 1
            yield after

    def _sent(self, seq: int) -> bool:
        i = bisect_left(self.order, seq)
        return i < len(self.order) and self.order[i] == seq

    def _place(self, seq: int, item: Any | None) -> None:
        i = bisect_left(self.order, seq)
        if i < len(self.order) and self.order[i] == seq:
            if item is None:
                del self.order[i], self.items[i]
            else:
                self.items[i] = item
        elif item is not None:
            self.order.insert(i, seq)
            self.items.insert(i, item)

    def prompt(self) -> Prompt:
        with self.lock:
            prompt = Prompt(self.items)
            prompt.stable = self._stable()
            return prompt

    def _stable(self) -> int:
        """How many of the first items stay as they are at the next removal event, which takes the pending
        messages out: those before the first pending message, its caller when it is a result (the call goes
        with it), and the leaders right before either (they go with what they lead)."""
        if not self.pending:
            return len(self.items)
        first = min(self.owners.get(seq, seq) for seq in self.pending)
        while first - 1 in self.leaders:
            first -= 1
        return bisect_left(self.order, first)


class Prompt(list):
    """A view's items, in a new list; `stable` of the first stay as they are through the next removal event
    (all of them when nothing is pending), so a provider's prompt cache can keep them across it."""

    __slots__ = ("stable",)
    stable: int


class ViewLinks:
    """What `prunestore.sql.calls.prompt_rows` asks of a message, as `form` reads it; it keeps each
    message with its unit for the view that takes the rows in (`View.apply`'s `read`)."""

    def __init__(self, form: Form) -> None:
        self.form = form
        self.read: dict[int, tuple[StoredMessage, Unit]] = {}

    def __call__(self, message: StoredMessage) -> tuple[list[str | None], bool]:
        unit = self.form.unit(message)
        self.read[message.seq] = (message, unit)
        continues = (unit.answers is not None and not unit.calls) or (bool(unit.calls) and unit.joins)
        return [*unit.calls, *([unit.answers] if unit.answers is not None else [])], continues


@dataclass(frozen=True, slots=True)
class CachedView:
    """A `View` in the store's cache, as of `stamp`, once cut after seq `cut` (when given) and the rows at the
    `pending` seqs are applied."""

    sid: int
    stamp: int
    view: View
    size: int
    pending: frozenset[int] = frozenset()
    cut: int | None = None
    last_seq: int = 0  # the session's, at `stamp`
    base: int | None = None  # the stamp the view held when this entry was made
