"""What every command shares: the main group, --db and --json, one-line errors, tables and JSON."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any

import click

from .. import __version__
from ..errors import PruneStoreError, StoreNotFoundError
from ..model import StoredMessage
from ..prices import PRICES, Prices
from ..results import Erasure
from ..sql import db
from ..store import PruneStore

CONTEXT = {"help_option_names": ["-h", "--help"]}
# A number of days for --idle-days: a century at most (a timedelta's range is far wider, but not infinite).
DAYS = click.FloatRange(min=0, max=36500)


def fail_cleanly(command: Callable) -> Callable:
    """Turn `PruneStoreError` into a one-line message and exit status 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except PruneStoreError as exc:
            click.echo(f"Error: {printable(str(exc))}", err=True)
            sys.exit(2)

    return wrapper


def use_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:  # given after the command: it wins over the group's --db and PRUNESTORE_URL
        ctx.find_root().obj = db.resolve_url(value)


def command(group: click.Group, name: str | None = None, *, as_json: bool = True) -> Callable[[Callable], Callable]:
    """A command of `group` that takes ``--db`` after its name too, prints JSON with ``--json``, and fails cleanly."""

    def decorate(function: Callable) -> click.Command:
        function = click.pass_context(fail_cleanly(function))
        if as_json:
            function = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(function)
        function = click.option(
            "--db", metavar="URL", expose_value=False, callback=use_url, help="Database URL (as before the command)."
        )(function)
        return group.command(name)(function)

    return decorate


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, plural unless it is one: "1 message", "2,000 messages"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def confirm(question: str, yes: bool) -> None:
    """Ask on standard error (standard output may be JSON for a program); Ctrl-C or "no" changes nothing and
    exits with status 1, saying so in one line."""
    if yes:
        return
    try:
        agreed = click.confirm(question, err=True)
    except click.Abort:
        agreed = False
        click.echo("", err=True)
    if not agreed:
        click.echo("Nothing done: the answer was no.", err=True)
        sys.exit(1)


class OneLineUsage(click.ClickException):
    """A usage error (an unknown option, a value out of range) as one line, like every other error."""

    exit_code = 2


class Commands(click.Group):
    """The command group; its usage errors and its commands' print one line (``Error: ...``), not click's usage
    block."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None


def _one_line(exc: click.UsageError) -> click.ClickException:
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):  # no command: the help, as click shows it
        return exc
    command = exc.ctx.command_path if exc.ctx is not None else "prunestore"
    return OneLineUsage(f"{exc.format_message()} (see {command} --help)")


def open_store(ctx: click.Context, *, reading: bool = False) -> PruneStore:
    """The store of ``--db``; a command that only reads (`reading`) never creates one where there is none."""
    try:
        return PruneStore(ctx.find_root().obj, create=not reading)
    except StoreNotFoundError as exc:
        raise StoreNotFoundError(f"{exc} (commands that write create one; prunestore demo fills one)") from None


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def receipt_json(receipt: Erasure, *, just_made: bool = False) -> dict[str, Any]:
    """An erasure's receipt as JSON: its fields, the time in ISO 8601; `log_kept` for one `erase` just made
    (a kept receipt does not hold it)."""
    fields = {**asdict(receipt), "at": receipt.at.isoformat() if receipt.at else None}
    if not just_made:
        del fields["log_kept"]
    return fields


def echo_receipt(receipt: Erasure) -> None:
    """An erasure's receipt as lines: what it erased, each other verdict it moved, how the prompt moved."""
    when = f" at {receipt.at.isoformat(timespec='seconds')}" if receipt.at else ""
    erased = f"erased {len(receipt.erased)} message(s) of {receipt.session}{when}: {' '.join(receipt.erased)}"
    click.echo(printable(erased))
    if receipt.invalidated:
        stale = f"  and {len(receipt.invalidated)} summary(ies) made from them: {' '.join(receipt.invalidated)}"
        click.echo(printable(stale))
    for message_id, (was, now) in receipt.changed.items():
        click.echo(printable(f"  {message_id}: {was} -> {now}"))
    click.echo(f"  {len(receipt.live_removed)} no longer live, {len(receipt.live_added)} live again")
    if receipt.log_kept:
        click.echo(
            "  another connection was reading: the erased bytes stay in the store's -wal file until it finishes "
            "and a later checkpoint empties the file",
            err=True,
        )


