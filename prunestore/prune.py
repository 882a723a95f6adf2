"""The batch pruner: the definition of "live", written plainly.

`prune` is the oracle the incremental store is checked against, so each pass
below is a direct transcription of docs/semantics.md, with no cleverness.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, TypeVar

from .clock import past_ttl
from .errors import DuplicateMessageError, InvalidArgumentError, InvalidMessageError, shorten
from .model import (
    DUPLICATE,
    ERASED,
    EVICTED,
    EXPIRED,
    KEPT,
    LIVE_VERDICTS,
    PENDING,
    RESTORED,
    SUPERSEDED,
    UNNEEDED,
    VERDICTS,
    Message,
    effective_defines,
    effective_refs,
)
from .policy import Policy
from .text import count_tokens, normalize
from .tokens import message_tokens

P = TypeVar("P", bound="Passable")

__all__ = ["PruneResult", "Prompt", "fold_prompt", "passes", "prune"]


@dataclass(frozen=True)
class PruneResult:
    """What `prune` decided: the live messages and a verdict for every message.

    `base` holds each message's verdict before restoration (so a restored
    message's base says why it would have been dropped). Token totals are
    counted when first asked for: counting costs more than pruning.

    `live` is in the prompt's order: append order, but for each summary, which
    stands where its span began (docs/semantics.md, "Summaries").
    Under a budget or `clear_at_least`, `live` is the prompt: `events` counts
    the removal events, `pending_tokens` what waits for the next one, and
    `over_budget` says that what may not be evicted exceeds the budget.
    `comebacks` counts the steps (one per message) in which an evicted
    message came back, `late_joins` those in which a message other than the
    new one joined the prompt without coming back from eviction (a restored
    definer the passes had dropped, the next copy of a passage): each puts a
    message before the prompt's end, where the provider's cache breaks.
    """

    messages: list[Message] = field(repr=False)
    live: list[Message]
    verdicts: dict[str, str]
    base: dict[str, str]
    current_turn: int
    counts: dict[str, int]
    tokenizer: Callable[[str], int] = field(default=count_tokens, repr=False, compare=False)
    events: int = 0
    pending_tokens: int = 0
    over_budget: bool = False
    comebacks: int = 0
    late_joins: int = 0

    @property
    def messages_before(self) -> int:
        return len(self.messages)

    @property
    def messages_after(self) -> int:
        return len(self.live)

    @cached_property
    def tokens_before(self) -> int:
        return sum(message_tokens(self.tokenizer, m) for m in self.messages)

    @cached_property
    def tokens_after(self) -> int:
        return sum(message_tokens(self.tokenizer, m) for m in self.live)

    @property
    def reduction(self) -> float:
        """Fraction of tokens pruned away (0.0 for an empty input)."""
        return 1 - self.tokens_after / self.tokens_before if self.tokens_before else 0.0

    def unsummarized(self) -> list[list[Message]]:
        """The evicted messages that no summary stands for, in spans: what to summarize next.

        A span is a run of them in append order that no message in the prompt
        interrupts, so one summary of it stands in the gap it left. An evicted
        summary is in a span too: a summary of it is a summary of summaries
        (docs/semantics.md, "Summaries").
        """
        covered = {c for m in self.messages for c in m.summarizes}
        spans: list[list[Message]] = []
        run: list[Message] = []
        for m in self.messages:
            verdict = self.verdicts[m.id]
            if verdict == EVICTED and m.id not in covered:
                run.append(m)
            elif verdict in LIVE_VERDICTS and run:
                spans.append(run)
                run = []
        return spans + [run] if run else spans


def prune(
    messages: Iterable[Message],
    *,
    policy: Policy = Policy(),  # noqa: B008 (a frozen value: the documented default)
    current_turn: int | None = None,
    tokenizer: Callable[[str], int] = count_tokens,
) -> PruneResult:
    """Run the three passes over one session's messages, in append order."""
    ms = list(messages)
    ids = Counter(m.id for m in ms)
    repeated = [i for i, n in ids.items() if n > 1]
    if repeated:
        raise DuplicateMessageError(f"id={shorten(repeated[0])}: appears more than once")
    if current_turn is None:
        current_turn = max((m.turn for m in ms), default=0)
    elif isinstance(current_turn, bool) or not isinstance(current_turn, int):
        raise InvalidMessageError(f"current_turn={shorten(current_turn)}: must be an int")
    elif policy.gathers and ms and current_turn < max(m.turn for m in ms):
        last = max(ms, key=lambda m: m.turn)
        raise InvalidArgumentError(
            f"current_turn={current_turn}: below turn {last.turn} of message id={shorten(last.id)}; under a budget "
            "the prompt is folded message by message, so the current turn is at least the last message's"
        )

    covers = covered_positions(ms)
    base, restored = passes(
        ms,
        policy,
        current_turn,
        text=lambda m: normalize(m.content),
        defines=effective_defines,
        refs=effective_refs,
        summary=_is_summary,
    )

    prompt = Prompt()
    if policy.gathers:
        prompt = fold_prompt(ms, policy, current_turn, [message_tokens(tokenizer, m) for m in ms], covers)
        for i in prompt.needed:
            base[i] = KEPT
    kept = [b == KEPT for b in base]
    verdicts: dict[str, str] = {}
    bases: dict[str, str] = {}
    for i, m in enumerate(ms):
        bases[m.id] = base[i]
        verdicts[m.id] = RESTORED if i in restored else base[i]
    shown = [i for i in range(len(ms)) if kept[i] or i in restored]
    if policy.gathers:
        for i, m in enumerate(ms):
            if i in prompt.evicted:
                verdicts[m.id] = EVICTED
            elif i in prompt.shown and not (kept[i] or i in restored):
                verdicts[m.id] = PENDING
        shown = sorted(prompt.shown)
    live = [ms[i] for i in in_prompt_order(shown, covers)]
    counts = Counter(verdicts.values())
    return PruneResult(
        messages=ms,
        live=live,
        verdicts=verdicts,
        base=bases,
        current_turn=current_turn,
        counts={v: counts.get(v, 0) for v in VERDICTS},
        tokenizer=tokenizer,
        events=prompt.events,
        pending_tokens=prompt.pending_tokens,
        over_budget=prompt.over_budget,
        comebacks=prompt.comebacks,
        late_joins=prompt.late_joins,
    )


