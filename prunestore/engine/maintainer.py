"""Incremental maintenance of one session's verdicts, one append at a time.

The rules are those of `prune` (docs/semantics.md); this module keeps their
result up to date by touching only what an append can change:

* pass 1, superseded: the last holder of each tool key (an index lookup);
* pass 1, expired: messages whose expiry turn the turn advance crossed
  (an index range on the expiry turn, each message visited once in its life);
* pass 2, duplicates: per normalized-content hash, the surviving holders in
  order; the first one is kept and the rest are duplicates;
* pass 3, restoration: per dependency key, its last definer and how many
  counting messages refer to it (``support``: surviving referrers in transitive
  mode, kept ones in direct mode) and how many of those are kept
  (``kept_refs``).

Restoration can lose support through cycles, so removals use delete and
re-derive: every restored message that might have lost its support, and the
restored messages downstream of it, are put in a set S; those with a counting
referrer outside S keep their place, and so does what they reach inside S;
the rest are dropped. A message with a kept referrer is anchored and never
enters S, which keeps S to the part of the graph that can actually change.

Storage is behind the small `Rows` protocol; this module does no I/O itself.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable

from ..clock import past_ttl
from ..errors import InvalidMessageError, shorten
from ..model import DUPLICATE, ERASED, EVICTED, EXPIRED, KEPT, PASS_1_SURVIVORS, SUPERSEDED, UNNEEDED
from ..policy import Policy
from .hashgroups import HashGroups
from .prompt import PromptCounters, PromptKeeper
from .state import KeyState, MsgState, Rows


class Maintainer:
    """Applies appends to one locked session and records what must be written back.

    Reads go through an identity map, so a row loaded twice is one object and
    every change made in this transaction is seen by later steps.
    """

    def __init__(
        self,
        rows: Rows,
        policy: Policy,
        current_turn: int,
        last_seq: int,
        prompt: PromptCounters | None = None,
        summaries: int = 0,
    ) -> None:
        self.rows = rows
        self.policy = policy
        self.transitive = policy.transitive
        self.current_turn = current_turn
        self.last_seq = last_seq
        self.msgs: dict[int, MsgState] = {}
        self.key_states: dict[str, KeyState] = {}
        self.new: list[MsgState] = []
        self._new_tool_holders: dict[str, MsgState] = {}
        self.hashes = HashGroups(rows)
        self._pending_expiry: list[tuple[int, int, MsgState]] = []  # heap of new messages with a TTL
        self._suspects: list[MsgState] = []
        self._candidates: list[MsgState] = []
        self.prompt = PromptKeeper(self, policy, prompt or PromptCounters()) if policy.gathers else None
        self.moved: set[MsgState] | None = None  # see `watch`
        self._last_at: int | None = None  # the time of the message at `last_seq`, once `_last_at_known`
        self._last_at_known = False
        self.summaries = summaries  # how many the session holds: without any, no eviction looks for them
        self._new_seqs: dict[str, int] = {}  # ids appended in this transaction, for the summaries that name them
        self._new_covering: dict[int, list[MsgState]] = {}  # covered seq -> summaries appended in this transaction

    def watch(self) -> set[MsgState]:
        """From now on, collect every message whose verdict or place in the prompt may have changed.

        A replay that follows the prompt step by step (`prunestore.whatif`) reads and clears it; nothing else pays.
        """
        self.moved = set()
        if self.prompt is not None:
            self.prompt.moved = self.moved
        return self.moved

    # -- loading, through the identity map -------------------------------

    def adopt(self, state: MsgState) -> MsgState:
        known = self.msgs.get(state.seq)
        if known is not None:
            return known
        if self.prompt is None:
            state.visible, state.evicted = None, False
        state.was_in_prompt = state.in_prompt
        state.original = (state.base, state.verdict)
        self.msgs[state.seq] = state
        return state

    def messages(self, seqs: Iterable[int]) -> list[MsgState]:
        seqs = list(seqs)
        missing = [s for s in seqs if s not in self.msgs]
        if missing:
            for state in self.rows.messages_by_seq(missing):
                self.adopt(state)
        return [self.msgs[s] for s in seqs]

    def keys(self, keys: Iterable[str]) -> list[KeyState]:
        if not keys:
            return []
        keys = list(keys)
        missing = [k for k in keys if k not in self.key_states]
        if missing:
            for ks in self.rows.keys(missing):
                ks.original = (ks.definer, ks.support, ks.kept_refs, ks.evicted_refs)
                self.key_states[ks.key] = ks
            for k in missing:
                if k not in self.key_states:
                    self.key_states[k] = KeyState(k)
        return [self.key_states[k] for k in keys]

    def definers(self, keys: Iterable[str], exclude: MsgState | None = None) -> list[MsgState]:
        seqs = {ks.definer for ks in self.keys(keys) if ks.definer is not None}
        if exclude is not None:
            seqs.discard(exclude.seq)
        return self.messages(sorted(seqs))

    def summaries_covering(self, state: MsgState) -> list[MsgState]:
        """The summaries that cover a message: stored ones and those appended in this transaction."""
        if not self.summaries:
            return []
        stored = [self.adopt(s) for s in self.rows.summaries_covering(state.seq)] if state.message is None else []
        return stored + self._new_covering.get(state.seq, [])

    def _cover(self, state: MsgState) -> None:
        """Resolve a new summary's `Message.summarizes` to seqs, and count those evicted (docs/semantics.md,
        "Summaries"): its base is kept while any is, else unneeded."""
        ids = state.summarizes
        assert ids, "a summary names what it covers"
        unknown = [i for i in ids if i not in self._new_seqs]
        found = {**self.rows.seqs_of(unknown), **self._new_seqs} if unknown else self._new_seqs
        missing = next((i for i in ids if i not in found), None)
        if missing is not None:
            raise InvalidMessageError(
                f"summarizes={shorten(missing)}: no earlier message of the session has this id "
                f"(in the summary id={shorten(state.id)})",
                message_id=state.id,
            )
        covered = self.messages(sorted(found[i] for i in ids))
        erased = next((c for c in covered if c.role == ERASED), None)
        if erased is not None:
            raise InvalidMessageError(
                f"summarizes={shorten(erased.id)}: that message was erased, so there is nothing to summarize "
                f"(in the summary id={shorten(state.id)})",
                message_id=state.id,
            )
        for c in covered:
            self._new_covering.setdefault(c.seq, []).append(state)
        state.covered = tuple(c.seq for c in covered)
        state.place = min(c.seq if c.place is None else c.place for c in covered)
        self.summaries += 1
        state.gaps = sum(c.evicted for c in covered)
        state.base = KEPT if state.gaps else UNNEEDED

    def _defined_keys(self, state: MsgState) -> list[KeyState]:
        """The keys whose last definer is this message."""
        return [ks for ks in self.keys(state.defines) if ks.definer == state.seq]

    # -- pass 2: the surviving holders of each content hash --------------

    def _hand_over_firsts(self) -> None:
        for first in self.hashes.new_firsts():
            (state,) = self.messages([first])
            if state.base == DUPLICATE:
                self._set_base(state, KEPT)

    # -- verdict changes and the reference counts they move --------------

    def touch(self, state: MsgState) -> None:
        """Mark a message as changed by this append; called before the change, so the prompt sees what it was."""
        if self.prompt is not None:
            self.prompt.note(state)
        if self.moved is not None:
            self.moved.add(state)
        state.dirty = True

    def _set_base(self, state: MsgState, base: str) -> None:
        old = state.base
        if old == base:
            return
        self.touch(state)
        state.base = base
        if old in PASS_1_SURVIVORS and base not in PASS_1_SURVIVORS and state.role in self.policy.dedupe_roles:
            self.hashes.leave(state)
        if old == KEPT:
            self._stop_keeping(state)
        elif base == KEPT:
            self._start_keeping(state)

    def _count_refs(self, state: MsgState, delta: int, *, kept: bool, support: bool) -> None:
        for ks in self.keys(state.refs):
            if kept:
                ks.kept_refs += delta
            if support:
                ks.support += delta
            ks.dirty = True

    def _start_keeping(self, state: MsgState) -> None:
        """A message becomes kept: its refs count, and their definers may come back."""
        already_counted = state.restored and self.transitive
        state.restored = False
        self._count_refs(state, +1, kept=True, support=not already_counted)
        if not already_counted:
            self._candidates.extend(self.definers(state.refs, exclude=state))

    def _stop_keeping(self, state: MsgState) -> None:
        """A kept message is dropped: it stays restored only if something still needs it.

        It is marked restored for now and left to `_settle`, which keeps it
        exactly when a counting message outside its own dependents refers to it.
        """
        self._count_refs(state, -1, kept=True, support=not self.transitive)
        state.restored = True
        self._suspects.append(state)
        if not self.transitive:
            self._suspects.extend(d for d in self.definers(state.refs, exclude=state) if d.restored)

    # -- pass 3: restoration to a fixed point ----------------------------

    def _anchored(self, state: MsgState) -> bool:
        return any(ks.kept_refs > 0 for ks in self._defined_keys(state))

    def _settle(self) -> None:
        if not (self.hashes.lost_first or self._suspects or self._candidates):
            return
        self._hand_over_firsts()
        self._drop_unsupported()
        self._restore_needed()

    def _drop_unsupported(self) -> None:
        """Delete and re-derive: drop restored messages no counting message still reaches."""
        suspects, self._suspects = self._suspects, []
        region: dict[int, MsgState] = {}
        stack = [s for s in suspects if s.restored]
        while stack:
            state = stack.pop()
            if state.seq in region or not state.restored or self._anchored(state):
                continue
            region[state.seq] = state
            if self.transitive:
                stack.extend(d for d in self.definers(state.refs) if d.restored and d.seq not in region)
        if not region:
            return
        inside = Counter(k for s in region.values() for k in s.refs) if self.transitive else Counter()

        def supported_from_outside(state: MsgState) -> bool:
            return any(ks.support - inside[ks.key] > 0 for ks in self._defined_keys(state))

        reached: set[int] = set()
        stack = [s for s in region.values() if supported_from_outside(s)]
        while stack:
            state = stack.pop()
            if state.seq in reached:
                continue
            reached.add(state.seq)
            if self.transitive:
                stack.extend(d for d in self.definers(state.refs) if d.seq in region and d.seq not in reached)
        for state in region.values():
            if state.seq not in reached:
                self.touch(state)
                state.restored = False
                if self.transitive:
                    self._count_refs(state, -1, kept=False, support=True)

    def _restore_needed(self) -> None:
        """Restore every candidate that a counting message refers to, and what it needs."""
        stack, self._candidates = self._candidates, []
        while stack:
            state = stack.pop()
            if state.survives or not any(ks.support > 0 for ks in self._defined_keys(state)):
                continue
            self.touch(state)
            state.restored = True
            if self.transitive:
                self._count_refs(state, +1, kept=False, support=True)
                stack.extend(self.definers(state.refs, exclude=state))

    # -- the append itself ------------------------------------------------

    def _advance_turn(self, turn: int) -> None:
        """Expire every surviving message whose expiry turn is now behind."""
        stored = [self.adopt(s) for s in self.rows.expiring(self.current_turn, turn)]
        fresh = []
        while self._pending_expiry and self._pending_expiry[0][0] < turn:
            fresh.append(heapq.heappop(self._pending_expiry)[2])
        self.current_turn = turn
        for state in sorted(stored + fresh, key=lambda s: s.seq):
            if state.base in PASS_1_SURVIVORS:
                self._set_base(state, EXPIRED)

    def _tool_holder(self, tool_key: str) -> MsgState | None:
        holder = self._new_tool_holders.get(tool_key)
        if holder is not None:
            return holder
        stored = self.rows.last_tool_holder(tool_key)
        return self.adopt(stored) if stored is not None else None

    def _idle_before(self, state: MsgState) -> bool:
        """Whether the message comes longer than the policy's `cache_ttl` after the one before it
        (docs/semantics.md, "Cache expiry"); the previous time is read only for a policy that asks."""
        ttl = self.policy.cache_ttl
        if ttl is None or state.at is None or self.last_seq == 0:
            return False
        if not self._last_at_known:
            self._last_at, self._last_at_known = self.rows.time_of(self.last_seq), True
        return past_ttl(self._last_at, state.at, ttl)

    def append(self, state: MsgState) -> None:
        """Apply one new message, given as a state with its effective keys filled in.

        The store appends states that carry their `Message` (it writes them); a replay in memory may not.
        """
        idle = self._idle_before(state)
        self._last_at, self._last_at_known = state.at, True
        if state.turn > self.current_turn:
            self._advance_turn(state.turn)
        self.last_seq += 1
        state.seq = self.last_seq
        state.base, state.restored, state.was_in_prompt, state.dirty = KEPT, False, False, True
        self.msgs[state.seq] = state
        if self.prompt is not None:
            state.visible, state.evicted = False, False
            self.prompt.note(state)
        self.new.append(state)
        if state.expires_after_turn is not None:
            heapq.heappush(self._pending_expiry, (state.expires_after_turn, state.seq, state))

        if state.tool_key is not None:
            previous = self._tool_holder(state.tool_key)
            self._new_tool_holders[state.tool_key] = state
            if previous is not None:
                self._set_base(previous, SUPERSEDED)

        self._new_seqs[state.id] = state.seq
        if state.gaps is not None:  # a summary: it holds no tool key, TTL or keys, and is no copy
            self._cover(state)
        elif state.role in self.policy.dedupe_roles:
            if self.hashes.join(state):
                state.base = DUPLICATE
        elif state.role == ERASED:  # it holds no tool key, TTL or keys: nothing else to do
            state.base = ERASED

        self.keys(state.defines + state.refs)
        for ks in self.keys(state.defines):
            if ks.definer is not None:
                (previous_definer,) = self.messages([ks.definer])
                if previous_definer.restored:
                    self._suspects.append(previous_definer)
            ks.definer = state.seq
            ks.dirty = True

        if state.base == KEPT:
            self._count_refs(state, +1, kept=True, support=True)
            self._candidates.extend(self.definers(state.refs, exclude=state))
        else:
            self._candidates.append(state)
        self._settle()
        if self.prompt is not None:
            self.prompt.step(idle)

    # -- what to write back ----------------------------------------------

    def changed_messages(self) -> list[MsgState]:
        """Stored messages (not new ones) whose base or verdict changed."""
        return [s for s in self.msgs.values() if s.dirty and s.message is None]

    def changed_keys(self) -> list[KeyState]:
        return [ks for ks in self.key_states.values() if ks.dirty]

    def hash_holder_changes(self) -> tuple[list[tuple[bytes, int]], list[tuple[bytes, int]]]:
        """(added, removed) rows of the surviving-holders index."""
        return self.hashes.changes()

    def delta(self) -> tuple[list[str], list[str], list[str]]:
        """Ids that came into the prompt, ids that left it, and ids the budget evicted anew, in append order."""
        added, removed, evicted = [], [], []
        for seq in sorted(self.msgs):
            state = self.msgs[seq]
            if state.in_prompt and not state.was_in_prompt:
                added.append(state.id)
            elif state.was_in_prompt and not state.in_prompt:
                removed.append(state.id)
            if state.verdict == EVICTED and (state.original is None or state.original[1] != EVICTED):
                evicted.append(state.id)
        return added, removed, evicted
