"""The ``prunestore`` command: a thin layer over the library.

Every command opens the store, makes one call and prints the result: aligned
tables for people, ``--json`` for machines. A `PruneStoreError` becomes one
line on standard error and exit status 2; ``verify`` exits 1 on a mismatch.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click

from . import __version__, db
from .errors import InvalidMessageError, InvalidRevisionError, PruneStoreError
from .formats import from_anthropic, from_openai
from .importer import ImportInterrupted, ImportSummary, import_files, open_bytes
from .jsonl import read_lines, to_json
from .model import StoredMessage
from .results import Delta, Stats
from .store import PruneStore

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _fail_cleanly(command: Callable) -> Callable:
    """Turn `PruneStoreError` into a one-line message and exit status 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except PruneStoreError as exc:
            click.echo(f"Error: {_printable(str(exc))}", err=True)
            sys.exit(2)

    return wrapper


def _use_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:  # given after the command: it wins over the group's --db and PRUNESTORE_URL
        ctx.find_root().obj = db.resolve_url(value)


def _command(group: click.Group, name: str | None = None, *, as_json: bool = True) -> Callable[[Callable], Callable]:
    """A command of `group` that takes ``--db`` after its name too, prints JSON with ``--json``, and fails cleanly."""

    def decorate(function: Callable) -> click.Command:
        function = click.pass_context(_fail_cleanly(function))
        if as_json:
            function = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(function)
        function = click.option(
            "--db", metavar="URL", expose_value=False, callback=_use_url, help="Database URL (as before the command)."
        )(function)
        return group.command(name)(function)

    return decorate


def _confirm(question: str, yes: bool) -> None:
    """Ask on standard error (standard output may be JSON for a program); Ctrl-C or "no" aborts with status 1."""
    if not yes:
        click.confirm(question, abort=True, err=True)


def _open(ctx: click.Context) -> PruneStore:
    return PruneStore(ctx.find_root().obj)


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2, default=str))


# Control characters (NUL, ESC, ...) and the bidirectional overrides that could
# reorder what a terminal shows are printed as escapes.
_UNPRINTABLE = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in [*range(0x20), *range(0x7F, 0xA0), 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
}