def covered_positions(ms: Sequence[Message]) -> dict[int, tuple[int, ...]]:
    """Each summary's position and the positions of the messages it stands for (docs/semantics.md, "Summaries").

    A summary names earlier messages of its session, none of them erased.
    """
    position: dict[str, int] = {}
    covers: dict[int, tuple[int, ...]] = {}
    for i, m in enumerate(ms):
        if m.summarizes:
            for covered in m.summarizes:
                j = position.get(covered)
                if j is None:
                    raise InvalidMessageError(
                        f"summarizes={shorten(covered)}: no earlier message of the session has this id "
                        f"(in the summary id={shorten(m.id)})"
                    )
                if ms[j].role == ERASED:
                    raise InvalidMessageError(
                        f"summarizes={shorten(covered)}: that message was erased, so there is nothing to summarize "
                        f"(in the summary id={shorten(m.id)})"
                    )
            covers[i] = tuple(sorted(position[c] for c in m.summarizes))
        position[m.id] = i
    return covers


def in_prompt_order(positions: Iterable[int], covers: Mapping[int, Sequence[int]]) -> list[int]:
    """Positions in the order the prompt shows them: each summary where its span began, before the
    first message it stands for (or that message's own place, for a summary of summaries)."""
    place: dict[int, int] = {}

    def where(i: int) -> int:
        if i not in place:
            place[i] = min(where(c) for c in covers[i]) if i in covers else i
        return place[i]

    return sorted(positions, key=lambda i: (where(i), i not in covers, i))


class Passable(Protocol):
    """What the passes read of a message directly (`Message` and the store's `MsgState` both have it)."""

    @property
    def role(self) -> str: ...

    @property
    def tool_key(self) -> str | None: ...

    @property
    def expires_after_turn(self) -> int | None: ...


