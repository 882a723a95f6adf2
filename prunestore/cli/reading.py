"""Commands that read a session: render, live, messages, recall, explain, verify, stats, sessions."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict
from datetime import timedelta
from typing import Any, cast

import click

from ..formats import Format
from ..jsonl import to_json
from ..model import BUDGET_VERDICTS, StoredMessage
from ..results import Stats
from ..store import PruneStore
from .common import (
    DAYS,
    command,
    counted,
    echo_json,
    echo_receipt,
    main,
    message_rows,
    open_store,
    printable,
    printable_text,
    receipt_json,
    table,
)


@command(main)
@click.argument("session")
@click.option(
    "--format", "format_", type=click.Choice(["openai", "anthropic", "text"]), default="openai", show_default=True
)
@click.option("--placeholders", is_flag=True, help="Keep a pruned result's call, with a placeholder saying why.")
def render(ctx: click.Context, session: str, format_: str, placeholders: bool, as_json: bool) -> None:
    """The live history of SESSION as a prompt the provider accepts (JSON; text for --format text).

    A one-line report of what rendering did goes to standard error; with
    --json, one object holds the prompt and the report.
    """
    with open_store(ctx, reading=True) as store:
        rendered = store.render(session, cast(Format, format_), dropped="placeholder" if placeholders else "omit")
        budget = _budget(store, session)
    r = rendered.report
    if as_json:
        prompt: dict[str, Any] = {"text": rendered.text} if format_ == "text" else {"messages": rendered.messages}
        if format_ == "anthropic":
            prompt["system"] = rendered.system
        echo_json({"format": format_, **prompt, "report": asdict(r)})
        return
    if format_ == "openai":
        echo_json(rendered.messages)
    elif format_ == "anthropic":
        echo_json({"system": rendered.system, "messages": rendered.messages})
    else:
        click.echo(printable_text(rendered.text))
    click.echo(
        f"{counted(r.messages_out, 'message')} from {r.messages_in:,}, {r.tokens_out:,} of {r.tokens_in:,} tokens, "
        f"{r.calls_removed} calls removed, {r.placeholders} placeholders",
        err=True,
    )
    _echo_budget(budget)


def _budget(store: PruneStore, session: str) -> Stats | None:
    """The session's stats when the store's policy has a budget or gathers removals, for `_echo_budget`."""
    return store.stats(session) if store.policy.gathers else None


def _echo_budget(stats: Stats | None) -> None:
    """One line on standard error: the prompt against the budget, what waits for the next event, events so far."""
    if stats is None:
        return
    budget = f" of a budget of {stats.budget:,}" if stats.budget is not None else ""
    click.echo(
        f"prompt: {stats.live_tokens:,} tokens{budget}, {stats.pending_tokens:,} pending removal, "
        f"{stats.events:,} removal events so far",
        err=True,
    )
    if stats.over_budget:
        click.echo(
            "warning: over budget: what may not be evicted (pinned roles, the current turn, "
            "messages the prompt refers to) exceeds the budget",
            err=True,
        )


def _print_messages(messages: list[StoredMessage], as_json: bool) -> None:
    if as_json:
        echo_json([to_json(m, seq=m.seq, verdict=m.verdict, base=m.base, tokens=m.tokens) for m in messages])
    else:
        message_rows(messages)


@command(main)
@click.argument("session")
@click.option("--tail", type=click.IntRange(min=1), help="Only the last N of them.")
def live(ctx: click.Context, session: str, tail: int | None, as_json: bool) -> None:
    """The live messages of SESSION: what goes into the next prompt (with a budget, a line on it to stderr)."""
    with open_store(ctx, reading=True) as store:
        found = store.live(session)
        _print_messages(found[-tail:] if tail else found, as_json)
        if not as_json:
            _echo_budget(_budget(store, session))


@command(main)
@click.argument("session")
@click.option("--id", "ids", multiple=True, metavar="ID", help="Only the message with this id (repeatable).")
@click.option("--jsonl", is_flag=True, help="JSON Lines that prunestore import takes back: the messages as given.")
def messages(ctx: click.Context, session: str, ids: tuple[str, ...], jsonl: bool, as_json: bool) -> None:
    """Every message of SESSION with its verdict (or only those given with --id)."""
    with open_store(ctx, reading=True) as store:
        found = store.messages(session, ids=ids or None)
    if jsonl:
        for message in found:
            click.echo(json.dumps({"session": session, **to_json(message.to_message())}, ensure_ascii=False))
        return
    _print_messages(found, as_json)


@command(main)
@click.argument("session")
@click.option("--key", help="Only messages that define this key.")
@click.option("--text", help="Only messages holding every word of this text (case aside).")
@click.option("--first", metavar="ID", help="From this message on.")
@click.option("--last", metavar="ID", help="Up to this message.")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="The latest N matches.")
def recall(
    ctx: click.Context,
    session: str,
    key: str | None,
    text: str | None,
    first: str | None,
    last: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Messages of SESSION out of the prompt (pruned or evicted) that match, the latest ones, in append order."""
    with open_store(ctx, reading=True) as store:
        found = store.recall(session, key=key, text=text, first=first, last=last, limit=limit)
    if not found and not as_json:
        click.echo(f"Nothing matches: no message of session {printable(repr(session))} out of the prompt.")
        return
    _print_messages(found, as_json)


