"""The first append to an empty session, decided as a batch.

With nothing stored, running the passes once over the new messages is
cheaper than applying them one at a time, and it writes the same rows (the
tests check it against the maintainer and against `prune`). An import of
whole sessions takes this path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from operator import attrgetter

from ..model import KEPT, PASS_1_SURVIVORS, supports
from ..policy import Policy
from ..prune import passes
from .state import KeyState, MsgState


def index_rows(states: Sequence[MsgState], policy: Policy) -> tuple[dict[str, KeyState], set[tuple[bytes, int]]]:
    """The key rows and surviving-holder rows of a session whose states carry their final verdicts."""
    keys: dict[str, KeyState] = {}
    support: Counter[str] = Counter()
    kept_refs: Counter[str] = Counter()
    for state in states:
        for key in state.defines:
            keys.setdefault(key, KeyState(key)).definer = state.seq
        counts = supports(state.base, state.restored, policy.transitive)
        for key in state.refs:
            keys.setdefault(key, KeyState(key))
            support[key] += counts
            kept_refs[key] += state.base == KEPT
    for key, ks in keys.items():
        ks.support, ks.kept_refs = support[key], kept_refs[key]
    holders = {(s.content_hash, s.seq) for s in states if s.role in policy.dedupe_roles and s.base in PASS_1_SURVIVORS}
    return keys, holders


class FirstAppend:
    """The first append to an empty session, decided as a batch: the passes once, then the index rows.

    What it writes equals what `maintainer.Maintainer` writes appending the
    same messages one at a time (the incremental contract), at a fraction of
    the cost: nothing is looked up, since nothing is stored yet. An import of
    whole sessions takes this path. It has the maintainer's result interface.
    """

    def __init__(self, states: list[MsgState], policy: Policy, turn_before: int) -> None:
        for seq, state in enumerate(states, 1):
            state.seq = seq
        self.new = states
        self.last_seq = len(states)
        self.summaries = 0  # a batch holding a summary is appended by the maintainer
        self.current_turn = max([turn_before] + [s.message.turn for s in states if s.message is not None])
        base, restored = passes(
            states,
            policy,
            self.current_turn,
            text=attrgetter("content_hash"),
            defines=attrgetter("defines"),
            refs=attrgetter("refs"),
        )
        for i, state in enumerate(states):
            state.base, state.restored = base[i], i in restored
        self._keys, self._holders = index_rows(states, policy)

    def changed_messages(self) -> list[MsgState]:
        return []  # nothing was stored before

    def changed_keys(self) -> list[KeyState]:
        """The keys to write: a key nothing defines or counts needs no row (an absent row means the same)."""
        return [ks for ks in self._keys.values() if ks.definer is not None or ks.support or ks.kept_refs]

    def hash_holder_changes(self) -> tuple[list[tuple[bytes, int]], list[tuple[bytes, int]]]:
        return sorted(self._holders), []

    def delta(self) -> tuple[list[str], list[str], list[str]]:
        return [s.id for s in self.new if s.survives], [], []
