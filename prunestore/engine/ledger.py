"""A session's ledger: what its prompts cost so far, priced turn by turn as docs/cost.md says.

One prompt is priced per turn, after the turn's last message. The part it
shares with the previous turn's prompt is read from the cache and the rest
written to it; a turn sent longer than the prices' `ttl` after the previous
one writes its whole prompt. *Everything* prices the same turns sending the
whole history. The fold keeps the previous turn's prompt as counts (its
tokens, its messages, the session's tokens then) and, for the open turn,
the messages up to the previous turn's end whose place in the prompt
differs from it. So a turn that moves nothing before the prompt's end is
priced from counts alone; one that does asks its caller for the tokens of
the prompt below the first such message (`Below`). The open turn is priced
as it stands after every step, so the totals always include it.

The same fold prices a store's appends and `what_if`'s replays, so the two
agree by construction; `verify` replays it against the stored ledger.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..clock import past_ttl
from ..prices import LedgerTotals, Prices
from .maintainer import Maintainer
from .state import MsgState

# (messages, tokens) of the prompt now, below a seq.
Below = Callable[[int], tuple[int, int]]
# A message whose place in the prompt changed since the last step: (seq, tokens, in the prompt now).
Change = tuple[int, int, bool]


@dataclass
class Ledger:
    """The fold's state, stored as JSON on the session row (`to_json`)."""

    closed: list[int] = field(default_factory=lambda: [0] * 7)  # `LedgerTotals` of the closed turns
    # The previous turn's prompt, as the turn closed: its tokens and messages, the session's tokens and last
    # seq then, and when it was sent (microseconds, None where unknown).
    base_tokens: int = 0
    base_count: int = 0
    base_total: int = 0
    base_seq: int = 0
    base_at: int | None = None
    # The open turn: its number (None before the first), the prompt's tokens and messages, the session's
    # tokens, the time of its last message, and the messages up to `base_seq` in or out of the prompt unlike
    # in the previous turn's (seq: in it now).
    turn: int | None = None
    tokens: int = 0
    count: int = 0
    total: int = 0
    at: int | None = None
    moved: dict[int, bool] = field(default_factory=dict)
    last_seq: int = 0  # the session's last seq at the latest step
    cached: int = 0  # the open turn's tokens shared with the previous prompt
    broke: bool = False
    cold: bool = False  # the open turn came longer than the prices' ttl after the previous one
    prices_ttl: int | None = None  # the prices' `ttl`, given when the ledger is made or read; not stored

    # -- the fold ------------------------------------------------------------

    def start(self, turn: int) -> None:
        """A message of `turn` comes next: a later turn closes the open one, its prompt the next one's base."""
        if self.turn is not None and turn != self.turn:
            self.closed = [a + b for a, b in zip(self.closed, self._open(), strict=True)]
            self.base_tokens, self.base_count, self.base_total = self.tokens, self.count, self.total
            self.base_seq, self.base_at = self.last_seq, self.at
            self.moved.clear()
            self.cached, self.broke = self.tokens, False
        self.turn = turn

    def step(self, changes: Iterable[Change], new_tokens: int, last_seq: int, at: int | None, below: Below) -> None:
        """Take the changes since the last step (and the tokens of the messages appended since), and price the
        open turn as it stands; `at` is the time of the latest message."""
        for seq, tokens, now in changes:
            self.tokens += tokens if now else -tokens
            self.count += 1 if now else -1
            if seq <= self.base_seq:  # a message the previous prompt could hold
                if seq in self.moved:
                    del self.moved[seq]  # back as it was
                else:
                    self.moved[seq] = now
        self.total += new_tokens
        self.last_seq, self.at = last_seq, at
        self.cold = self.closed[0] > 0 and past_ttl(self.base_at, self.at, self.prices_ttl)
        if not self.moved:
            self.cached, self.broke = self.base_tokens, False
            return
        first = min(self.moved)
        count, tokens = below(first)  # below the first change, the prompt is the previous one's
        self.cached = tokens
        self.broke = not self.moved[first] or count < self.base_count

    # -- the figures ---------------------------------------------------------

    def _open(self) -> list[int]:
        """The open turn's `LedgerTotals` fields, as it stands (nothing before the first turn)."""
        if self.turn is None:
            return [0] * 7
        cold = self.cold
        cached = 0 if cold and self.base_count else self.cached
        everything_cached = 0 if cold else self.base_total
        return [
            1,
            cached,
            self.tokens - cached,
            everything_cached,
            self.total - everything_cached,
            int(self.broke),
            int(cold and self.base_count > 0),
        ]

    def totals(self) -> LedgerTotals:
        return LedgerTotals(*(a + b for a, b in zip(self.closed, self._open(), strict=True)))

    def spent(self, prices: Prices) -> tuple[float, float]:
        """The cost so far and the cost of sending everything, as a session's history records them."""
        totals = self.totals()
        return totals.cost(prices), totals.cost_everything(prices)

    # -- storage -------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps(
            [
                self.closed,
                [self.base_tokens, self.base_count, self.base_total, self.base_seq, self.base_at],
                [self.turn, self.tokens, self.count, self.total, self.at, self.last_seq, self.cached]
                + [int(self.broke), int(self.cold)],
                sorted([seq, int(now)] for seq, now in self.moved.items()),
            ],
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str, prices: Prices | None = None) -> Ledger:
        """The stored ledger; `prices` (whose `ttl` a step needs) may be left out to read its totals."""
        closed, base, open_turn, moved = json.loads(text)
        ledger = cls(closed, prices_ttl=None if prices is None else prices.ttl)
        ledger.base_tokens, ledger.base_count, ledger.base_total, ledger.base_seq, ledger.base_at = base
        turn, ledger.tokens, ledger.count, ledger.total, ledger.at, ledger.last_seq, ledger.cached = open_turn[:7]
        ledger.turn = turn
        ledger.broke, ledger.cold = bool(open_turn[7]), bool(open_turn[8])
        ledger.moved = {seq: bool(now) for seq, now in moved}
        return ledger