@command(main)
@click.argument("session")
def erasures(ctx: click.Context, session: str, as_json: bool) -> None:
    """The receipts of SESSION's erasures, oldest first: what each erased and what that changed."""
    with open_store(ctx, reading=True) as store:
        receipts = store.erasures(session)
    if as_json:
        echo_json([receipt_json(r) for r in receipts])
        return
    for receipt in receipts:
        echo_receipt(receipt)
    if not receipts:
        click.echo(f"no erasure in {printable(session)}")


@command(main)
@click.argument("session")
@click.argument("message_id")
def explain(ctx: click.Context, session: str, message_id: str, as_json: bool) -> None:
    """Why MESSAGE_ID of SESSION has its verdict."""
    with open_store(ctx, reading=True) as store:
        why = store.explain(session, message_id)
    if as_json:
        echo_json({**asdict(why), "live": why.live, "reason": why.reason})
    else:
        click.echo(printable(f"{why.message_id} (seq {why.seq}): {why.verdict}"))
        click.echo(f"  {printable(why.reason)}")


@command(main)
@click.argument("session", required=False)
@click.option("--all", "everything", is_flag=True, help="Verify every session (the default).")
def verify(ctx: click.Context, session: str | None, everything: bool, as_json: bool) -> None:
    """Rerun the batch pruner over SESSION (or all) and compare; exit 1 on any mismatch."""
    if session and everything:
        raise click.UsageError("give a SESSION or --all, not both")
    with open_store(ctx, reading=True) as store:
        report = store.verify(session)
    if as_json:
        echo_json(
            {
                "ok": report.ok,
                "sessions": report.sessions,
                "messages": report.messages,
                "mismatches": [
                    asdict(m) | {"stored": repr(m.stored), "expected": repr(m.expected)} for m in report.mismatches
                ],
            }
        )
    else:
        for mismatch in report.mismatches:
            click.echo(printable(str(mismatch)))
        verdict = "ok" if report.ok else f"{len(report.mismatches)} mismatches"
        click.echo(f"{verdict}: {counted(report.sessions, 'session')}, {counted(report.messages, 'message')} checked")
    if not report.ok:
        sys.exit(1)


@command(main)
@click.argument("session", required=False)
def stats(ctx: click.Context, session: str | None, as_json: bool) -> None:
    """Messages and tokens, total, live and per verdict, of SESSION or of all."""
    with open_store(ctx, reading=True) as store:
        result = store.stats(session)
    if as_json:
        echo_json({**asdict(result), "reduction": result.reduction})
        return
    budgeted = store.policy.gathers  # evicted and pending exist only then
    rows = [(v, s.messages, s.tokens) for v, s in result.by_verdict.items() if budgeted or v not in BUDGET_VERDICTS]
    rows += [("live", result.live_messages, result.live_tokens), ("total", result.messages, result.tokens)]
    table(["verdict", "messages", "tokens"], rows)
    click.echo(f"\n{counted(result.sessions, 'session')}; tokens pruned: {result.reduction:.1%}")
    if store.policy.gathers:
        budget = f"{result.budget:,} tokens" if result.budget is not None else "none"
        click.echo(
            f"budget: {budget}; pending removal: {result.pending_tokens:,} tokens; "
            f"removal events: {result.events:,}; sessions over budget: {result.over_budget}{_named(result)}"
        )
        if None in (result.comebacks, result.late_joins):
            click.echo("prompt cache breaks besides events: not counted (stored before they were; rebuild counts them)")
        else:
            click.echo(
                f"prompt cache breaks besides events: {result.comebacks:,} comebacks, {result.late_joins:,} late joins"
            )
        if result.over_budget:
            click.echo("warning: over budget: what may not be evicted exceeds the budget", err=True)
    if result.cost is not None and result.cost_everything is not None:
        saving = f" ({result.cost_everything / result.cost:.2f}x)" if result.cost else ""
        click.echo(
            f"cost so far, in fresh input tokens under the policy's prices: {result.cost:,.0f}; "
            f"sending everything: {result.cost_everything:,.0f}{saving}"
        )


def _named(result: Stats) -> str:
    """The names of the sessions over budget, as far as `stats` read them."""
    if not result.over_budget_names:
        return ""
    more = ", ..." if result.over_budget > len(result.over_budget_names) else ""
    return f" ({', '.join(map(printable, result.over_budget_names))}{more})"


@command(main)
@click.option("--prefix", help="Only names starting with this.")
@click.option("--idle-days", type=DAYS, help="Only sessions last written at least this many days ago.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many names (a page).")
@click.option("--after", metavar="NAME", help="Names after this one (the previous page's last).")
def sessions(
    ctx: click.Context, prefix: str | None, idle_days: float | None, limit: int | None, after: str | None, as_json: bool
) -> None:
    """The session names, in order; paged with --limit and --after."""
    idle_for = timedelta(days=idle_days) if idle_days is not None else None
    with open_store(ctx, reading=True) as store:
        names = store.sessions(prefix, idle_for=idle_for, limit=limit, after=after)
    if as_json:
        echo_json(names)
    else:
        for name in names:
            click.echo(printable(name))
    if limit is not None and len(names) == limit:
        click.echo(f"next page: --after {shlex.quote(names[-1])}", err=True)
