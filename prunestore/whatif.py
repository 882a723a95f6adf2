"""What a stored session would have cost under a policy: a replay in memory, priced turn by turn.

The session's messages are appended again, one by one, to an empty session
in memory (the maintainer over `NoRows`, as `verify` replays a budget), and
the prompt after each turn's last message is priced by the fold a store's
ledger keeps (`prunestore.ledger`). Each message counts the tokens stored with it.
Nothing is written. The replay reads the messages' derived columns, not
their contents, and follows the prompt through the messages each step
moves (`Maintainer.watch`), so a session costs what its messages do.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import groupby

from .engine.ledger import Ledger
from .engine.maintainer import Maintainer
from .engine.state import MsgState, NoRows
from .policy import Policy
from .prices import Prices
from .sql.driver import Driver
from .sql.rows import STATES_IN_ORDER, replayed_state
from .sql.session_row import SessionRow

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


def replay(states: list[MsgState], policy: Policy, prices: Prices) -> tuple[Maintainer, Ledger, int, int]:
    """Append the states afresh to an empty session in memory under `policy`, pricing each turn with `prices`.

    Returns the maintainer after the last, the ledger, and the peak and summed prompt tokens over the turns.
    """
    for state in states:  # appended afresh: the stored verdicts are not an input
        state.visible, state.evicted = None, False
    maintainer = Maintainer(NoRows(), policy, 0, 0)
    moved = maintainer.watch()
    ledger = Ledger(prices_ttl=prices.ttl)
    seqs: list[int] = []  # the prompt, in order
    sizes: list[int] = []  # the tokens of each, aligned with seqs

    def below(seq: int) -> tuple[int, int]:
        i = bisect_left(seqs, seq)
        return i, sum(sizes[:i])

    peak = summed = 0
    for number, turn in groupby(states, key=lambda s: s.turn):
        ledger.start(number)
        written = 0
        for last in turn:
            maintainer.append(last)
            moved.add(last)
            written += last.tokens
        changes = []
        for state in moved:
            i = bisect_left(seqs, state.seq)
            if (i < len(seqs) and seqs[i] == state.seq) == state.in_prompt:
                continue
            if state.in_prompt:
                seqs.insert(i, state.seq)
                sizes.insert(i, state.tokens)
            else:
                del seqs[i], sizes[i]
            changes.append((state.seq, state.tokens, state.in_prompt))
        moved.clear()
        ledger.step(changes, written, last.seq, last.at, below)  # a turn is sent after its last message
        peak = max(peak, ledger.tokens)
        summed += ledger.tokens
    return maintainer, ledger, peak, summed


def stored_states(driver: Driver, row: SessionRow) -> list[MsgState]:
    return [replayed_state(r) for r in driver.all(STATES_IN_ORDER, {"sid": row.session_id})]


def stored_ledger(driver: Driver, row: SessionRow, policy: Policy) -> Ledger:
    """The locked session's ledger under `policy` (which names prices): as stored, or replayed where there is none."""
    assert policy.prices is not None
    if row.ledger is not None:
        return Ledger.from_json(row.ledger, policy.prices)
    if not row.last_seq:
        return Ledger(prices_ttl=policy.prices.ttl)
    replayed = replayed_ledger(driver, row, policy)
    assert replayed is not None
    return replayed


def replayed_ledger(driver: Driver, row: SessionRow, policy: Policy) -> Ledger | None:
    """The session's ledger replayed from its stored messages under `policy` (None where it names no prices)."""
    if policy.prices is None:
        return None
    return replay(stored_states(driver, row), policy, policy.prices)[1]


def what_if(driver: Driver, name: str, row: SessionRow, policy: Policy, prices: Prices) -> WhatIf:
    """Replay the session `row` (named `name`) under `policy` and price its prompts with `prices`."""
    states = stored_states(driver, row)
    stored = [s.verdict for s in states]
    maintainer, ledger, peak, summed = replay(states, policy, prices)
    totals = ledger.totals()
    counters = maintainer.prompt.counters if maintainer.prompt is not None else None
    changed = [s.id for s, verdict in zip(maintainer.new, stored, strict=True) if s.verdict != verdict]
    return WhatIf(
        session=name,
        policy=policy,
        prices=prices,
        messages=len(states),
        turns=totals.turns,
        cost=totals.cost(prices),
        cost_everything=totals.cost_everything(prices),
        peak=peak,
        mean=summed / totals.turns if totals.turns else 0.0,
        breaks=totals.breaks,
        events=counters.events if counters else 0,
        comebacks=(counters.comebacks or 0) if counters else 0,
        late_joins=(counters.late_joins or 0) if counters else 0,
        expired=totals.expired,
        changed=len(changed),
        changed_ids=tuple(changed[:SAMPLE]),
    )
