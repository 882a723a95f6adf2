"""``prunestore cost``: what the stored sessions' prompts cost under the store's policy and under another."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import click

from ..policy import EVICT_ORDERS, RESTORE_MODES, Policy
from ..prices import PRICES
from ..whatif import WhatIf
from .common import (
    PRICES_METAVAR,
    command,
    counted,
    echo_json,
    main,
    open_store,
    parse_prices,
    policy_changes,
    printable,
    table,
)

SAMPLE = 5  # changed messages named per policy


def _total(policy: Policy, replays: list[WhatIf]) -> dict[str, Any]:
    turns = sum(r.turns for r in replays)
    cost = sum(r.cost for r in replays)
    everything = sum(r.cost_everything for r in replays)
    return {
        "policy": json.loads(policy.to_json()),
        "sessions": len(replays),
        "messages": sum(r.messages for r in replays),
        "turns": turns,
        "cost": cost,
        "cost_everything": everything,
        "saving": everything / cost if cost else 1.0,
        "breaks": sum(r.breaks for r in replays),
        "events": sum(r.events for r in replays),
        "comebacks": sum(r.comebacks for r in replays),
        "late_joins": sum(r.late_joins for r in replays),
        "expired": sum(r.expired for r in replays),
        "peak": max((r.peak for r in replays), default=0),
        "mean": sum(r.mean * r.turns for r in replays) / turns if turns else 0.0,
        "changed": sum(r.changed for r in replays),
        "changed_sample": [[r.session, i] for r in replays for i in r.changed_ids][:SAMPLE],
    }


@command(main)
@click.argument("sessions", nargs=-1)
@click.option("--budget", help="The other policy's budget ('none': no budget).")
@click.option("--clear-at-least", type=int, help="The other policy's clear_at_least.")
@click.option("--evict", type=click.Choice(EVICT_ORDERS), help="The other policy's eviction order.")
@click.option("--restore", type=click.Choice(RESTORE_MODES), help="The other policy's restore mode.")
@click.option("--cache-ttl", metavar="SECONDS", help="The other policy's cache_ttl ('none': never).")
@click.option(
    "--prices",
    metavar=PRICES_METAVAR,
    help=f"Prices per input token against a fresh one: {', '.join(PRICES)}, or numbers "
    "(default: each policy's prices, else anthropic-5m).",
)
def cost(
    ctx: click.Context,
    sessions: tuple[str, ...],
    budget: str | None,
    clear_at_least: int | None,
    evict: str | None,
    restore: str | None,
    cache_ttl: str | None,
    prices: str | None,
    as_json: bool,
) -> None:
    """Replay SESSIONS (default: all) without writing: their prompts' cost, turn by turn, against sending everything.

    Under the store's policy, and with any option under the store's policy so changed: the cost, the cache
    breaks by cause, the prompt's peak and mean, and the messages whose verdict would change.
    """
    chosen = None if prices is None else parse_prices(prices)
    changes = policy_changes(budget, cache_ttl, clear_at_least=clear_at_least, evict=evict, restore=restore)
    with open_store(ctx, reading=True) as store:
        policies = [store.policy]
        if changes:
            policies.append(replace(store.policy, **changes))
        names = list(sessions) or store.sessions()
        totals = [_total(p, [store.what_if(n, p, chosen) for n in names]) for p in policies]
    if as_json:
        echo_json(totals)
        return
    labels = ["the store's policy", "the other policy"]
    rows = [
        (
            label,
            f"{t['cost']:,.0f}",
            f"{t['cost_everything']:,.0f}",
            f"{t['saving']:.2f}x",
            f"{t['breaks']:,}",
            f"{t['events']:,} / {t['comebacks']:,} / {t['late_joins']:,}",
            f"{t['expired']:,}",
            f"{t['peak']:,}",
            f"{t['mean']:,.0f}",
            f"{t['changed']:,}",
        )
        for label, t in zip(labels, totals, strict=False)
    ]
    head = ["policy", "cost", "everything", "everything / cost", "breaks", "events / comebacks / late joins", "expired"]
    table([*head, "peak", "mean", "changed"], rows)
    first = totals[0]
    click.echo(
        f"\n{counted(first['sessions'], 'session')}, {counted(first['messages'], 'message')}, "
        f"{counted(first['turns'], 'turn')} priced, one prompt a turn"
    )
    for label, t in zip(labels, totals, strict=False):
        click.echo(f"{label}: {json.dumps(t['policy'], sort_keys=True)}")
        if t["changed_sample"]:
            sample = ", ".join(f"{session}/{message}" for session, message in t["changed_sample"])
            click.echo(printable(f"  verdicts that would change, for example: {sample}"))
