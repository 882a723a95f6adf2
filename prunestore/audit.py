"""The state a session's indexes must hold, derived from a batch rerun.

`verify` compares it with what is stored; `rebuild` writes it. Deriving it
from `prune` (and not from the incremental code) is what makes the check
independent. The first append to an empty session is decided the same way
(`engine.first.FirstAppend`).

Under a budget or `clear_at_least` the prompt is a fold over the messages,
and `prune` computes it plainly, in time quadratic in the session's length.
There the expected state is a replay of the session through the maintainer
in memory instead (linear; the tests check it against `prune`), which still
finds any stored row that differs from what the messages imply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .engine.first import index_rows
from .engine.maintainer import Maintainer
from .engine.prompt import PromptCounters
from .engine.state import KeyState, MsgState, NoRows, Totals, new_state
from .model import StoredMessage
from .policy import Policy
from .prune import prune
from .results import Mismatch
from .sql.calls import call_ids


@dataclass
class ExpectedState:
    current_turn: int
    states: list[MsgState]  # one per message, seq and verdicts filled in
    keys: dict[str, KeyState]
    hash_holders: set[tuple[bytes, int]]
    prompt: PromptCounters | None = None  # the session's prompt totals, under a budget or `clear_at_least`


def expected_state(messages: Sequence[StoredMessage], policy: Policy) -> ExpectedState:
    """Run `prune` over a session's stored messages and derive the rows an up-to-date store holds."""
    current_turn = messages[-1].turn if messages else 0
    if policy.gathers or any(m.summarizes for m in messages):  # a summary's gaps and place come from the fold
        return _replayed(messages, policy)
    result = prune(messages, policy=policy, current_turn=current_turn)
    states = []
    for message in messages:
        state = new_state(message, message.tokens)
        state.seq = message.seq
        state.base = result.base[message.id]
        state.restored = result.verdicts[message.id] == "restored"
        states.append(state)

    keys, holders = index_rows(states, policy)
    return ExpectedState(current_turn, states, keys, holders)


def _replayed(messages: Sequence[StoredMessage], policy: Policy) -> ExpectedState:
    """Append the messages one by one to an empty session in memory: the fold, in linear time."""
    maintainer = Maintainer(NoRows(), policy, 0, 0)
    for message in messages:
        maintainer.append(new_state(message, message.tokens))
    keys = {
        key: ks for key, ks in maintainer.key_states.items() if ks.definer is not None or ks.support or ks.kept_refs
    }
    added, _ = maintainer.hash_holder_changes()
    prompt = maintainer.prompt.counters if maintainer.prompt is not None else None
    return ExpectedState(maintainer.current_turn, maintainer.new, keys, set(added), prompt)


def compare(
    session: str,
    session_row: tuple[int | None, ...],
    stored: Sequence[StoredMessage],
    derived: Sequence[tuple[bytes, str, str, int, int | None]],
    key_rows: Iterable[tuple[str, int | None, int, int]],
    holder_rows: Iterable[tuple[bytes, int]],
    ref_rows: Iterable[tuple[str, int]],
    call_rows: Iterable[tuple[str, int]],
    cover_rows: Iterable[tuple[int, int]],
    policy: Policy,
    count: Callable[[StoredMessage], int] | None = None,
) -> list[Mismatch]:
    """Every difference between a session's stored rows and what a batch rerun derives.

    With `count` (the store's counter of a message), each message's tokens are counted again and compared too.

    `session_row` is the stored (current turn, last seq, prompt tokens,
    pending tokens, events, prompt cursor, tokens, live tokens, comebacks,
    late joins, summaries); comebacks and late joins are None where the session predates them
    and are then not compared. `derived` holds each message's
    stored content hash, effective keys (space-separated defines and refs),
    held flag and a summary's gaps; `key_rows` `holder_rows` `ref_rows` `call_rows` and `cover_rows`
    (covered seq, summary seq) are the session's rows of the key, hash-holder, referrer, call and cover
    indexes. The cursor is where the last eviction
    walk stopped, not a result: only that the prompt's messages below it are
    held is checked (see `engine.prompt.PromptKeeper`).
    """
    expected = expected_state(stored, policy)
    out: list[Mismatch] = []

    def differ(what: str, subject: str, have: object, want: object) -> None:
        if have != want:
            out.append(Mismatch(session, what, subject, have, want))

    differ(
        "session",
        "current turn and last seq",
        session_row[:2],
        (expected.current_turn, stored[-1].seq if stored else 0),
    )
    if expected.prompt is not None:
        differ("session", "prompt tokens, pending tokens, events", session_row[2:5], expected.prompt.values())
        if None not in session_row[8:10]:
            differ("session", "comebacks, late joins", session_row[8:10], expected.prompt.breaks())
    differ(
        "session",
        "tokens, live tokens",
        tuple(session_row[6:8]),
        tuple(Totals.of((s.tokens, s.verdict) for s in expected.states)),
    )
    differ("session", "summaries", session_row[10], sum(s.gaps is not None for s in expected.states))
    cursor = session_row[5]
    assert cursor is not None
    for message, (content_hash, defines, refs, held, gaps), state in zip(stored, derived, expected.states, strict=True):
        differ("verdict", message.id, message.verdict, state.verdict)
        if count is not None:
            differ("tokens", message.id, message.tokens, count(message))
        if message.seq < cursor and state.in_prompt:
            differ("held", message.id, bool(held), True)
        differ("base", message.id, message.base, state.base)
        differ("content_hash", message.id, content_hash, state.content_hash)
        differ("effective_keys", message.id, (defines, refs), (" ".join(state.defines), " ".join(state.refs)))
        differ("summary", message.id, (gaps, message.place), (state.gaps, state.place))
    have_keys = {key: tuple(values) for key, *values in key_rows}
    want_keys = {k: (ks.definer, ks.support, ks.kept_refs, ks.evicted_refs) for k, ks in expected.keys.items()}
    empty = (None, 0, 0, 0)
    for key in sorted(set(have_keys) | set(want_keys)):
        differ("key", key, have_keys.get(key, empty), want_keys.get(key, empty))
    have_holders = {(bytes(h), seq) for h, seq in holder_rows}
    for h, seq in sorted(have_holders ^ expected.hash_holders):
        differ("hash_holder", f"{h.hex()[:12]}@{seq}", (h, seq) in have_holders, (h, seq) in expected.hash_holders)
    have_refs = {(key, seq) for key, seq in ref_rows}
    want_refs = {(key, s.seq) for s in expected.states for key in s.refs}
    for key, seq in sorted(have_refs ^ want_refs):
        differ("ref", f"{key}@{seq}", (key, seq) in have_refs, (key, seq) in want_refs)
    have_calls = {(call, seq) for call, seq in call_rows}
    want_calls = {(call, m.seq) for m in stored for call in call_ids(m.metadata)}
    for call, seq in sorted(have_calls ^ want_calls):
        differ("call", f"{call}@{seq}", (call, seq) in have_calls, (call, seq) in want_calls)
    have_covers = {(seq, summary) for seq, summary in cover_rows}
    want_covers = {(seq, s.seq) for s in expected.states for seq in s.covered}
    for seq, summary in sorted(have_covers ^ want_covers):
        differ("cover", f"{seq}<{summary}", (seq, summary) in have_covers, (seq, summary) in want_covers)
    return out
