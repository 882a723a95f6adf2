"""Commands that write: append, import, rebuild, delete, fork, truncate, erase, and the policy."""

from __future__ import annotations

import json
import re
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import click

from ..errors import DuplicateMessageError, InvalidMessageError, PruneStoreError, TurnOrderError
from ..formats import from_anthropic, from_openai
from ..importer import ImportInterrupted, ImportSummary, import_files, open_bytes
from ..jsonl import read_numbered_lines
from ..policy import EVICT_ORDERS, RESTORE_MODES
from ..prices import PRICES
from ..results import Delta
from ..sql import settings
from ..sql.settings import tokenizer_name
from .common import (
    DAYS,
    PRICES_METAVAR,
    command,
    confirm,
    counted,
    echo_json,
    echo_receipt,
    main,
    open_store,
    policy_changes,
    prices_label,
    printable,
    receipt_json,
)


@command(main)
@click.argument("session", required=False)
def append(ctx: click.Context, session: str | None, as_json: bool) -> None:
    """Append the messages on standard input (JSON Lines), in one transaction.

    Each line goes to SESSION, or, without SESSION, to the session its
    "session" field names. A line whose "session" differs from SESSION is
    refused. Messages already stored with the same fields are skipped (a safe
    retry) and not counted.
    """
    if sys.stdin.isatty():
        click.echo("Reading JSON Lines, one message a line; Ctrl-D ends them.", err=True)
    batches: dict[str, list] = {}
    lines: dict[tuple[str, str], int] = {}  # (session, id) -> the line it came from
    for number, named, message in read_numbered_lines(sys.stdin, session_field=session is None):
        if session is not None and named is not None and named != session:
            raise InvalidMessageError(f"line {number}: session={named!r} differs from the SESSION argument {session!r}")
        name = session if session is not None else named
        assert name is not None  # the lines carry the field when there is no SESSION
        batches.setdefault(name, []).append(message)
        lines.setdefault((name, message.id), number)
    with open_store(ctx) as store:
        try:
            deltas = store.append_many(batches) if batches else {}
        except (DuplicateMessageError, TurnOrderError) as exc:
            at = lines.get((exc.session or "", exc.message_id or ""))
            if at is None:
                raise
            raise type(exc)(f"line {at}: {exc}", session=exc.session, message_id=exc.message_id) from None
    appended = sum(d.appended for d in deltas.values())
    if as_json:
        if session is not None:
            echo_json({"appended": appended, **asdict(deltas.get(session, Delta()))})
        else:
            echo_json({"appended": appended, "sessions": {name: asdict(d) for name, d in deltas.items()}})
        return
    given = sum(map(len, batches.values()))
    skipped = f" ({given - appended} already stored)" if given > appended else ""
    added = sum(len(d.live_added) for d in deltas.values())
    removed = sum(len(d.live_removed) for d in deltas.values())
    evicted = sum(len(d.evicted) for d in deltas.values())
    of_which = f" ({evicted} evicted by the budget)" if evicted else ""
    click.echo(f"{counted(appended, 'message')} appended{skipped}; live +{added} -{removed}{of_which}")


