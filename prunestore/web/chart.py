"""The charts of a session's prompt: tokens per turn before and after pruning, and its cost so far, as SVG
coordinates.

Pure geometry over `HistoryPoint`s, no I/O: the page's template draws what
this computes. A turn's point is the last append that ended in it, so a
turn stored inside a larger append (an import) has no point of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import groupby

from ..results import HistoryPoint

WIDTH, HEIGHT = 960, 360
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 16, 40
# Beyond this many turns several fall on one pixel: each column keeps only the points that shape it.
MOST_POINTS = 5000


@dataclass(frozen=True)
class Tick:
    at: float  # pixels along the axis
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    turns: tuple[HistoryPoint, ...]  # one per turn, in order (thinned beyond `MOST_POINTS` turns)
    turn_count: int
    before: str  # SVG polyline points, one per turn: every token stored
    after: str  # the same, of the tokens in the prompt
    after_xy: tuple[tuple[float, float], ...]
    before_xy: tuple[float, ...]  # the y of each turn's stored tokens (x as in `after_xy`): a lone turn draws no line
    # Where removal events happened, one mark per pixel column: (x, first turn, last turn, events in those turns).
    events: tuple[tuple[float, int, int, int], ...]
    budget_y: float | None  # the budget now
    budgets: tuple[tuple[float, float, float, int], ...]  # (x from, x to, y, budget): each budget where it applied
    changes: tuple[tuple[float, int, str], ...]  # (x, turn, what changed) where the policy changed
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    plot: tuple[float, float, float, float]  # left, top, right, bottom


def per_turn(points: list[HistoryPoint]) -> list[HistoryPoint]:
    """The last point of each turn, in order (points come in append order, turns never go back)."""
    last: dict[int, HistoryPoint] = {}
    for point in points:
        last[point.turn] = point
    return list(last.values())


def thinned(turns: list[HistoryPoint], columns: int) -> list[HistoryPoint]:
    """Per pixel column, the first and last turn and those with the fewest and most tokens in the prompt.

    What a line through every turn would draw at this width, in far fewer
    points (the budget's sawtooth keeps its peaks and troughs).
    """
    if len(turns) <= MOST_POINTS:
        return turns
    first, span = turns[0].turn, max(turns[-1].turn - turns[0].turn, 1)
    kept: list[HistoryPoint] = []
    for _, group in groupby(turns, key=lambda p: (p.turn - first) * columns // span):
        column = list(group)
        shaping = (column[0], min(column, key=_live), max(column, key=_live), column[-1])
        kept += sorted({p.seq: p for p in shaping}.values(), key=_seq)
    return kept


def _live(point: HistoryPoint) -> int:
    return point.live_tokens


def _seq(point: HistoryPoint) -> int:
    return point.seq


def _nice(top: float) -> float:
    """A round number at or above `top` for the axis's end, so its quarters are round too."""
    scale = 10 ** (len(str(int(top))) - 1)
    return next(step * scale for step in (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10) if step * scale >= top)


def _shown(budget: int | None) -> str:
    return "no budget" if budget is None else f"a budget of {budget:,}"


def tokens_chart(
    points: list[HistoryPoint], budget: int | None, budgets: Mapping[int, int | None] | None = None
) -> Chart:
    """The chart's geometry; `budgets` gives the budget of each settings generation (points from one the
    store did not record take `budget`, the one now)."""
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    every_turn = per_turn(points)
    turns = thinned(every_turn, right - left)
    budget_of = {**(budgets or {})}

    def applied(point: HistoryPoint) -> int | None:
        return budget_of.get(point.generation, budget)

    y_end = _nice(max([p.tokens for p in turns] + [budget or 0, 1] + [b for b in budget_of.values() if b]))
    x, y, x_ticks, y_ticks = _frame(turns, y_end)
    xs = [x(p.turn) for p in turns]
    after = tuple(zip(xs, [y(p.live_tokens) for p in turns], strict=True))
    events: list[tuple[float, int, int, int]] = []
    changes: list[tuple[float, int, str]] = []
    segments: list[tuple[float, float, float, int]] = []
    previous: HistoryPoint | None = None
    start: HistoryPoint | None = None  # where the budget drawn last began

    def close(until: float) -> None:
        drawn = applied(start) if start is not None else None
        if start is not None and drawn is not None:
            segments.append((x(start.turn), until, y(drawn), drawn))

    for p in every_turn:
        if previous is not None and p.generation != previous.generation:  # a rebuild under new settings:
            what = f"policy changed: {_shown(applied(previous))} → {_shown(applied(p))}"  # its events are not removals
            changes.append((x(p.turn), p.turn, what))
        elif p.events > (previous.events if previous else 0):
            _mark(events, x(p.turn), p.turn, p.events - (previous.events if previous else 0))
        if start is None or (p.generation != start.generation and applied(p) != applied(start)):
            close(x(p.turn))
            start = p
        previous = p
    close(float(right))
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        turns=tuple(turns),
        turn_count=len(every_turn),
        before=" ".join(f"{at},{y(p.tokens)}" for at, p in zip(xs, turns, strict=True)),
        after=" ".join(f"{at},{b}" for at, b in after),
        after_xy=after,
        before_xy=tuple(y(p.tokens) for p in turns),
        events=tuple(events),
        budget_y=y(budget) if budget is not None else None,
        budgets=tuple(segments),
        changes=tuple(changes),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        plot=(left, top, right, bottom),
    )