def _printable(text: str) -> str:
    return text.translate(_UNPRINTABLE)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Columns aligned to their widest cell; numbers to the right."""
    rows = [[("" if c is None else _printable(str(c))) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(_is_number(r[i]) for r in rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric, strict=True))

    click.echo(line(headers).rstrip())
    click.echo("  ".join("-" * w for w in widths))
    for row in rows:
        click.echo(line(row).rstrip())


def _is_number(cell: str) -> bool:
    try:
        float(cell.rstrip("%x"))
    except ValueError:
        return False
    return True


def _preview(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _message_rows(messages: list[StoredMessage]) -> None:
    _table(
        ["seq", "id", "role", "turn", "tokens", "verdict", "content"],
        [(m.seq, m.id, m.role, m.turn, m.tokens, m.verdict, _preview(m.content)) for m in messages],
    )


@click.group(context_settings=CONTEXT)
@click.option(
    "--db",
    "url",
    metavar="URL",
    envvar="PRUNESTORE_URL",
    show_envvar=True,
    help="Database URL; default sqlite:///prunestore.db in the working directory. Also accepted after the command.",
)
@click.version_option(__version__, "--version", prog_name="prunestore")
@click.pass_context
def main(ctx: click.Context, url: str | None) -> None:
    """prunestore: a persistent, incremental prompt-pruning store."""
    ctx.obj = db.resolve_url(url)


# -- writing -------------------------------------------------------------------


@_command(main)
@click.argument("session", required=False)
def append(ctx: click.Context, session: str | None, as_json: bool) -> None:
    """Append the messages on standard input (JSON Lines), in one transaction.

    Each line goes to SESSION, or, without SESSION, to the session its
    "session" field names. A line whose "session" differs from SESSION is
    refused. Messages already stored with the same fields are skipped (a safe
    retry) and not counted.
    """
    batches: dict[str, list] = {}
    for number, (named, message) in enumerate(read_lines(sys.stdin, session_field=session is None), 1):
        if session is not None and named is not None and named != session:
            raise InvalidMessageError(f"line {number}: session={named!r} differs from the SESSION argument {session!r}")
        name = session if session is not None else named
        assert name is not None  # read_lines requires the field when there is no SESSION
        batches.setdefault(name, []).append(message)
    with _open(ctx) as store:
        deltas = store.append_many(batches) if batches else {}
    appended = sum(d.appended for d in deltas.values())
    if as_json:
        if session is not None:
            _echo_json({"appended": appended, **asdict(deltas.get(session, Delta()))})
        else:
            _echo_json({"appended": appended, "sessions": {name: asdict(d) for name, d in deltas.items()}})
        return
    given = sum(map(len, batches.values()))
    skipped = f" ({given - appended} already stored)" if given > appended else ""
    added = sum(len(d.live_added) for d in deltas.values())
    removed = sum(len(d.live_removed) for d in deltas.values())
    click.echo(f"{appended} messages appended{skipped}; live +{added} -{removed}")


@_command(main, "import")
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
        with _open(ctx) as store:
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
        with _open(ctx) as store, progress as bar:
            imported = import_files(store, files, batch_size, bar.update)
    except ImportInterrupted as stop:
        done = stop.summary
        click.echo(
            f"\nInterrupted: {done.messages} messages were imported and are stored; "
            "run the same command again to import the rest.",
            err=True,
        )
        sys.exit(130)
    _report_import(imported, time.perf_counter() - start, as_json)


def _read_transcript(path: Path, format_: str, options: dict) -> list:
    try:
        with open_bytes(path) as (handle, _raw):
            data = json.loads(handle.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError, OSError, EOFError, zlib.error) as exc:
        raise InvalidMessageError(f"{path}: not a JSON transcript ({type(exc).__name__}: {exc})") from None
    messages: Any = data.get("messages") if isinstance(data, dict) else data
    try:
        if format_ == "openai":
            return from_openai(messages, **options)
        return from_anthropic(messages, data.get("system") if isinstance(data, dict) else None, **options)
    except InvalidMessageError as exc:
        other = "anthropic" if format_ == "openai" else "openai"
        hint = f" (is it an {other.capitalize()} transcript? use --format {other})" if "transcript?" in str(exc) else ""
        raise InvalidMessageError(f"{path}: {exc}{hint}") from None


def _report_import(summary: ImportSummary, elapsed: float, as_json: bool) -> None:
    rate = round(summary.messages / elapsed) if elapsed else None
    if as_json:
        _echo_json(asdict(summary) | {"seconds": round(elapsed, 3), "messages_per_second": rate})
        return
    skipped = f" ({summary.already_stored} already stored)" if summary.already_stored else ""
    click.echo(
        f"imported {summary.messages} messages{skipped} in {summary.sessions} sessions in {elapsed:.1f} s "
        f"({rate} messages/s)"
    )


@_command(main)
@click.argument("session", required=False)
@click.option("--all", "everything", is_flag=True, help="Rebuild every session.")
def rebuild(ctx: click.Context, session: str | None, everything: bool, as_json: bool) -> None:
    """Recompute the stored state of SESSION (or --all) from its messages."""
    if bool(session) == everything:
        raise click.UsageError("give a SESSION or --all")
    with _open(ctx) as store:
        store.rebuild(session)
        rebuilt = [session] if session else store.sessions()
    if as_json:
        _echo_json({"rebuilt": rebuilt})
    else:
        click.echo(f"rebuilt {_printable(session) if session else f'{len(rebuilt)} sessions'}")


@_command(main)
@click.argument("session")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(ctx: click.Context, session: str, yes: bool, as_json: bool) -> None:
    """Delete SESSION and everything that belongs to it (asks first)."""
    _confirm(f"Delete session {session!r} and all its messages?", yes)
    with _open(ctx) as store:
        store.delete_session(session)
    if as_json:
        _echo_json({"deleted": session})
    else:
        click.echo(f"deleted {_printable(session)}")


@_command(main)
@click.argument("session")
@click.argument("at_message_id")
@click.argument("new_session")
def fork(ctx: click.Context, session: str, at_message_id: str, new_session: str, as_json: bool) -> None:
    """Start NEW_SESSION with the messages of SESSION up to and including AT_MESSAGE_ID."""
    with _open(ctx) as store:
        store.fork(session, at_message_id, new_session)
        stats = store.stats(new_session)
    if as_json:
        _echo_json({"session": new_session, "messages": stats.messages, "live_messages": stats.live_messages})
    else:
        click.echo(_printable(f"forked {session} at {at_message_id} into {new_session} ({stats.live_messages} live)"))


@_command(main)
@click.argument("session")
@click.argument("after_message_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def truncate(ctx: click.Context, session: str, after_message_id: str, yes: bool, as_json: bool) -> None:
    """Drop the messages of SESSION after AFTER_MESSAGE_ID, restoring the state it had then (asks first)."""
    _confirm(f"Drop every message of session {session!r} after {after_message_id!r}?", yes)
    with _open(ctx) as store:
        delta = store.truncate(session, after_message_id)
    if as_json:
        _echo_json(asdict(delta))
    else:
        click.echo(
            _printable(
                f"truncated {session} after {after_message_id}: "
                f"{len(delta.live_removed)} no longer live, {len(delta.live_added)} live again"
            )
        )


# -- reading -------------------------------------------------------------------


@_command(main)
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
    with _open(ctx) as store:
        rendered = store.render(session, format_, dropped="placeholder" if placeholders else "omit")
        budget = _budget(store, session)
    r = rendered.report
    if as_json:
        prompt: dict[str, Any] = {"text": rendered.text} if format_ == "text" else {"messages": rendered.messages}
        if format_ == "anthropic":
            prompt["system"] = rendered.system
        _echo_json({"format": format_, **prompt, "report": asdict(r)})
        return
    if format_ == "openai":
        _echo_json(rendered.messages)
    elif format_ == "anthropic":
        _echo_json({"system": rendered.system, "messages": rendered.messages})
    else:
        click.echo(rendered.text)
    click.echo(
        f"{r.messages_out} messages from {r.messages_in}, {r.tokens_out:,} of {r.tokens_in:,} tokens, "
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
        _echo_json([to_json(m, seq=m.seq, verdict=m.verdict, base=m.base, tokens=m.tokens) for m in messages])
    else:
        _message_rows(messages)


@_command(main)
@click.argument("session")
def live(ctx: click.Context, session: str, as_json: bool) -> None:
    """The live messages of SESSION: what goes into the next prompt (with a budget, a line on it to stderr)."""
    with _open(ctx) as store:
        _print_messages(store.live(session), as_json)
        if not as_json:
            _echo_budget(_budget(store, session))


@_command(main)
@click.argument("session")
@click.option("--id", "ids", multiple=True, metavar="ID", help="Only the message with this id (repeatable).")
def messages(ctx: click.Context, session: str, ids: tuple[str, ...], as_json: bool) -> None:
    """Every message of SESSION with its verdict (or only those given with --id)."""
    with _open(ctx) as store:
        _print_messages(store.messages(session, ids=ids or None), as_json)


@_command(main)
@click.argument("session")
@click.argument("message_id")
def explain(ctx: click.Context, session: str, message_id: str, as_json: bool) -> None:
    """Why MESSAGE_ID of SESSION has its verdict."""
    with _open(ctx) as store:
        why = store.explain(session, message_id)
    if as_json:
        _echo_json({**asdict(why), "live": why.live, "reason": why.reason})
    else:
        click.echo(_printable(f"{why.message_id} (seq {why.seq}): {why.verdict}"))
        click.echo(f"  {_printable(why.reason)}")


@_command(main)
@click.argument("session", required=False)
@click.option("--all", "everything", is_flag=True, help="Verify every session (the default).")
def verify(ctx: click.Context, session: str | None, everything: bool, as_json: bool) -> None:
    """Rerun the batch pruner over SESSION (or all) and compare; exit 1 on any mismatch."""
    if session and everything:
        raise click.UsageError("give a SESSION or --all, not both")
    with _open(ctx) as store:
        report = store.verify(session)
    if as_json:
        _echo_json(
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
            click.echo(_printable(str(mismatch)))
        verdict = "ok" if report.ok else f"{len(report.mismatches)} mismatches"
        click.echo(f"{verdict}: {report.sessions} sessions, {report.messages} messages checked")
    if not report.ok:
        sys.exit(1)


@_command(main)
@click.argument("session", required=False)
def stats(ctx: click.Context, session: str | None, as_json: bool) -> None:
    """Messages and tokens, total, live and per verdict, of SESSION or of all."""
    with _open(ctx) as store:
        result = store.stats(session)
    if as_json:
        _echo_json({**asdict(result), "reduction": result.reduction})
        return
    rows = [(v, s.messages, s.tokens) for v, s in result.by_verdict.items()]
    rows += [("live", result.live_messages, result.live_tokens), ("total", result.messages, result.tokens)]
    _table(["verdict", "messages", "tokens"], rows)
    click.echo(f"\n{result.sessions} session(s); tokens pruned: {result.reduction:.1%}")
    if store.policy.gathers:
        budget = f"{result.budget:,} tokens" if result.budget is not None else "none"
        click.echo(
            f"budget: {budget}; pending removal: {result.pending_tokens:,} tokens; "
            f"removal events: {result.events:,}; sessions over budget: {result.over_budget}"
        )
        if result.over_budget:
            click.echo("warning: over budget: what may not be evicted exceeds the budget", err=True)


def _roles(text: str | None) -> frozenset[str] | None:
    return None if text is None else frozenset(r.strip() for r in text.split(",") if r.strip())


@_command(main)
@click.option("--budget", help="Tokens the prompt may hold ('none': no budget).")
@click.option("--clear-at-least", type=int, help="Tokens of removals gathered before an event.")
@click.option("--pinned-roles", help="Comma-separated roles the budget never evicts.")
@click.option("--restore", type=click.Choice(["transitive", "direct"]), help="How restoration follows references.")
@click.option("--dedupe-roles", help="Comma-separated roles whose repeated contents are duplicates.")
@click.option("--yes", is_flag=True, help="Change the policy without asking.")
def policy(
    ctx: click.Context,
    budget: str | None,
    clear_at_least: int | None,
    pinned_roles: str | None,
    restore: str | None,
    dedupe_roles: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    """Show the store's policy; with options, change it and rebuild every session under the new one."""
    changes: dict[str, Any] = {}
    if budget is not None:
        changes["budget"] = None if budget.lower() == "none" else _int_option("--budget", budget)
    if clear_at_least is not None:
        changes["clear_at_least"] = clear_at_least
    for name, value in (("pinned_roles", _roles(pinned_roles)), ("dedupe_roles", _roles(dedupe_roles))):
        if value is not None:
            changes[name] = value
    if restore is not None:
        changes["restore"] = restore
    with _open(ctx) as store:
        chosen = store.policy
        if changes:
            chosen = replace(store.policy, **changes)
            if chosen != store.policy:
                _confirm(f"Rebuild all {len(store.sessions())} sessions under the new policy?", yes)
                store.rebuild(policy=chosen)
    if as_json:
        _echo_json(json.loads(chosen.to_json()))
        return
    for name, value in json.loads(chosen.to_json()).items():
        click.echo(f"{name}: {value if value is not None else 'none'}")