@command(main, "import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--batch-size", default=2000, show_default=True, type=click.IntRange(min=1), help="Lines per transaction."
)
@click.option(
    "--format",
    "format_",
    type=click.Choice(["jsonl", "openai", "anthropic"]),
    default="jsonl",
    show_default=True,
    help="JSON Lines messages, or one provider transcript per FILE.",
)
@click.option("--session", help="Session of a provider transcript (default: the file name without extension).")
@click.option("--document-tool", multiple=True, help="A tool whose results are retrieved passages (repeatable).")
@click.option("--keep-tool", multiple=True, help="A tool whose results are never superseded (repeatable).")
def import_(
    ctx: click.Context,
    files: tuple[Path, ...],
    batch_size: int,
    format_: str,
    session: str | None,
    document_tool: tuple[str, ...],
    keep_tool: tuple[str, ...],
    as_json: bool,
) -> None:
    """Import FILES: JSON Lines whose lines carry a "session" field, or provider transcripts.

    JSON Lines go in one transaction per batch, with memory flat however long
    the files are; a bad line stops the import, naming its file and line, and
    the batches before it stay stored. A transcript (--format openai: a JSON
    list of Chat Completions messages; --format anthropic: {"system": ...,
    "messages": [...]}) goes in as one session, all FILES in one transaction.
    Files may be gzip-compressed. Messages already stored are skipped and not
    counted, so importing again after an interruption or a fix finishes the job.
    """
    start = time.perf_counter()
    if format_ != "jsonl":
        if session is not None and len(files) > 1:
            raise click.UsageError("--session names one session: give one FILE")
        options = {"document_tools": set(document_tool), "keep_tools": set(keep_tool)}
        batches: dict[str, list] = {}
        for path in files:  # every file is read and checked before anything is written
            batches.setdefault(session or path.stem, []).extend(_read_transcript(path, format_, options))
        with open_store(ctx) as store:
            deltas = store.append_many(batches)
        given = sum(map(len, batches.values()))
        appended = {name: d.appended for name, d in deltas.items() if d.appended}
        summary = ImportSummary(sum(appended.values()), len(appended), given - sum(appended.values()))
        _report_import(summary, time.perf_counter() - start, as_json)
        return
    total = sum(f.stat().st_size for f in files)
    show = sys.stderr.isatty() and not as_json
    progress = click.progressbar(length=total, label="importing", file=sys.stderr, hidden=not show)
    try:
        with open_store(ctx) as store, progress as bar:
            imported = import_files(store, files, batch_size, bar.update)
    except InvalidMessageError as exc:
        transcript = next((f for f in files if str(exc).startswith(f"{f}, line ") and _a_transcript(f)), None)
        if transcript is None:
            raise
        what = str(exc).split(" (nothing of its batch")[0]
        raise InvalidMessageError(
            f"{what} (a JSON transcript? use --format openai or --format anthropic; nothing was written)"
        ) from None
    except ImportInterrupted as stop:
        done = stop.summary
        click.echo(
            f"\nInterrupted: {counted(done.messages, 'message')} imported and stored; "
            "run the same command again to import the rest.",
            err=True,
        )
        sys.exit(130)
    _report_import(imported, time.perf_counter() - start, as_json)


def _a_transcript(path: Path) -> bool:
    """Whether the file is one JSON transcript (a list of messages, or an object that holds them) rather than
    JSON Lines, whose one line is an object too (read only for an error message)."""
    try:
        with open_bytes(path) as (handle, _raw):
            data = json.loads(handle.read().decode("utf-8"))
            return isinstance(data, list) or (isinstance(data, dict) and "messages" in data)
    except (ValueError, UnicodeDecodeError, RecursionError, OSError, EOFError, zlib.error):
        return False


def _read_transcript(path: Path, format_: str, options: dict) -> list:
    try:
        with open_bytes(path) as (handle, _raw):
            data = json.loads(handle.read().decode("utf-8"))
    except json.JSONDecodeError as exc:
        lines = " (JSON Lines? import them without --format)" if exc.msg == "Extra data" else ""
        raise InvalidMessageError(
            f"{path}: not a JSON transcript ({exc.msg} at line {exc.lineno} column {exc.colno}){lines}"
        ) from None
    except (ValueError, UnicodeDecodeError, RecursionError, OSError, EOFError, zlib.error) as exc:
        raise InvalidMessageError(f"{path}: not a JSON transcript ({type(exc).__name__}: {exc})") from None
    messages: Any = data.get("messages") if isinstance(data, dict) else data
    try:
        if format_ == "openai":
            return from_openai(messages, **options)
        return from_anthropic(messages, data.get("system") if isinstance(data, dict) else None, **options)
    except InvalidMessageError as exc:  # the library may ask whether it is the other kind: say how to import that
        other = "anthropic" if format_ == "openai" else "openai"
        text = re.sub(r"\((an \w+ transcript\?)\)$", rf"(\1 use --format {other})", str(exc))
        raise InvalidMessageError(f"{path}: {text}") from None


