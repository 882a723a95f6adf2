"""What the model is shown when removals wait for events and a budget caps the prompt.

The passes decide what survives; this module keeps the prompt, one append at
a time, by the rules of docs/semantics.md ("Budget and removal events"):

* a message the passes drop stays in the prompt (``pending``) until an event;
* a message the passes keep joins at once (a new one at the end, one a
  new reference needs back in its place), unless the budget evicted it;
* an evicted message whose key a message in the prompt refers to comes back
  at once, and so does what it needs;
* an event happens when the pending tokens reach `clear_at_least` or the
  prompt is over the budget; it removes every pending message and, over the
  budget, evicts the oldest evictable messages until the prompt is
  `clear_at_least` tokens under it (with ``evict="definers_last"``, the
  current definers of keys only once nothing else is left to evict);
* a summary is in while a message it covers is evicted: each keeps the count
  of those (``gaps``), so an eviction or a comeback moves the summaries that
  cover it, and one that joins in an eviction walk is walked too;
* a message said longer than `cache_ttl` after the one before it finds the
  provider's cache cold, so an event then costs nothing: it happens if
  anything is pending or the prompt is above ``budget - clear_at_least``,
  and evicts down to that as an event over the budget does.

Counts kept so that no step reads the session: the prompt's tokens and the
pending tokens (on the session row), and per key the counting referrers the
budget evicted (``evicted_refs``), so a definer's support *in the prompt* is
``support - evicted_refs``. Rows are reached through the maintainer's
identity map (`state.Index`); this module does no I/O itself.

Evictions walk the prompt oldest first. So that a walk does not read again
what earlier walks passed, the session keeps a cursor where the last walk
stopped: below it, the messages still in the prompt are only those a walk
passed without evicting (pinned, needed) or that came back since, and each
is stored *held* (``held_below``), a small partial index. A message written
is held exactly when it is in the prompt below the cursor.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from ..model import KEPT, UNNEEDED, supports
from ..policy import Policy
from .state import Index, MsgState

_FIRST_PAGE, _PAGE = 8, 64  # stored prompt messages read at a time when looking for the oldest evictable one


@dataclass
class PromptCounters:
    """A session's prompt totals, as stored on its row: tokens in the prompt, pending tokens, events so far.

    And where the last eviction walk stopped (`cursor`): bookkeeping, not part of the prompt's `values`.
    `comebacks` and `late_joins` count the steps that put a message back before the prompt's end
    without an event (see `step`); None for a session whose history predates the count.
    """

    tokens: int = 0
    pending: int = 0
    events: int = 0
    cursor: int = 0
    comebacks: int | None = 0
    late_joins: int | None = 0

    def values(self) -> tuple[int, int, int]:
        return self.tokens, self.pending, self.events

    def breaks(self) -> tuple[int | None, int | None]:
        return self.comebacks, self.late_joins

    def copy(self) -> PromptCounters:
        return PromptCounters(self.tokens, self.pending, self.events, self.cursor, self.comebacks, self.late_joins)

    def holds(self, seq: int, in_prompt: bool) -> bool:
        """Whether a message is stored held: in the prompt, below the cursor."""
        return in_prompt and seq < self.cursor

    def held_below(self, state: MsgState) -> bool:
        return self.holds(state.seq, state.in_prompt)


# What a change is measured against: (in the prompt, surviving the passes, counting, evicted).
_Flags = tuple[bool, bool, bool, bool]


class PromptKeeper:
    """The prompt of one locked session, moved on after each message the maintainer applies."""

    def __init__(self, index: Index, policy: Policy, counters: PromptCounters) -> None:
        self.index = index
        self.policy = policy
        self.counters = counters
        self._before: dict[int, tuple[MsgState, _Flags]] = {}
        self._pending: dict[int, MsgState] = {}  # pending messages changed in this transaction
        # Live messages in the prompt changed (or passed by a walk) in this transaction, not yet stored as such.
        self._shown: dict[int, MsgState] = {}
        self._freed: list[int] = []  # definers that just lost a counting referrer in the prompt
        self._joined: list[int] = []  # summaries that joined the prompt in an eviction walk (`_count_gap`)
        self._touching: dict[int, _Flags] = {}  # during `step`: the messages it has yet to bring in line
        self.moved: set[MsgState] | None = None  # `Maintainer.watch`

    # -- bookkeeping -------------------------------------------------------

    def _counts(self, state: MsgState) -> bool:
        """Whether its refs count as support (docs/semantics.md, restoration)."""
        return supports(state.base, state.restored, self.index.transitive)

    def _flags(self, state: MsgState) -> _Flags:
        return bool(state.visible), state.survives, self._counts(state), state.evicted

    def note(self, state: MsgState) -> None:
        """Remember how a message stood before this step first changes it."""
        if state.seq not in self._before:
            self._before[state.seq] = (state, self._flags(state))

    def _account(self, state: MsgState, before: _Flags) -> None:
        """Move the totals, the per-key counts and the in-memory sets from `before` to the state as it is now."""
        shown, surviving, counts, evicted = self._flags(state)
        was_shown, was_surviving, was_counting, was_evicted = before
        tokens = state.tokens
        self.counters.tokens += tokens * (shown - was_shown)
        self.counters.pending += tokens * ((shown and not surviving) - (was_shown and not was_surviving))
        delta = (evicted and counts) - (was_evicted and was_counting)
        if delta:
            for ks in self.index.keys(state.refs):
                ks.evicted_refs += delta
                ks.dirty = True
                if delta > 0 and ks.definer is not None and ks.definer != state.seq:
                    self._freed.append(ks.definer)  # it may be evictable now: `_evict` looks again
        state.dirty = True
        if self.moved is not None:
            self.moved.add(state)
        for members, member in ((self._pending, shown and not surviving), (self._shown, shown and surviving)):
            if member:
                members[state.seq] = state
            else:
                members.pop(state.seq, None)
        if evicted != was_evicted:
            for summary in self.index.summaries_covering(state):
                self._count_gap(summary, +1 if evicted else -1)

    def _count_gap(self, summary: MsgState, delta: int) -> None:
        """A message the summary covers was evicted (+1) or is no longer (-1): with its first gap the summary
        is needed and joins at once, with its last it is unneeded (docs/semantics.md, "Summaries")."""
        assert summary.gaps is not None
        before = self._touching.get(summary.seq) or self._flags(summary)
        summary.gaps += delta
        if summary.gaps == 1 and delta > 0:
            summary.base = KEPT
            if not summary.visible and not summary.evicted:
                summary.visible = True
                self._joined.append(summary.seq)  # the eviction walk under way looks at it (`_evict`)
        elif summary.gaps == 0:
            summary.base = UNNEEDED
            summary.evicted = False  # in the prompt, it now waits for the next event; out of it, it stays out
        if summary.seq in self._touching:
            self._touching[summary.seq] = before  # `step` accounts for it, from what it was, in its turn
        else:
            self._account(summary, before)

    def _set(self, state: MsgState, *, visible: bool, evicted: bool) -> None:
        before = self._flags(state)
        state.visible, state.evicted = visible, evicted
        self._account(state, before)

    # -- one step: after each message ------------------------------------

    def step(self, idle: bool = False) -> None:
        """Bring the prompt in line with the passes' new verdicts, then hold an event if one is due.

        `idle`: the new message finds the provider's cache expired, so any pending tokens, or any above the
        budget's target, are worth an event.
        """
        touched, self._before = sorted(self._before.values(), key=lambda t: t[0].seq), {}
        self._touching = {state.seq: before for state, before in touched}
        newly_counting = []
        joined = False
        summaries = []  # they join once what comes back is in: that may leave them unneeded
        for state, _ in touched:
            if state.gaps is not None and state.survives and not state.visible and not state.evicted:
                summaries.append(state)
                continue
            before = self._touching.pop(state.seq)
            joined |= self._settle_one(state, before)
            if state.visible and self._counts(state) and not (before[0] and before[2]):
                newly_counting.append(state)
        came_back = self._bring_back(newly_counting)
        for state in summaries:
            joined |= self._settle_one(state, self._touching.pop(state.seq))

        policy, counters = self.policy, self.counters
        if counters.late_joins is not None:
            counters.late_joins += joined
        if counters.comebacks is not None:
            counters.comebacks += came_back
        over = policy.budget is not None and counters.tokens > policy.budget
        target = None if policy.budget is None else policy.budget - policy.clear_at_least
        trim = idle and target is not None and counters.tokens > target
        if over or trim or 0 < counters.pending >= (1 if idle else policy.clear_at_least):
            counters.events += 1
            for state in self._pending_now():
                self._set(state, visible=False, evicted=False)
            if over or trim:
                assert target is not None
                definers_last = policy.evict == "definers_last"
                self._evict(target, definers=not definers_last)
                if definers_last and counters.tokens > target:
                    self._evict(target, definers=True, plain_first=True)

    def _settle_one(self, state: MsgState, before: _Flags) -> bool:
        """Bring one message the step touched in line with its verdict: whether it joined the prompt late."""
        joined = False
        if not state.survives:
            state.evicted = False  # dropped by the passes: its verdict says why, not the budget
        elif not state.visible and not state.evicted:
            state.visible = True  # new, or needed back: in at once
            joined = state.seq != self.index.last_seq
        self._account(state, before)
        return joined

    def _bring_back(self, stack: list[MsgState]) -> bool:
        """Evicted definers of what now counts in the prompt come back, and what they need, at once: whether any did."""
        came_back = False
        while stack:
            state = stack.pop()
            for definer in self.index.definers(state.refs, exclude=state):
                if definer.evicted:
                    came_back = True
                    self._set(definer, visible=True, evicted=False)
                    if self._counts(definer):
                        stack.append(definer)
        return came_back

    def _pending_now(self) -> list[MsgState]:
        adopt = self.index.adopt
        found = {s.seq: s for s in map(adopt, self.index.rows.pending())}
        found.update(self._pending)
        return [s for s in found.values() if s.visible and not s.survives]

    # -- eviction ------------------------------------------------------------

    def _in_prompt_in_order(self) -> Iterator[MsgState]:
        """Live messages in the prompt, oldest first: the stored ones merged with those changed in memory."""
        adopt, rows, cursor = self.index.adopt, self.index.rows, self.counters.cursor

        def stored() -> Iterator[MsgState]:
            after, size = 0, _FIRST_PAGE
            while True:
                page = rows.in_prompt_after(after, size, cursor)
                yield from map(adopt, page)
                if len(page) < size:
                    return
                after, size = page[-1].seq, _PAGE

        changed = sorted(self._shown.values(), key=lambda s: s.seq)
        last = 0
        for state in heapq.merge(stored(), changed, key=lambda s: s.seq):
            if state.seq != last:
                last = state.seq
                yield state

    def _needed(self, state: MsgState) -> bool:
        """Whether a counting message in the prompt (other than itself) refers to a key it is the definer of."""
        own = self._counts(state) and not state.evicted
        return any(
            ks.definer == state.seq and ks.shown_support - (own and ks.key in state.refs) > 0
            for ks in self.index.keys(state.defines)
        )

    def _defines_now(self, state: MsgState) -> bool:
        """Whether it is the current definer of a key."""
        return any(ks.definer == state.seq for ks in self.index.keys(state.defines))

    def _evict(self, target: int, *, definers: bool, plain_first: bool = False) -> None:
        """Evict the oldest evictable messages until the prompt holds at most `target` tokens.

        Without `definers`, the current definers of keys are passed like
        pinned ones (the first walk of ``evict="definers_last"``; a second
        walk from the start takes them). Evicting a referrer can free an
        older definer, which is then looked at again before anything newer
        (`_freed`). A summary that an eviction brings in is looked at in its
        turn too, or, in the second walk of ``"definers_last"`` (`plain_first`),
        before any definer: it defines nothing. The cursor moves to where the
        walk stopped; what it passed and left in the prompt is written held.
        """
        pinned, turn, messages = self.policy.pinned_roles, self.index.current_turn, self.index.messages
        counters, passed_from = self.counters, self.counters.cursor
        self._freed.clear()
        self._joined.clear()
        stream = self._in_prompt_in_order()
        upcoming = next(stream, None)
        again: list[int] = []
        plain: list[int] = []  # summaries that joined, in the second walk of "definers_last"
        stop = None
        while counters.tokens > target:
            if plain:
                (state,) = messages([heapq.heappop(plain)])
                if state.turn >= turn or state.role in pinned or not (state.visible and state.survives):
                    continue  # it stays; the walk goes on among the definers
            elif again and (upcoming is None or again[0] < upcoming.seq):
                (state,) = messages([heapq.heappop(again)])
            elif upcoming is not None:
                state, upcoming = upcoming, next(stream, None)
            else:
                break
            if not (state.visible and state.survives):
                continue
            if state.turn >= turn:
                stop = state.seq  # this and everything after it belong to the current turn
                break
            if state.role in pinned or self._needed(state) or (not definers and self._defines_now(state)):
                if state.seq >= passed_from:  # newly below the cursor: written held, and walked again from memory
                    state.dirty = True
                    self._shown[state.seq] = state
                continue
            self._set(state, visible=False, evicted=True)
            for seq in self._freed:
                heapq.heappush(again, seq)
            for seq in self._joined:
                heapq.heappush(plain if plain_first else again, seq)
            self._freed.clear()
            self._joined.clear()
        if stop is None:
            stop = upcoming.seq if upcoming is not None else self.index.last_seq + 1
        counters.cursor = max(counters.cursor, stop)