class Pricing:
    """Keeps a session's ledger through one append: a step at each turn's end and after the append's last message.

    The prompt below a seq is counted from the stored rows (as they were when the append began) and the
    messages this append changed, from the shorter side of the session.
    """

    def __init__(self, maintainer: Maintainer, ledger: Ledger) -> None:
        self.maintainer = maintainer
        self.ledger = ledger
        self.moved = maintainer.watch()
        self.shown: dict[int, bool] = {}  # in the prompt at the last step, for the messages moved since it began
        self.new_tokens = 0
        self.last: MsgState | None = None

    def append(self, state: MsgState) -> None:
        """Append one message through the maintainer, stepping the ledger first if it opens a new turn."""
        if self.last is not None and state.turn != self.ledger.turn:
            self.step()
        self.ledger.start(state.turn)
        self.maintainer.append(state)
        self.moved.add(state)
        self.new_tokens += state.tokens
        self.last = state

    def step(self) -> None:
        assert self.last is not None
        changes = []
        for state in self.moved:
            now = state.in_prompt
            if self.shown.get(state.seq, state.was_in_prompt) != now:
                changes.append((state.seq, state.tokens, now))
            self.shown[state.seq] = now
        self.moved.clear()
        self.ledger.step(changes, self.new_tokens, self.last.seq, self.last.at, self._below)
        self.new_tokens = 0

    def _below(self, seq: int) -> tuple[int, int]:
        last = self.maintainer.last_seq
        lo, hi = (0, seq) if 2 * seq <= last else (seq, last + 1)
        count, tokens = self.maintainer.rows.in_prompt_between(lo, hi)
        for state in self.maintainer.msgs.values():  # what this append changed, or added
            if lo <= state.seq < hi and state.in_prompt != state.was_in_prompt:
                sign = 1 if state.in_prompt else -1
                count, tokens = count + sign, tokens + sign * state.tokens
        if lo == 0:
            return count, tokens
        return self.ledger.count - count, self.ledger.tokens - tokens
