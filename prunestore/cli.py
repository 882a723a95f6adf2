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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from . import __version__, db
from .errors import InvalidMessageError, PruneStoreError
from .jsonl import read_lines, to_json
from .model import StoredMessage
from .store import PruneStore

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _fail_cleanly(command: Callable) -> Callable:
    """Turn `PruneStoreError` into a one-line message and exit status 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except PruneStoreError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)

    return wrapper


def _json_option(command: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(command)


def _open(ctx: click.Context) -> PruneStore:
    return PruneStore(ctx.find_root().obj)


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Columns aligned to their widest cell; numbers to the right."""
    rows = [[("" if c is None else str(c)) for c in row] for row in rows]
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
    help="Database URL; default sqlite:///prunestore.db in the working directory.",
)
@click.version_option(__version__, "--version", prog_name="prunestore")
@click.pass_context
def main(ctx: click.Context, url: str | None) -> None:
    """prunestore: a persistent, incremental prompt-pruning store."""
    ctx.obj = db.resolve_url(url)


# -- writing -------------------------------------------------------------------


@main.command()
@click.argument("session")
@_json_option
@click.pass_context
@_fail_cleanly
def append(ctx: click.Context, session: str, as_json: bool) -> None:
    """Append the messages on standard input (JSON Lines) to SESSION, in one transaction."""
    messages = [m for _, m in read_lines(sys.stdin, session_field=False)]
    with _open(ctx) as store:
        delta = store.append(session, messages)
    if as_json:
        _echo_json({"appended": len(messages), **asdict(delta)})
    else:
        click.echo(f"{len(messages)} messages; live +{len(delta.live_added)} -{len(delta.live_removed)}")