def _report_import(summary: ImportSummary, elapsed: float, as_json: bool) -> None:
    rate = round(summary.messages / elapsed) if elapsed else None
    if as_json:
        echo_json(asdict(summary) | {"seconds": round(elapsed, 3), "messages_per_second": rate})
        return
    skipped = f" ({summary.already_stored} already stored)" if summary.already_stored else ""
    click.echo(
        f"imported {counted(summary.messages, 'message')}{skipped} in {counted(summary.sessions, 'session')} "
        f"in {elapsed:.1f} s "
        f"({rate} messages/s)"
    )


@command(main)
@click.argument("session", required=False)
@click.option("--all", "everything", is_flag=True, help="Rebuild every session.")
def rebuild(ctx: click.Context, session: str | None, everything: bool, as_json: bool) -> None:
    """Recompute the stored state of SESSION (or --all) from its messages."""
    if bool(session) == everything:
        raise click.UsageError("give a SESSION or --all")
    with open_store(ctx) as store:
        store.rebuild(session)
        rebuilt = [session] if session else store.sessions()
    if as_json:
        echo_json({"rebuilt": rebuilt})
    else:
        click.echo(f"rebuilt {printable(session) if session else counted(len(rebuilt), 'session')}")


@command(main)
@click.argument("session")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(ctx: click.Context, session: str, yes: bool, as_json: bool) -> None:
    """Delete SESSION and everything that belongs to it (asks first)."""
    confirm(f"Delete session {session!r} and all its messages?", yes)
    with open_store(ctx) as store:
        store.delete_session(session)
    if as_json:
        echo_json({"deleted": session})
    else:
        click.echo(f"deleted {printable(session)}")


@command(main)
@click.option("--idle-days", type=DAYS, required=True, help="Remove sessions last written at least this many days ago.")
@click.option("--dry-run", is_flag=True, help="Only report what would be removed.")
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=100, show_default=True, help="Sessions removed per transaction."
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def gc(ctx: click.Context, idle_days: float, dry_run: bool, batch_size: int, yes: bool, as_json: bool) -> None:
    """Remove the sessions idle for --idle-days days, and report what went (asks first)."""
    idle_for, idle = timedelta(days=idle_days), f"idle for {idle_days:g} days"
    with open_store(ctx) as store:
        if not dry_run and not yes:
            found = store.gc(idle_for, dry_run=True, batch_size=batch_size)
            if found.sessions:
                what = f"{counted(len(found.sessions), 'session')} ({counted(found.messages, 'message')})"
                confirm(f"Delete {what} {idle}?", yes)
        report = store.gc(idle_for, dry_run=dry_run, batch_size=batch_size)
    if as_json:
        echo_json({"sessions": list(report.sessions), "messages": report.messages, "dry_run": report.dry_run})
    else:
        verb = "would remove" if report.dry_run else "removed"
        click.echo(f"{verb} {counted(len(report.sessions), 'session')}, {counted(report.messages, 'message')} ({idle})")


@command(main)
@click.argument("session")
@click.argument("at_message_id")
@click.argument("new_session")
def fork(ctx: click.Context, session: str, at_message_id: str, new_session: str, as_json: bool) -> None:
    """Start NEW_SESSION with the messages of SESSION up to and including AT_MESSAGE_ID."""
    with open_store(ctx) as store:
        store.fork(session, at_message_id, new_session)
        stats = store.stats(new_session)
    if as_json:
        echo_json({"session": new_session, "messages": stats.messages, "live_messages": stats.live_messages})
    else:
        click.echo(printable(f"forked {session} at {at_message_id} into {new_session} ({stats.live_messages} live)"))