def _int_option(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a whole number of tokens (or 'none')", param_hint=name) from None


@_command(main)
def sessions(ctx: click.Context, as_json: bool) -> None:
    """The session names."""
    with _open(ctx) as store:
        names = store.sessions()
    if as_json:
        _echo_json(names)
    else:
        for name in names:
            click.echo(_printable(name))


# -- schema --------------------------------------------------------------------


@main.group("db", context_settings=CONTEXT)
def db_group() -> None:
    """Manage the database schema (Alembic, no alembic.ini needed)."""


def _schema(ctx: click.Context, change: Callable | None, as_json: bool) -> None:
    engine = db.make_engine(ctx.find_root().obj)
    try:
        if change is not None:
            change(engine)
        with db.connection(engine, "read schema version") as conn:
            current = db.current_revision(conn)
    finally:
        engine.dispose()
    if as_json:
        _echo_json({"revision": current, "head": db.head_revision()})
    else:
        click.echo(f"at revision {current or 'base'} (newest: {db.head_revision()})")


@_command(db_group, "upgrade")
@click.argument("revision", default="head")
def db_upgrade(ctx: click.Context, revision: str, as_json: bool) -> None:
    """Upgrade the schema to REVISION (default: the newest)."""
    _schema(ctx, lambda engine: db.upgrade(engine, revision), as_json)


@_command(db_group, "downgrade")
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def db_downgrade(ctx: click.Context, revision: str, yes: bool, as_json: bool) -> None:
    """Downgrade the schema to REVISION (asks first: a downgrade drops what newer revisions keep).

    "base" removes every prunestore table, with every session in it.
    """
    if revision not in ("base", *db.revisions()):
        raise InvalidRevisionError(
            f"revision={revision!r}: no such revision (known: base, {', '.join(db.revisions())})"
        )
    what = "every prunestore table and all sessions" if revision == "base" else "what newer revisions store"
    _confirm(f"Downgrade {db.shown_url(ctx.find_root().obj)} to {revision}? This drops {what}.", yes)
    _schema(ctx, lambda engine: db.downgrade(engine, revision), as_json)


@_command(db_group, "analyze")
def db_analyze(ctx: click.Context, as_json: bool) -> None:
    """Refresh PostgreSQL's planner statistics of the prunestore tables (after bulk loads; a no-op on SQLite)."""
    engine = db.make_engine(ctx.find_root().obj)
    try:
        db.analyze(engine)
    finally:
        engine.dispose()
    analyzed = engine.dialect.name == "postgresql"
    if as_json:
        _echo_json({"analyzed": analyzed})
    else:
        click.echo("statistics refreshed" if analyzed else "nothing to do on SQLite")


@_command(db_group, "current")
def db_current(ctx: click.Context, as_json: bool) -> None:
    """Print the schema revision of the database and the newest one known."""
    _schema(ctx, None, as_json)


# -- the demo and the benchmark -----------------------------------------------


def _demo_budget(turns: int, budget: int, clear_at_least: int) -> None:
    from .demo import budget_run

    click.echo(f"\nagent-{turns} again, under Policy(budget={budget}, clear_at_least={clear_at_least}):", err=True)
    r = budget_run(turns, budget, clear_at_least)
    click.echo(
        f"  prompt at most {r.peak:,} tokens (mean {r.mean:,.0f}), {r.events} removal events; "
        f"facts in every turn's prompt: {r.facts_kept}/{r.facts}"
    )
    click.echo(
        f"  input cost with a prompt cache (read 0.1, write 1.25 a token): {r.cost / 1e6:.2f}M, "
        f"against {r.cost_everything / 1e6:.2f}M sending everything ({r.cost_everything / r.cost:.1f}x less)"
    )


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected numbers separated by commas") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"{text!r}: sizes must be positive")
    return sizes


@_command(main)
@click.option("--sizes", default="50,200,500,1000,2000", show_default=True, help="Conversation lengths in turns.")
@click.option("--seed", default=0, show_default=True, help="Seed of the workload generator.")
@click.option("--replace", is_flag=True, help="Overwrite the demo's sessions (chat-N, rag-N, agent-N) if they exist.")
@click.option("--budget", default=32000, show_default=True, help="Budget of the run in memory (0: skip it).")
@click.option("--clear-at-least", default=16000, show_default=True, help="Its clear_at_least.")
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
    from .demo import run_demo

    with _open(ctx) as store:
        url = db.shown_url(store.url)
        filled = run_demo(store, _sizes(sizes), seed=seed, replace=replace)
        if not as_json:
            click.echo(f"writing the demo's sessions into {url}", err=True)
        rows = []
        for row in filled:
            rows.append(row)
            if not as_json:
                click.echo(f"  {row.session}: {row.messages} messages, {row.reduction:.1%} of tokens pruned", err=True)
        last = rows[-1].session
        verdicts = {m.verdict: m.id for m in reversed(store.messages(last))}
        example = verdicts.get("restored") or verdicts.get("superseded") or verdicts["kept"]
    if as_json:
        _echo_json([asdict(r) | {"reduction": r.reduction} for r in rows])
        return
    click.echo()
    _table(
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
        f"  prunestore live {last}\n  prunestore explain {last} {example}"
    )


@_command(main)
@click.option("--turns", default="50,200,500,1000,2000", show_default=True, help="Conversation lengths to measure at.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Draw cost per turn to a PNG file.")
def bench(ctx: click.Context, turns: str, plot: Path | None, as_json: bool) -> None:
    """Per-turn cost: incremental append against rerunning a batch prune (with and without a SQL read).

    The append is shown alone, with a client's prompt kept from its delta, and
    with the whole prompt read back. It runs on temporary databases, not on --db.
    """
    from .bench import compare_per_turn, draw, plotting

    if plot:
        plotting()  # before the run, so a missing matplotlib does not cost the whole benchmark
    result = compare_per_turn(_sizes(turns))
    if as_json:
        _echo_json(result)
    else:
        _table(
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


if __name__ == "__main__":
    main()