@main.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--batch-size", default=2000, show_default=True, help="Lines per transaction (JSON Lines).")
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
@_json_option
@click.pass_context
@_fail_cleanly
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
    the files are. A transcript (--format openai: a JSON list of Chat
    Completions messages; --format anthropic: {"system": ..., "messages":
    [...]}) goes in as one session. Messages already stored are skipped, so
    re-running an interrupted import finishes it.
    """
    if format_ != "jsonl":
        if session is not None and len(files) > 1:
            raise click.UsageError("--session names one session: give one FILE")
        options = {"document_tools": set(document_tool), "keep_tools": set(keep_tool)}
        start = time.perf_counter()
        with _open(ctx) as store:
            count = 0
            for path in files:
                messages = _read_transcript(path, format_, options)
                store.append(session or path.stem, messages)
                count += len(messages)
        _report_import(count, len(files), time.perf_counter() - start, as_json)
        return
    from .importer import import_files

    total = sum(f.stat().st_size for f in files)
    show = sys.stderr.isatty() and not as_json
    start = time.perf_counter()
    progress = click.progressbar(length=total, label="importing", file=sys.stderr, hidden=not show)
    with _open(ctx) as store, progress as bar:
        imported = import_files(store, files, batch_size, bar.update)
    _report_import(imported.messages, imported.sessions, time.perf_counter() - start, as_json)


def _read_transcript(path: Path, format_: str, options: dict) -> list:
    from .formats import from_anthropic, from_openai

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidMessageError(f"{path}: not a JSON transcript ({type(exc).__name__}: {exc})") from None
    messages: Any = data.get("messages") if isinstance(data, dict) else data
    try:
        if format_ == "openai":
            return from_openai(messages, **options)
        return from_anthropic(messages, data.get("system") if isinstance(data, dict) else None, **options)
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{path}: {exc}") from None


def _report_import(count: int, sessions: int, elapsed: float, as_json: bool) -> None:
    summary = {
        "messages": count,
        "sessions": sessions,
        "seconds": round(elapsed, 3),
        "messages_per_second": round(count / elapsed) if elapsed else None,
    }
    if as_json:
        _echo_json(summary)
    else:
        click.echo(
            f"imported {count} messages in {sessions} sessions in {elapsed:.1f} s "
            f"({summary['messages_per_second']} messages/s)"
        )


@main.command()
@click.argument("session", required=False)
@click.option("--all", "everything", is_flag=True, help="Rebuild every session.")
@click.pass_context
@_fail_cleanly
def rebuild(ctx: click.Context, session: str | None, everything: bool) -> None:
    """Recompute the stored state of SESSION (or --all) from its messages."""
    if bool(session) == everything:
        raise click.UsageError("give a SESSION or --all")
    with _open(ctx) as store:
        store.rebuild(session)
    click.echo(f"rebuilt {session or 'every session'}")


@main.command()
@click.argument("session")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@_fail_cleanly
def delete(ctx: click.Context, session: str, yes: bool) -> None:
    """Delete SESSION and everything that belongs to it."""
    if not yes:
        click.confirm(f"Delete session {session!r} and all its messages?", abort=True)
    with _open(ctx) as store:
        store.delete_session(session)
    click.echo(f"deleted {session}")


@main.command()
@click.argument("session")
@click.argument("at_message_id")
@click.argument("new_session")
@click.pass_context
@_fail_cleanly
def fork(ctx: click.Context, session: str, at_message_id: str, new_session: str) -> None:
    """Start NEW_SESSION with the messages of SESSION up to and including AT_MESSAGE_ID."""
    with _open(ctx) as store:
        store.fork(session, at_message_id, new_session)
        live_count = len(store.live(new_session))
    click.echo(f"forked {session} at {at_message_id} into {new_session} ({live_count} live)")


@main.command()
@click.argument("session")
@click.argument("after_message_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_json_option
@click.pass_context
@_fail_cleanly
def truncate(ctx: click.Context, session: str, after_message_id: str, yes: bool, as_json: bool) -> None:
    """Drop the messages of SESSION after AFTER_MESSAGE_ID, restoring the state it had then."""
    if not yes:
        click.confirm(f"Drop every message of session {session!r} after {after_message_id!r}?", abort=True)
    with _open(ctx) as store:
        delta = store.truncate(session, after_message_id)
    if as_json:
        _echo_json(asdict(delta))
    else:
        click.echo(
            f"truncated {session} after {after_message_id}: "
            f"{len(delta.live_removed)} no longer live, {len(delta.live_added)} live again"
        )


# -- reading -------------------------------------------------------------------


@main.command()
@click.argument("session")
@click.option(
    "--format", "format_", type=click.Choice(["openai", "anthropic", "text"]), default="openai", show_default=True
)
@click.option("--placeholders", is_flag=True, help="Keep a pruned result's call, with a placeholder saying why.")
@click.pass_context
@_fail_cleanly
def render(ctx: click.Context, session: str, format_: str, placeholders: bool) -> None:
    """The live history of SESSION as a prompt the provider accepts (JSON; text for --format text).

    A one-line report of what rendering did goes to standard error.
    """
    with _open(ctx) as store:
        rendered = store.render(session, format_, dropped="placeholder" if placeholders else "omit")
    if format_ == "openai":
        _echo_json(rendered.messages)
    elif format_ == "anthropic":
        _echo_json({"system": rendered.system, "messages": rendered.messages})
    else:
        click.echo(rendered.text)
    r = rendered.report
    click.echo(
        f"{r.messages_out} messages from {r.messages_in}, {r.tokens_out:,} of {r.tokens_in:,} tokens, "
        f"{r.calls_removed} calls removed, {r.placeholders} placeholders",
        err=True,
    )


def _print_messages(messages: list[StoredMessage], as_json: bool) -> None:
    if as_json:
        _echo_json([to_json(m, seq=m.seq, verdict=m.verdict, base=m.base, tokens=m.tokens) for m in messages])
    else:
        _message_rows(messages)


@main.command()
@click.argument("session")
@_json_option
@click.pass_context
@_fail_cleanly
def live(ctx: click.Context, session: str, as_json: bool) -> None:
    """The live messages of SESSION: what goes into the next prompt."""
    with _open(ctx) as store:
        _print_messages(store.live(session), as_json)


@main.command()
@click.argument("session")
@click.option("--id", "ids", multiple=True, metavar="ID", help="Only the message with this id (repeatable).")
@_json_option
@click.pass_context
@_fail_cleanly
def messages(ctx: click.Context, session: str, ids: tuple[str, ...], as_json: bool) -> None:
    """Every message of SESSION with its verdict (or only those given with --id)."""
    with _open(ctx) as store:
        _print_messages(store.messages(session, ids=ids or None), as_json)


@main.command()
@click.argument("session")
@click.argument("message_id")
@_json_option
@click.pass_context
@_fail_cleanly
def explain(ctx: click.Context, session: str, message_id: str, as_json: bool) -> None:
    """Why MESSAGE_ID of SESSION has its verdict."""
    with _open(ctx) as store:
        why = store.explain(session, message_id)
    if as_json:
        _echo_json({**asdict(why), "live": why.live, "reason": why.reason})
    else:
        click.echo(f"{why.message_id} (seq {why.seq}): {why.verdict}")
        click.echo(f"  {why.reason}")


@main.command()
@click.argument("session", required=False)
@click.option("--all", "everything", is_flag=True, help="Verify every session (the default).")
@_json_option
@click.pass_context
@_fail_cleanly
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
            click.echo(str(mismatch))
        verdict = "ok" if report.ok else f"{len(report.mismatches)} mismatches"
        click.echo(f"{verdict}: {report.sessions} sessions, {report.messages} messages checked")
    if not report.ok:
        sys.exit(1)


@main.command()
@click.argument("session", required=False)
@_json_option
@click.pass_context
@_fail_cleanly
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


@main.command()
@_json_option
@click.pass_context
@_fail_cleanly
def sessions(ctx: click.Context, as_json: bool) -> None:
    """The session names."""
    with _open(ctx) as store:
        names = store.sessions()
    if as_json:
        _echo_json(names)
    else:
        for name in names:
            click.echo(name)


# -- schema --------------------------------------------------------------------


@main.group("db", context_settings=CONTEXT)
def db_group() -> None:
    """Manage the database schema (Alembic, no alembic.ini needed)."""


def _schema(ctx: click.Context, change: Callable | None) -> None:
    engine = db.make_engine(ctx.find_root().obj)
    try:
        if change is not None:
            change(engine)
        with db.connection(engine, "read schema version") as conn:
            click.echo(f"at revision {db.current_revision(conn) or 'base'} (newest: {db.head_revision()})")
    finally:
        engine.dispose()


@db_group.command("upgrade")
@click.argument("revision", default="head")
@click.pass_context
@_fail_cleanly
def db_upgrade(ctx: click.Context, revision: str) -> None:
    """Upgrade the schema to REVISION (default: the newest)."""
    _schema(ctx, lambda engine: db.upgrade(engine, revision))


@db_group.command("downgrade")
@click.argument("revision")
@click.pass_context
@_fail_cleanly
def db_downgrade(ctx: click.Context, revision: str) -> None:
    """Downgrade the schema to REVISION ("base" removes every prunestore table)."""
    _schema(ctx, lambda engine: db.downgrade(engine, revision))


@db_group.command("analyze")
@click.pass_context
@_fail_cleanly
def db_analyze(ctx: click.Context) -> None:
    """Refresh PostgreSQL's planner statistics of the prunestore tables (after bulk loads; a no-op on SQLite)."""
    engine = db.make_engine(ctx.find_root().obj)
    try:
        db.analyze(engine)
    finally:
        engine.dispose()
    click.echo("statistics refreshed" if engine.dialect.name == "postgresql" else "nothing to do on SQLite")


