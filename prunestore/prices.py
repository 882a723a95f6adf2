"""What a conversation's prompts cost when the provider caches prompt prefixes (docs/cost.md).

A price is per input token, relative to a fresh (uncached) token: `read`
for a token read from the cache, `write` for one written to it. A turn's
cached part is the longest common prefix of its prompt with the previous
turn's prompt; the rest is written to the cache, since the prompt is cached
up to its end every turn. A prompt is a list of (key, tokens) per message:
two prompts share a prefix up to the first message whose key differs.
The provider keeps a cached prompt for `Prices.ttl` seconds unused: a prompt
sent later than that after the previous one reads nothing from the cache.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from .clock import past_ttl
from .errors import InvalidArgumentError, shorten

__all__ = ["Prices", "PRICES", "PromptCosts", "prompt_costs", "chosen_prices", "LedgerTotals"]


@dataclass(frozen=True)
class Prices:
    """Per input token, relative to a fresh one: read from the cache, written to it, and fresh (no cache at all).

    `ttl` is how many seconds the provider keeps a cached prompt unused (None: for ever). The defaults are
    Anthropic's 5-minute cache.
    """

    read: float = 0.1
    write: float = 1.25
    fresh: float = 1.0
    ttl: int | None = 300

    def __post_init__(self) -> None:
        for name in ("read", "write", "fresh"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidArgumentError(f"{name}={shorten(value)}: must be a price of at least 0")
        ttl = self.ttl
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1):
            raise InvalidArgumentError(f"ttl={shorten(ttl)}: must be None or a whole number of seconds, at least 1")

    def expired(self, before: datetime | None, at: datetime | None) -> bool:
        """Whether a prompt sent at `at` finds the one sent at `before` gone from the cache (False where unknown)."""
        return past_ttl(before, at, self.ttl)


PRICES = {
    # Anthropic: a cache write costs 1.25 (5-minute cache) or 2 (1-hour cache) input tokens, a read 0.1.
    "anthropic-5m": Prices(),
    "anthropic-1h": Prices(read=0.1, write=2.0, ttl=3600),
    # OpenAI: no write premium; the GPT-5 family reads cached input at a tenth (older models at 0.25 or 0.5).
    # A cached prefix lasts 5 to 10 minutes unused (longer off-peak, a day with extended retention): 5 here.
    "openai": Prices(read=0.1, write=1.0, ttl=300),
}


def chosen_prices(prices: Prices | str | None) -> Prices:
    """A `Prices`, a preset's name, or None (Anthropic's 5-minute cache, the default)."""
    if prices is None:
        return PRICES["anthropic-5m"]
    if isinstance(prices, Prices):
        return prices
    if isinstance(prices, str) and prices in PRICES:
        return PRICES[prices]
    raise InvalidArgumentError(f"prices={shorten(prices)}: must be a Prices or one of {', '.join(PRICES)}")


@dataclass(frozen=True)
class PromptCosts:
    """Summed over the turns: the cost with the cache, without it, and the prompt's size."""

    turns: int
    cost: float
    uncached: float
    peak: int
    mean: float
    breaks: int  # turns whose prompt does not begin with the whole previous prompt
    expired: int = 0  # turns that found the previous prompt gone from the cache (`Prices.ttl`)


def common_prefix(a: list, b: list) -> int:
    """Length of the longest common prefix of two lists (list comparison runs in C, identity first)."""
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


def prompt_costs(
    prompts: Iterable[Sequence[tuple[Hashable, int]]],
    prices: Prices | None = None,
    times: Iterable[datetime | None] | None = None,
) -> PromptCosts:
    """The costs of sending each prompt in turn; `times`, when given, says when each is sent (None: unknown)."""
    chosen = chosen_prices(prices)
    read, write, fresh = chosen.read, chosen.write, chosen.fresh
    turns = breaks = peak = expired = 0
    cost = uncached = total = 0.0
    previous: list[Hashable] = []
    sent_before: datetime | None = None
    sent_times: Iterable[datetime | None] = itertools.repeat(None) if times is None else times
    for prompt, sent in zip(prompts, sent_times, strict=False):
        keys = [key for key, _ in prompt]
        sizes = [tokens for _, tokens in prompt]
        size = sum(sizes)
        shared = common_prefix(previous, keys)
        breaks += shared < len(previous)
        if previous and chosen.expired(sent_before, sent):
            shared, expired = 0, expired + 1
        sent_before = sent
        cached = sum(sizes[:shared])
        cost += read * cached + write * (size - cached)
        uncached += fresh * size
        total += size
        peak = max(peak, size)
        turns += 1
        previous = keys
    return PromptCosts(turns, cost, uncached, peak, total / turns if turns else 0.0, breaks, expired)


@dataclass(frozen=True)
class LedgerTotals:
    """Summed over a session's turns: tokens read from the cache and written to it, pruned and sending everything.

    `breaks` counts the turns whose prompt does not begin with the whole previous prompt, `expired` those that
    came longer than the prices' `ttl` after the one before.
    """

    turns: int = 0
    read: int = 0
    written: int = 0
    everything_read: int = 0
    everything_written: int = 0
    breaks: int = 0
    expired: int = 0

    def cost(self, prices: Prices) -> float:
        return prices.read * self.read + prices.write * self.written

    def cost_everything(self, prices: Prices) -> float:
        return prices.read * self.everything_read + prices.write * self.everything_written
