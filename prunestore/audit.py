"""The state a session's indexes must hold, derived from a batch rerun.

`verify` compares it with what is stored; `rebuild` writes it. Deriving it
from `prune` (and not from the incremental code) is what makes the check
independent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .incremental import KeyState, MsgState, new_state
from .model import DUPLICATE, KEPT, Policy, StoredMessage
from .prune import PruneResult, prune
from .results import Mismatch

__all__ = ["ExpectedState", "expected_state", "compare"]


@dataclass
class ExpectedState:
    result: PruneResult
    states: list[MsgState]  # one per message, seq and verdicts filled in
    keys: dict[str, KeyState]
    hash_holders: set[tuple[bytes, int]]


def expected_state(messages: Sequence[StoredMessage], policy: Policy) -> ExpectedState:
    """Run `prune` over a session's stored messages and derive the rows an up-to-date store holds."""
    current_turn = messages[-1].turn if messages else 0
    result = prune(messages, policy=policy, current_turn=current_turn)
    states = []
    for message in messages:
        state = new_state(message, message.tokens)
        state.seq = message.seq
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


def compare(
    session: str,
    turn_and_last_seq: tuple[int, int],
    stored: Sequence[StoredMessage],
    derived: Sequence[tuple[bytes, str, str]],
    key_rows: Iterable[tuple[str, int | None, int, int]],
    holder_rows: Iterable[tuple[bytes, int]],
    policy: Policy,
) -> list[Mismatch]:
    """Every difference between a session's stored rows and what a batch rerun derives.

    `derived` holds each message's stored content hash and effective keys
    (space-separated defines and refs); `key_rows` and `holder_rows` are the
    session's rows of the key and hash-holder indexes.
    """
    expected = expected_state(stored, policy)
    out: list[Mismatch] = []

    def differ(what: str, subject: str, have: object, want: object) -> None:
        if have != want:
            out.append(Mismatch(session, what, subject, have, want))

    differ(
        "session",
        "current turn and last seq",
        turn_and_last_seq,
        (expected.result.current_turn, stored[-1].seq if stored else 0),
    )
    for message, (content_hash, defines, refs), state in zip(stored, derived, expected.states, strict=True):
        differ("verdict", message.id, message.verdict, state.verdict)
        differ("base", message.id, message.base, state.base)
        differ("content_hash", message.id, content_hash, state.content_hash)
        differ("effective_keys", message.id, (defines, refs), (" ".join(state.defines), " ".join(state.refs)))
    have_keys = {key: (definer, support, kept) for key, definer, support, kept in key_rows}
    want_keys = {k: (ks.definer, ks.support, ks.kept_refs) for k, ks in expected.keys.items()}
    empty = (None, 0, 0)
    for key in sorted(set(have_keys) | set(want_keys)):
        differ("key", key, have_keys.get(key, empty), want_keys.get(key, empty))
    have_holders = {(bytes(h), seq) for h, seq in holder_rows}
    for h, seq in sorted(have_holders ^ expected.hash_holders):
        differ("hash_holder", f"{h.hex()[:12]}@{seq}", (h, seq) in have_holders, (h, seq) in expected.hash_holders)
    return out