@command(main)
@click.argument("session")
@click.argument("after_message_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def truncate(ctx: click.Context, session: str, after_message_id: str, yes: bool, as_json: bool) -> None:
    """Drop the messages of SESSION after AFTER_MESSAGE_ID, restoring the state it had then (asks first)."""
    confirm(f"Drop every message of session {session!r} after {after_message_id!r}?", yes)
    with open_store(ctx) as store:
        delta = store.truncate(session, after_message_id)
    if as_json:
        echo_json(asdict(delta))
    else:
        click.echo(
            printable(
                f"truncated {session} after {after_message_id}: "
                f"{len(delta.live_removed)} no longer live, {len(delta.live_added)} live again"
            )
        )


@command(main)
@click.argument("session")
@click.argument("message_ids", nargs=-1, required=True)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def erase(ctx: click.Context, session: str, message_ids: tuple[str, ...], yes: bool, as_json: bool) -> None:
    """Remove for good what MESSAGE_IDS of SESSION said, and recompute the session without it (asks first)."""
    confirm(f"Erase the content of {len(message_ids)} message(s) of session {session!r} for good?", yes)
    with open_store(ctx) as store:
        receipt = store.erase(session, message_ids)
    if as_json:
        echo_json(receipt_json(receipt, just_made=True))
        return
    echo_receipt(receipt)


def _roles(text: str | None) -> frozenset[str] | None:
    return None if text is None else frozenset(r.strip() for r in text.split(",") if r.strip())


@command(main)
@click.option("--budget", help="Tokens the prompt may hold ('none': no budget).")
@click.option("--clear-at-least", type=int, help="Tokens of removals gathered before an event.")
@click.option("--pinned-roles", help="Comma-separated roles the budget never evicts.")
@click.option("--restore", type=click.Choice(RESTORE_MODES), help="How restoration follows references.")
@click.option(
    "--evict",
    type=click.Choice(EVICT_ORDERS),
    help="What the budget evicts first: the oldest messages, or the oldest that define no key in use.",
)
@click.option(
    "--cache-ttl",
    metavar="SECONDS",
    help="Seconds the provider keeps a cached prompt; a message after a longer gap clears what is pending "
    "('none': never).",
)
@click.option("--dedupe-roles", help="Comma-separated roles whose repeated contents are duplicates.")
@click.option(
    "--prices",
    metavar=PRICES_METAVAR,
    help=f"Prices that keep a cost ledger: {', '.join(PRICES)}, or READ,WRITE[,FRESH] per token ('none': no ledger).",
)
@click.option(
    "--tokenizer",
    metavar="MODULE:NAME",
    help="What counts a message's tokens: a function's import path, or o200k_base, cl100k_base or word_pieces; "
    "every message is counted again.",
)
@click.option("--yes", is_flag=True, help="Change the policy without asking.")
def policy(
    ctx: click.Context,
    budget: str | None,
    clear_at_least: int | None,
    pinned_roles: str | None,
    restore: str | None,
    evict: str | None,
    cache_ttl: str | None,
    dedupe_roles: str | None,
    prices: str | None,
    tokenizer: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    """Show the store's policy and tokenizer; with options, change them and rebuild every session under them.

    Stores open elsewhere (other processes, `prunestore serve`) take the change up on their next read or write.
    """
    changes = policy_changes(
        budget,
        cache_ttl,
        prices,
        clear_at_least=clear_at_least,
        pinned_roles=_roles(pinned_roles),
        dedupe_roles=_roles(dedupe_roles),
        restore=restore,
        evict=evict,
    )
    counter = None if tokenizer is None else load_tokenizer(tokenizer)
    with open_store(ctx, reading=not changes and counter is None) as store:
        chosen = store.policy
        if changes:
            chosen = replace(store.policy, **changes)
        if chosen != store.policy or (counter is not None and tokenizer_name(counter) != store.tokenizer_name):
            what = "policy" if counter is None else "tokenizer" if chosen == store.policy else "policy and tokenizer"
            confirm(f"Rebuild {counted(len(store.sessions()), 'session')} under the new {what}?", yes)
            store.rebuild(policy=chosen, tokenizer=counter)
        shown = dict(sorted({"cache_ttl": None, "prices": None, **json.loads(chosen.to_json())}.items()))
        shown["tokenizer"] = store.tokenizer_name
    if as_json:
        echo_json(shown)
        return
    shown["prices"] = prices_label(chosen.prices)
    for name, value in shown.items():
        click.echo(f"{name}: {value if value is not None else 'none'}")


def load_tokenizer(path: str) -> Callable[[str], int]:
    """The tokenizer named on the command line; a name that does not import is a usage error."""
    try:
        return settings.load_tokenizer(path)
    except PruneStoreError as exc:
        raise click.BadParameter(str(exc), param_hint="--tokenizer") from None