def passes(
    ms: Sequence[P],
    policy: Policy,
    current_turn: int,
    *,
    text: Callable[[P], Hashable],
    defines: Callable[[P], Collection[str]],
    refs: Callable[[P], Collection[str]],
    summary: Callable[[P], bool] = lambda m: False,
) -> tuple[list[str], set[int]]:
    """The three passes over one session in append order: each message's base verdict, and the positions restored.

    `text` gives what duplicates are compared by (the normalized content, or
    anything equal exactly when it is, such as its hash); `defines` and `refs`
    give a message's effective keys. Each is asked only where a pass needs it.
    A `summary` is unneeded to the passes: only the budget's evictions bring it in (`fold_prompt`).
    """
    # Pass 1: superseded tool state. Only the last holder of a tool key survives.
    # An erased message (which holds no tool key, keys or content) is never in the prompt, nor is a summary
    # (which holds none either) until the budget evicts what it stands for.
    last_holder = {m.tool_key: i for i, m in enumerate(ms) if m.tool_key is not None}
    base: list[str | None] = [ERASED if m.role == ERASED else UNNEEDED if summary(m) else None for m in ms]
    for i, m in enumerate(ms):
        if m.tool_key is not None and last_holder[m.tool_key] != i:
            base[i] = SUPERSEDED

    # Pass 1b: expiry, for what was not superseded.
    for i, m in enumerate(ms):
        if base[i] is None and m.expires_after_turn is not None and current_turn > m.expires_after_turn:
            base[i] = EXPIRED

    # Pass 2: duplicates, among the survivors of the first pass.
    seen: set[Hashable] = set()
    for i, m in enumerate(ms):
        if base[i] is None and m.role in policy.dedupe_roles:
            key = text(m)
            if key in seen:
                base[i] = DUPLICATE
            else:
                seen.add(key)
    kept = [b is None for b in base]

    # Pass 3: restore the definers that live messages still depend on.
    definer: dict[str, int] = {}
    for i, m in enumerate(ms):
        for key in defines(m):
            definer[key] = i
    restored: set[int] = set()
    pending = [key for i, m in enumerate(ms) if kept[i] for key in refs(m)]
    while pending:
        d = definer.get(pending.pop())
        if d is None or kept[d] or d in restored:
            continue
        restored.add(d)
        if policy.transitive:
            pending.extend(refs(ms[d]))
    return [b or KEPT for b in base], restored


def _is_summary(m: Message) -> bool:
    return bool(m.summarizes)


@dataclass
class Prompt:
    """The fold's state: positions in the prompt, positions evicted, the summaries needed, events so far."""

    shown: set[int] = field(default_factory=set)
    evicted: set[int] = field(default_factory=set)
    needed: set[int] = field(default_factory=set)  # summaries standing for an evicted message
    events: int = 0
    pending_tokens: int = 0
    over_budget: bool = False
    comebacks: int = 0
    late_joins: int = 0


def fold_prompt(
    ms: Sequence[Message],
    policy: Policy,
    current_turn: int,
    tokens: Sequence[int],
    covers: Mapping[int, Sequence[int]] | None = None,
) -> Prompt:
    """The prompt under a budget or `clear_at_least`: a fold over the messages in append order.

    After each message (and once more at `current_turn` when it is later than
    the last message's turn), the passes are run over the messages so far,
    and the prompt moves as docs/semantics.md says. Quadratic, and plainly so.
    `covers` is `covered_positions(ms)`.
    """
    keys = _Keys(
        text=[normalize(m.content) for m in ms],
        defines=[effective_defines(m) for m in ms],
        refs=[effective_refs(m) for m in ms],
        covers=covered_positions(ms) if covers is None else covers,
    )
    prompt = Prompt()
    steps = [(i + 1, m.turn) for i, m in enumerate(ms)]
    if not ms or current_turn > ms[-1].turn:
        steps.append((len(ms), current_turn))
    for step, (count, turn) in enumerate(steps):
        new = count - 1 if step < len(ms) else None  # the step's new message (none in the last, later turn)
        _step(prompt, ms[:count], policy, turn, tokens, keys, new, new is not None and _idle(ms, new, policy))
    return prompt