def _mark(events: list[tuple[float, int, int, int]], at: float, turn: int, count: int) -> None:
    """Add `count` events at `turn` to the marks: to the last one where it falls on the same pixel column.

    A long session has more event turns than the chart has pixels; one mark per column draws the same
    picture, and its title says which turns it stands for and how many events they had.
    """
    if events and int(events[-1][0]) == int(at):
        first_x, first, _, before = events[-1]
        events[-1] = (first_x, first, turn, before + count)
    else:
        events.append((at, turn, turn, count))


def _frame(
    turns: list[HistoryPoint], y_end: float
) -> tuple[Callable[[int], float], Callable[[float], float], tuple[Tick, ...], tuple[Tick, ...]]:
    """The plot's scales over `turns` (x: turn, y: 0 to `y_end`) and the ticks of both axes."""
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    first = turns[0].turn if turns else 0
    last = turns[-1].turn if turns else 1
    x_scale, y_scale = (right - left) / max(last - first, 1), (bottom - top) / y_end

    def x(turn: int) -> float:
        return round(left + (turn - first) * x_scale, 1)

    def y(value: float) -> float:
        return round(bottom - value * y_scale, 1)

    step = max(1, (last - first) // 8)
    x_ticks = tuple(Tick(x(t), str(t)) for t in range(first, last + 1, step))
    y_ticks = tuple(Tick(y(round(y_end * i / 4)), f"{round(y_end * i / 4):,}") for i in range(5))
    return x, y, x_ticks, y_ticks


@dataclass(frozen=True)
class CostChart:
    width: int
    height: int
    turns: tuple[HistoryPoint, ...]  # one per turn that recorded a cost, in order (thinned as `Chart.turns`)
    cost: str  # SVG polyline points, one per turn: the cost so far, pruned
    everything: str  # the same, sending everything
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    plot: tuple[float, float, float, float]  # left, top, right, bottom


def cost_chart(points: list[HistoryPoint]) -> CostChart | None:
    """The cost so far at each turn, pruned and sending everything; None where no append recorded a cost
    (a policy without prices)."""
    priced = [p for p in per_turn(points) if p.cost is not None and p.cost_everything is not None]
    if not priced:
        return None
    turns = thinned(priced, WIDTH - RIGHT - LEFT)
    x, y, x_ticks, y_ticks = _frame(turns, _nice(max(max(p.cost_everything or 0, p.cost or 0) for p in turns) or 1))
    return CostChart(
        width=WIDTH,
        height=HEIGHT,
        turns=tuple(turns),
        cost=" ".join(f"{x(p.turn)},{y(p.cost or 0)}" for p in turns),
        everything=" ".join(f"{x(p.turn)},{y(p.cost_everything or 0)}" for p in turns),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        plot=(LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM),
    )