@db_group.command("current")
@click.pass_context
@_fail_cleanly
def db_current(ctx: click.Context) -> None:
    """Print the schema revision of the database and the newest one known."""
    _schema(ctx, None)


# -- the demo and the benchmark -----------------------------------------------


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected numbers separated by commas") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"{text!r}: sizes must be positive")
    return sizes


@main.command()
@click.option("--sizes", default="50,200,500,1000,2000", show_default=True, help="Conversation lengths in turns.")
@click.option("--seed", default=0, show_default=True, help="Seed of the workload generator.")
@_json_option
@click.pass_context
@_fail_cleanly
def demo(ctx: click.Context, sizes: str, seed: int, as_json: bool) -> None:
    """Fill the store with the chat, RAG and tool-agent workloads, turn by turn, and show what pruning did."""
    from .demo import run_demo

    with _open(ctx) as store:
        rows = []
        for row in run_demo(store, _sizes(sizes), seed=seed):
            rows.append(row)
            if not as_json:
                click.echo(f"  {row.session}: {row.messages} messages, {row.reduction:.1%} of tokens pruned", err=True)
        url = store.url
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
    click.echo(
        f"\nThe store is {url}. Explore it:\n  prunestore sessions\n  prunestore stats {last}\n"
        f"  prunestore live {last}\n  prunestore explain {last} {example}"
    )


@main.command()
@click.option("--turns", default="50,200,500,1000,2000", show_default=True, help="Conversation lengths to measure at.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Draw cost per turn to a PNG file.")
@_json_option
@click.pass_context
@_fail_cleanly
def bench(ctx: click.Context, turns: str, plot: Path | None, as_json: bool) -> None:
    """Per-turn cost: incremental append against rerunning a batch prune (with and without a SQL read).

    The append is shown alone, with a client's prompt kept from its delta, and
    with the whole prompt read back.
    """
    from .bench import compare_per_turn, draw

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