# Control characters (NUL, ESC, ...) and the bidirectional overrides that could
# reorder what a terminal shows are printed as escapes.
UNPRINTABLE = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in [*range(0x20), *range(0x7F, 0xA0), 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
}


_TEXT_UNPRINTABLE = {code: shown for code, shown in UNPRINTABLE.items() if code not in (0x09, 0x0A)}


def printable(text: str) -> str:
    return text.translate(UNPRINTABLE)


def printable_text(text: str) -> str:
    """`printable`, keeping tabs and line breaks: for text shown as text (a rendered prompt)."""
    return text.translate(_TEXT_UNPRINTABLE)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Columns aligned to their widest cell; numbers to the right."""
    rows = [[("" if c is None else printable(str(c))) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(is_number(r[i]) for r in rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric, strict=True))

    click.echo(line(headers).rstrip())
    click.echo("  ".join("-" * w for w in widths))
    for row in rows:
        click.echo(line(row).rstrip())


def is_number(cell: str) -> bool:
    try:
        float(cell.rstrip("%x"))
    except ValueError:
        return False
    return True


def preview(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def message_rows(messages: list[StoredMessage]) -> None:
    table(
        ["seq", "id", "role", "turn", "tokens", "verdict", "content"],
        [(m.seq, m.id, m.role, m.turn, m.tokens, m.verdict, preview(m.content)) for m in messages],
    )


@click.group(cls=Commands, context_settings=CONTEXT)
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


def policy_changes(
    budget: str | None, cache_ttl: str | None = None, prices: str | None = None, **fields: Any
) -> dict[str, Any]:
    """The `Policy` fields the command's options give (None: not given), the three that take text parsed."""
    changes = {name: value for name, value in fields.items() if value is not None}
    for name, text, unit in (("budget", budget, "tokens"), ("cache_ttl", cache_ttl, "seconds")):
        if text is not None:
            changes[name] = _whole_or_none(text, name, unit)
    if prices is not None:
        changes["prices"] = None if prices.lower() == "none" else parse_prices(prices)
    return changes


PRICES_METAVAR = "NAME|READ,WRITE[,FRESH]"


def parse_prices(text: str) -> Prices:
    """The value of ``--prices``: a preset's name, or READ,WRITE[,FRESH] per token (the 5-minute ``ttl``)."""
    if text in PRICES:
        return PRICES[text]
    try:
        read, write, *fresh = (float(part) for part in text.split(","))
        if len(fresh) > 1:
            raise ValueError(text)
        return Prices(read=read, write=write, fresh=fresh[0] if fresh else 1.0)
    except (ValueError, PruneStoreError):
        raise click.BadParameter(
            f"{text!r}: one of {', '.join(PRICES)}, or READ,WRITE[,FRESH] per token, each at least 0",
            param_hint="--prices",
        ) from None


def prices_label(prices: Prices | None) -> str:
    """Prices as ``--prices`` takes them: a preset's name, or the numbers (and a ttl other than the preset's)."""
    if prices is None:
        return "none"
    named = [name for name, preset in PRICES.items() if preset == prices]
    if named:
        return named[0]
    label = f"{prices.read:g},{prices.write:g},{prices.fresh:g}"
    return label if prices.ttl == Prices().ttl else f"{label} (ttl {prices.ttl if prices.ttl else 'none'})"


def _whole_or_none(text: str, name: str, unit: str) -> int | None:
    """The value of ``--budget`` or ``--cache-ttl``: a whole number, at least 1, or 'none'."""
    if text.lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise click.BadParameter(
            f"{text!r}: a whole number of {unit}, at least 1, or 'none'", param_hint="--" + name.replace("_", "-")
        )
    return value
