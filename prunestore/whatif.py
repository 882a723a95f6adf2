"""What a stored session would have cost under a policy: a replay in memory, priced turn by turn.

The session's messages are appended again, one by one, to an empty session
in memory (the maintainer over `NoRows`, as `verify` replays a budget), and
the prompt after each turn's last message is priced as docs/cost.md says:
the part it shares with the previous turn's prompt is read from the cache,
the rest written to it, and all of it written where the turn comes longer
than the prices' `ttl` after the one before (a turn is sent at the time of
its last message, `Message.at`). Each message counts the tokens stored with it.
Nothing is written. The replay reads the messages' derived columns, not
their contents, and follows the prompt through the messages each step
moves (`Maintainer.watch`), so a session costs what its messages do.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby

from .engine.maintainer import Maintainer
from .engine.state import NoRows
from .model import Policy, from_micros
from .prices import Prices
from .sql.driver import Driver
from .sql.rows import STATES_IN_ORDER, SessionRow, msg_state

__all__ = ["WhatIf", "what_if"]

SAMPLE = 10  # ids of changed verdicts given


@dataclass(frozen=True)
class WhatIf:
    """One session replayed under a policy: its prompts' cost, against sending everything, and what would change.

    `turns` prompts are priced, one after each turn's last message. `breaks`
    counts the turns whose prompt does not begin with the whole previous
    prompt; `events`, `comebacks` and `late_joins` are what `stats()` would
    say under the policy. `expired` counts the turns that came longer than
    `prices.ttl` after the one before, whose whole prompt is written to the
    cache again (and so is sending everything's). `changed` counts the messages whose verdict would
    differ from the stored one, `changed_ids` gives the first of them.
    """

    session: str
    policy: Policy
    prices: Prices
    messages: int
    turns: int
    cost: float
    cost_everything: float
    peak: int
    mean: float
    breaks: int
    events: int
    comebacks: int
    late_joins: int
    expired: int
    changed: int
    changed_ids: tuple[str, ...]

    @property
    def saving(self) -> float:
        """How many times less than sending everything the prompts cost (1.0 for an empty session)."""
        return self.cost_everything / self.cost if self.cost else 1.0


def what_if(driver: Driver, name: str, row: SessionRow, policy: Policy, prices: Prices) -> WhatIf:
    """Replay the session `row` (named `name`) under `policy` and price its prompts with `prices`."""
    states = [msg_state(r) for r in driver.all(STATES_IN_ORDER, {"sid": row.session_id})]
    stored = [s.verdict for s in states]
    for state in states:  # appended afresh: the stored verdicts are not an input
        state.visible, state.evicted = None, False
    maintainer = Maintainer(NoRows(), policy, 0, 0)
    moved = maintainer.watch()
    seqs: list[int] = []  # the prompt, in order
    sizes: list[int] = []  # the tokens of each, aligned with seqs
    size = everything = 0
    cost = cost_everything = mean = 0.0
    peak = turns = breaks = expired = 0
    sent_before: datetime | None = None
    for _, turn in groupby(states, key=lambda s: s.turn):
        before, last_before, written, had_prompt = size, (seqs[-1] if seqs else 0), 0, bool(seqs)
        for state in turn:
            maintainer.append(state)
            moved.add(state)
            written += state.tokens
        sent = None if state.at is None else from_micros(state.at)  # a turn is sent after its last message
        cold = turns > 0 and prices.expired(sent_before, sent)
        sent_before = sent
        everything += written
        first_change = None  # the lowest seq that joined or left the prompt
        for state in moved:
            i = bisect_left(seqs, state.seq)
            shown = i < len(seqs) and seqs[i] == state.seq
            if shown == state.in_prompt:
                continue
            if state.in_prompt:
                seqs.insert(i, state.seq)
                sizes.insert(i, state.tokens)
                size += state.tokens
            else:
                del seqs[i], sizes[i]
                size -= state.tokens
            first_change = state.seq if first_change is None else min(first_change, state.seq)
        moved.clear()
        # The previous prompt is read from the cache up to the first message that joined or left before its end.
        cached = before
        if first_change is not None and first_change <= last_before:
            cached = sum(sizes[: bisect_left(seqs, first_change)])
            breaks += 1
        if cold and had_prompt:  # the cache expired: the whole prompt is written again
            cached, expired = 0, expired + 1
        cost += prices.read * cached + prices.write * (size - cached)
        cached_everything = 0 if cold else everything - written
        cost_everything += prices.read * cached_everything + prices.write * (everything - cached_everything)
        peak = max(peak, size)
        mean += size
        turns += 1
    counters = maintainer.prompt.counters if maintainer.prompt is not None else None
    changed = [s.id for s, verdict in zip(maintainer.new, stored, strict=True) if s.verdict != verdict]
    return WhatIf(
        session=name,
        policy=policy,
        prices=prices,
        messages=len(states),
        turns=turns,
        cost=cost,
        cost_everything=cost_everything,
        peak=peak,
        mean=mean / turns if turns else 0.0,
        breaks=breaks,
        events=counters.events if counters else 0,
        comebacks=(counters.comebacks or 0) if counters else 0,
        late_joins=(counters.late_joins or 0) if counters else 0,
        expired=expired,
        changed=len(changed),
        changed_ids=tuple(changed[:SAMPLE]),
    )
