"""The chart of a session's prompt: tokens per turn before and after pruning, as SVG coordinates.

Pure geometry over `HistoryPoint`s, no I/O: the page's template draws what
this computes. A turn's point is the last append that ended in it, so a
turn stored inside a larger append (an import) has no point of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..results import HistoryPoint

__all__ = ["Chart", "Tick", "per_turn", "tokens_chart"]

WIDTH, HEIGHT = 960, 360
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 16, 40


@dataclass(frozen=True)
class Tick:
    at: float  # pixels along the axis
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    turns: tuple[HistoryPoint, ...]  # one per turn, in order
    before: tuple[tuple[float, float], ...]  # (x, y) per turn: every token stored
    after: tuple[tuple[float, float], ...]  # (x, y) per turn: the tokens in the prompt
    events: tuple[tuple[float, int, int], ...]  # (x, turn, events that turn) where removal events happened
    budget_y: float | None
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    plot: tuple[float, float, float, float]  # left, top, right, bottom


def per_turn(points: list[HistoryPoint]) -> list[HistoryPoint]:
    """The last point of each turn, in order (points come in append order, turns never go back)."""
    last: dict[int, HistoryPoint] = {}
    for point in points:
        last[point.turn] = point
    return list(last.values())


def _nice(top: float) -> float:
    """A round number at or above `top` for the axis's end, so its quarters are round too."""
    scale = 10 ** (len(str(int(top))) - 1)
    return next(step * scale for step in (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10) if step * scale >= top)


def tokens_chart(points: list[HistoryPoint], budget: int | None) -> Chart:
    turns = per_turn(points)
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    highest = max([p.tokens for p in turns] + [budget or 0, 1])
    y_end = _nice(highest)
    first = turns[0].turn if turns else 0
    last = turns[-1].turn if turns else 1
    span = max(last - first, 1)

    def x(turn: int) -> float:
        return round(left + (turn - first) * (right - left) / span, 1)

    def y(tokens: int) -> float:
        return round(bottom - tokens * (bottom - top) / y_end, 1)

    events = []
    previous = 0
    for p in turns:
        if p.events > previous:
            events.append((x(p.turn), p.turn, p.events - previous))
        previous = p.events
    step = max(1, span // 8)
    x_ticks = tuple(Tick(x(t), str(t)) for t in range(first, last + 1, step))
    y_ticks = tuple(Tick(y(round(y_end * i / 4)), f"{round(y_end * i / 4):,}") for i in range(5))
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        turns=tuple(turns),
        before=tuple((x(p.turn), y(p.tokens)) for p in turns),
        after=tuple((x(p.turn), y(p.live_tokens)) for p in turns),
        events=tuple(events),
        budget_y=y(budget) if budget is not None else None,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        plot=(left, top, right, bottom),
    )
