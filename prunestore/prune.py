"""The batch pruner: the definition of "live", written plainly.

`prune` is the oracle the incremental store is checked against, so each pass
below is a direct transcription of docs/semantics.md, with no cleverness.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, TypeVar

from .errors import DuplicateMessageError, InvalidMessageError, shorten
from .model import (
    DUPLICATE,
    EXPIRED,
    KEPT,
    RESTORED,
    SUPERSEDED,
    VERDICTS,
    Message,
    Policy,
    effective_defines,
    effective_refs,
)
from .text import count_tokens, normalize

P = TypeVar("P", bound="Passable")

__all__ = ["PruneResult", "passes", "prune"]


@dataclass(frozen=True)
class PruneResult:
    """What `prune` decided: the live messages and a verdict for every message.

    `base` holds each message's verdict before restoration (so a restored
    message's base says why it would have been dropped). Token totals are
    counted when first asked for: counting costs more than pruning.
    """

    messages: list[Message] = field(repr=False)
    live: list[Message]
    verdicts: dict[str, str]
    base: dict[str, str]
    current_turn: int
    counts: dict[str, int]
    tokenizer: Callable[[str], int] = field(default=count_tokens, repr=False, compare=False)

    @property
    def messages_before(self) -> int:
        return len(self.messages)

    @property
    def messages_after(self) -> int:
        return len(self.live)

    @cached_property
    def tokens_before(self) -> int:
        return sum(self.tokenizer(m.content) for m in self.messages)

    @cached_property
    def tokens_after(self) -> int:
        return sum(self.tokenizer(m.content) for m in self.live)

    @property
    def reduction(self) -> float:
        """Fraction of tokens pruned away (0.0 for an empty input)."""
        return 1 - self.tokens_after / self.tokens_before if self.tokens_before else 0.0


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

    base, restored = passes(
        ms, policy, current_turn, text=lambda m: normalize(m.content), defines=effective_defines, refs=effective_refs
    )
    kept = [b == KEPT for b in base]

    verdicts: dict[str, str] = {}
    bases: dict[str, str] = {}
    for i, m in enumerate(ms):
        bases[m.id] = base[i]
        verdicts[m.id] = RESTORED if i in restored else base[i]
    live = [m for i, m in enumerate(ms) if kept[i] or i in restored]
    counts = Counter(verdicts.values())
    return PruneResult(
        messages=ms,
        live=live,
        verdicts=verdicts,
        base=bases,
        current_turn=current_turn,
        counts={v: counts.get(v, 0) for v in VERDICTS},
        tokenizer=tokenizer,
    )


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
) -> tuple[list[str], set[int]]:
    """The three passes over one session in append order: each message's base verdict, and the positions restored.

    `text` gives what duplicates are compared by (the normalized content, or
    anything equal exactly when it is, such as its hash); `defines` and `refs`
    give a message's effective keys. Each is asked only where a pass needs it.
    """
    # Pass 1: superseded tool state. Only the last holder of a tool key survives.
    last_holder = {m.tool_key: i for i, m in enumerate(ms) if m.tool_key is not None}
    base: list[str | None] = [None] * len(ms)
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
