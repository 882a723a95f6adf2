"""The demo and the benchmark."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from ..sql import db
from .common import command, counted, echo_json, main, open_store, table

TOKENS = click.IntRange(min=0)


def _demo_budget(turns: int, budget: int, clear_at_least: int) -> None:
    from ..showcase.demo import budget_run

    rules = budget_run(turns, None)
    click.echo(
        f"\nagent-{turns} again, its input priced with a prompt cache (read 0.1, write 1.25 a token), "
        f"against {_amount(rules.cost_everything)} sending everything:",
        err=True,
    )
    click.echo(
        f"  the rules alone, as above: {_amount(rules.cost)} ({_times(rules.cost_everything / rules.cost)}): "
        "each removal rewrites the cached prompt after it, so the rules save tokens, not money, without a budget"
    )
    r = budget_run(turns, budget, clear_at_least)
    click.echo(
        f"  under Policy(budget={budget}, clear_at_least={clear_at_least}): {_amount(r.cost)} "
        f"({_times(r.cost_everything / r.cost)}); prompt at most {r.peak:,} tokens (mean {r.mean:,.0f}), "
        f"{r.events} removal events; facts in every turn's prompt: {r.facts_kept}/{r.facts}"
    )
    last = budget_run(turns, budget, clear_at_least, evict="definers_last")
    click.echo(
        f'  with evict="definers_last" (facts evicted last): {_amount(last.cost)} '
        f"({_times(last.cost_everything / last.cost)}), comebacks {r.comebacks} -> {last.comebacks}; "
        f"facts in every turn's prompt: {last.facts_kept}/{last.facts}"
    )
    if r.over_budget_turns:
        click.echo(
            f"  over the budget at {counted(r.over_budget_turns, 'turn')} of {r.turns}: what may not be evicted "
            "(pinned roles, the current turn, what the prompt refers to) exceeded it"
        )


def _times(ratio: float) -> str:
    """A saving against sending everything: "3.0x less", or "1.6x more" where it costs more."""
    return f"{ratio:.1f}x less" if ratio >= 1 else f"{1 / ratio:.1f}x more"


def _amount(tokens: float) -> str:
    """Token-priced units, short: 1.23M, 45.6k, 789."""
    if tokens >= 1e6:
        return f"{tokens / 1e6:.2f}M"
    return f"{tokens / 1e3:.1f}k" if tokens >= 1e3 else f"{tokens:.0f}"


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected numbers separated by commas") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"{text!r}: sizes must be positive")
    return sizes


@command(main)
@click.option("--sizes", default="50,200,500,1000,2000", show_default=True, help="Conversation lengths in turns.")
@click.option("--seed", default=0, show_default=True, help="Seed of the workload generator.")
@click.option("--replace", is_flag=True, help="Overwrite the demo's sessions (chat-N, rag-N, agent-N) if they exist.")
@click.option(
    "--budget",
    default=32000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Budget of the run in memory (0: skip it).",
)
@click.option(
    "--clear-at-least", default=16000, show_default=True, type=click.IntRange(min=0), help="Its clear_at_least."
)
def demo(
    ctx: click.Context, sizes: str, seed: int, replace: bool, budget: int, clear_at_least: int, as_json: bool
) -> None:
    """Fill the store with the chat, RAG and tool-agent workloads, turn by turn, and show what pruning did.

    The sessions are named chat-N, rag-N and agent-N (N the number of turns);
    where the store already holds one, the demo stops unless --replace is given.
    Then the largest agent session is played again on a store in memory with
    a token budget, and its prompts are priced with a prompt cache beside
    sending everything (not with --json).
    """
    from ..showcase.demo import run_demo

    with open_store(ctx) as store:
        url = db.shown_url(store.url)
        filled = run_demo(store, _sizes(sizes), seed=seed, replace=replace)
        if not as_json:
            click.echo(f"writing the demo's sessions into {url}", err=True)
        rows = []
        for row in filled:
            rows.append(row)
            if not as_json:
                click.echo(
                    f"  {row.session}: {counted(row.messages, 'message')}, {row.reduction:.1%} of tokens pruned",
                    err=True,
                )
        last = rows[-1].session
        verdicts = {m.verdict: m.id for m in reversed(store.messages(last))}
        example = verdicts.get("restored") or verdicts.get("superseded") or verdicts["kept"]
    if as_json:
        echo_json([asdict(r) | {"reduction": r.reduction} for r in rows])
        return
    click.echo()
    table(
        [
            "workload",
            "turns",
            "messages",
            "tokens before",
            "after",
            "reduction",
            "superseded",
            "duplicates",
            "restored",
            "facts kept",
            "incr = batch",
            "idempotent",
        ],
        [
            (
                r.workload,
                r.turns,
                r.messages,
                r.tokens_before,
                r.tokens_after,
                f"{r.reduction:.1%}",
                r.superseded,
                r.duplicates,
                r.restored,
                f"{r.required_kept}/{r.required}",
                "yes" if r.incremental_equals_batch else "NO",
                "yes" if r.idempotent else "NO",
            )
            for r in rows
        ],
    )
    click.echo()
    for workload in dict.fromkeys(r.workload for r in rows):
        mine = [r for r in rows if r.workload == workload]
        low, high = min(r.reduction for r in mine), max(r.reduction for r in mine)
        click.echo(
            f"{workload}: {low:.1%} to {high:.1%} of tokens pruned; "
            f"required facts kept: {sum(r.required_kept for r in mine)}/{sum(r.required for r in mine)}"
        )
    ok = all(r.incremental_equals_batch and r.idempotent and r.required_kept == r.required for r in rows)
    click.echo(f"incremental state equals batch pruning, idempotent, no required fact lost: {'yes' if ok else 'NO'}")
    if budget:
        _demo_budget(max(r.turns for r in rows), budget, clear_at_least)
    click.echo(
        f"\nThe store is {url}. Explore it:\n  prunestore sessions\n  prunestore stats {last}\n"
        f"  prunestore live {last}\n  prunestore explain {last} {example}\n"
        f"  prunestore serve   (in a browser; needs pip install '.[web]')"
    )


@command(main)
@click.option("--turns", default="50,200,500,1000,2000", show_default=True, help="Conversation lengths to measure at.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Draw cost per turn to a PNG file.")
def bench(ctx: click.Context, turns: str, plot: Path | None, as_json: bool) -> None:
    """Per-turn cost: incremental append against rerunning a batch prune (with and without a SQL read).

    The append is shown alone, with a client's prompt kept from its delta, and
    with the whole prompt read back. It runs on temporary databases, not on --db.
    """
    from ..showcase.bench import compare_per_turn, draw, plotting

    if plot:
        plotting()  # before the run, so a missing matplotlib does not cost the whole benchmark
    result = compare_per_turn(_sizes(turns))
    if as_json:
        echo_json(result)
    else:
        table(
            [
                "turns",
                "append ms",
                "append+patch ms",
                "append+live ms",
                "batch rerun ms",
                "SQL read+rerun ms",
                "rerun / append",
                "SQL read+rerun / append+live",
            ],
            [
                (
                    r["turns"],
                    f"{r['incremental_ms']:.2f}",
                    f"{r['incremental_patch_ms']:.2f}",
                    f"{r['incremental_live_ms']:.2f}",
                    f"{r['batch_ms']:.2f}",
                    f"{r['sql_batch_ms']:.2f}",
                    f"{r['batch_ms'] / r['incremental_ms']:.1f}x",
                    f"{r['sql_batch_ms'] / r['incremental_live_ms']:.1f}x",
                )
                for r in result
            ],
        )
    if plot:
        draw(result, plot)
        click.echo(f"plot written to {plot}", err=True)
