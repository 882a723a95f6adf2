"""The state a session's indexes must hold, derived from a batch rerun.

`verify` compares it with what is stored; `rebuild` writes it. Deriving it
from `prune` (and not from the incremental code) is what makes the check
independent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .incremental import KeyState, MsgState, new_state
from .model import DUPLICATE, KEPT, Message, Policy
from .prune import PruneResult, prune

__all__ = ["ExpectedState", "expected_state"]


@dataclass
class ExpectedState:
    result: PruneResult
    states: list[MsgState]  # one per message, seq and verdicts filled in
    keys: dict[str, KeyState]
    hash_holders: set[tuple[bytes, int]]


def expected_state(
    messages: Sequence[Message], seqs: Sequence[int], tokens: Sequence[int], policy: Policy, current_turn: int
) -> ExpectedState:
    """Run `prune` and derive the index rows an up-to-date store holds for its result."""
    result = prune(messages, policy=policy, current_turn=current_turn)
    states = []
    for message, seq, count in zip(messages, seqs, tokens, strict=True):
        state = new_state(message, count)
        state.seq = seq
        state.base = result.base[message.id]
        state.restored = result.verdicts[message.id] == "restored"
        states.append(state)

    keys: dict[str, KeyState] = {}
    support: Counter[str] = Counter()
    kept_refs: Counter[str] = Counter()
    for state in states:
        for key in state.defines:
            keys.setdefault(key, KeyState(key)).definer = state.seq
        counts = state.base == KEPT or (policy.transitive and state.restored)
        for key in state.refs:
            keys.setdefault(key, KeyState(key))
            support[key] += counts
            kept_refs[key] += state.base == KEPT
    for key, ks in keys.items():
        ks.support, ks.kept_refs = support[key], kept_refs[key]

    holders = {(s.content_hash, s.seq) for s in states if s.role in policy.dedupe_roles and s.base in (KEPT, DUPLICATE)}
    return ExpectedState(result, states, keys, holders)