def _idle(ms: Sequence[Message], i: int, policy: Policy) -> bool:
    """Whether message `i` comes more than `cache_ttl` seconds after the one before it (both times known)."""
    return i > 0 and past_ttl(ms[i - 1].at, ms[i].at, policy.cache_ttl)


@dataclass(frozen=True)
class _Keys:
    """What the passes read of each message, by position, worked out once."""

    text: list[str]
    defines: list[frozenset[str]]
    refs: list[frozenset[str]]
    covers: Mapping[int, Sequence[int]]


def _step(
    prompt: Prompt,
    ms: Sequence[Message],
    policy: Policy,
    turn: int,
    tokens: Sequence[int],
    keys: _Keys,
    new: int | None,
    idle: bool,
) -> None:
    position = {id(m): i for i, m in enumerate(ms)}
    base, restored = passes(
        ms,
        policy,
        turn,
        text=lambda m: keys.text[position[id(m)]],
        defines=lambda m: keys.defines[position[id(m)]],
        refs=lambda m: keys.refs[position[id(m)]],
        summary=_is_summary,
    )
    live = {i for i in range(len(ms)) if base[i] == KEPT or i in restored}
    summaries = sorted(i for i in keys.covers if i < len(ms))
    definer = {key: i for i in range(len(ms)) for key in keys.defines[i]}

    def counts(i: int) -> bool:  # its refs support their definers (pass 3)
        return i in live and (policy.transitive or base[i] == KEPT)

    def needed() -> set[int]:  # definers a counting message in the prompt refers to, other than itself
        return {definer[k] for j in prompt.shown if counts(j) for k in keys.refs[j] if definer.get(k, j) != j}

    def total(positions: Iterable[int]) -> int:
        return sum(tokens[i] for i in positions)

    def summon() -> set[int]:
        """Summaries that stand for an evicted message are live, and join at once; the rest are not."""
        joined = set()
        for s in summaries:  # in append order: a summary of summaries reads what the earlier ones are now
            if any(c in prompt.evicted for c in keys.covers[s]):
                live.add(s)
                if s not in prompt.shown and s not in prompt.evicted:
                    prompt.shown.add(s)
                    joined.add(s)
            else:
                live.discard(s)
                prompt.evicted.discard(s)
        prompt.needed = {s for s in summaries if s in live}
        return joined

    # Dropped by the passes: no longer evicted. Live and not evicted: in the prompt at once.
    prompt.evicted &= live | set(summaries)
    joining = live - prompt.evicted - prompt.shown - {new}
    prompt.shown |= live - prompt.evicted
    # Definers that a counting message in the prompt refers to come back at once, to a fixed point.
    back = needed() & prompt.evicted
    prompt.comebacks += bool(back)
    while back:
        prompt.evicted -= back
        prompt.shown |= back
        back = needed() & prompt.evicted
    joining |= summon() - {new}
    prompt.late_joins += bool(joining)

    pending = prompt.shown - live
    over = policy.budget is not None and total(prompt.shown) > policy.budget
    target = None if policy.budget is None else policy.budget - policy.clear_at_least
    trim = idle and target is not None and total(prompt.shown) > target  # the cache is cold: an event is free
    if over or trim or 0 < total(pending) >= (1 if idle else policy.clear_at_least):
        prompt.events += 1
        prompt.shown -= pending
        if over or trim:
            assert target is not None
            while total(prompt.shown) > target:
                keep = needed()
                evictable = [
                    i
                    for i in sorted(prompt.shown)
                    if ms[i].role not in policy.pinned_roles and ms[i].turn < turn and i not in keep
                ]
                if not evictable:
                    break
                if policy.evict == "definers_last":
                    plain = [i for i in evictable if not any(definer[k] == i for k in keys.defines[i])]
                    evictable = plain or evictable
                prompt.shown.discard(evictable[0])
                prompt.evicted.add(evictable[0])
                summon()  # what it stands for is out: its summary joins, and its tokens count
    prompt.pending_tokens = total(prompt.shown - live)
    prompt.over_budget = policy.budget is not None and total(prompt.shown) > policy.budget
