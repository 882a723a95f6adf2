"""What a conversation's prompts cost when the provider caches prompt prefixes.

Price per input token: read from the cache 0.1, written to it 1.25, fresh
(no cache) 1.0. A turn's cached part is the longest common prefix of its
prompt with the previous turn's prompt; the rest is written to the cache,
since the prompt is cached up to its end every turn. A prompt is a list of
(key, tokens) per message: two prompts share a prefix up to the first
message whose key differs, so a key must change when a message's content
does (a cleared tool result, say).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

__all__ = ["READ", "WRITE", "FRESH", "PromptCosts", "prompt_costs"]

READ, WRITE, FRESH = 0.1, 1.25, 1.0


@dataclass(frozen=True)
class PromptCosts:
    """Summed over the turns: the cost with the cache, without it, and the prompt's size."""

    turns: int
    cost: float
    uncached: float
    peak: int
    mean: float
    breaks: int  # turns whose prompt does not begin with the whole previous prompt


def _common_prefix(a: list, b: list) -> int:
    """Length of the longest common prefix of two lists (list comparison runs in C)."""
    if b[: len(a)] == a:
        return len(a)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prompt_costs(prompts: Iterable[Sequence[tuple[Hashable, int]]]) -> PromptCosts:
    """The costs of sending each prompt in turn."""
    turns = breaks = peak = 0
    cost = uncached = total = 0.0
    previous: list[Hashable] = []
    for prompt in prompts:
        keys = [key for key, _ in prompt]
        sizes = [tokens for _, tokens in prompt]
        size = sum(sizes)
        shared = _common_prefix(previous, keys)
        breaks += shared < len(previous)
        cached = sum(sizes[:shared])
        cost += READ * cached + WRITE * (size - cached)
        uncached += FRESH * size
        total += size
        peak = max(peak, size)
        turns += 1
        previous = keys
    return PromptCosts(turns, cost, uncached, peak, total / turns if turns else 0.0, breaks)
