"""The ``prunestore`` command: a thin layer over the library.

Every command opens what it needs, makes one call and prints the result;
`PruneStoreError`s become a one-line message and exit status 2.
"""

from __future__ import annotations

import functools

import click

from . import __version__, db
from .errors import PruneStoreError

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _errors_as_exit_2(command):
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except PruneStoreError as exc:
            click.echo(f"Error: {exc}", err=True)
            raise SystemExit(2) from None

    return wrapper


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


@main.group("db", context_settings=CONTEXT)
def db_group() -> None:
    """Manage the database schema (Alembic, no alembic.ini needed)."""


def _engine(ctx: click.Context):
    return db.make_engine(ctx.find_root().obj)


@db_group.command("upgrade")
@click.argument("revision", default="head")
@click.pass_context
@_errors_as_exit_2
def db_upgrade(ctx: click.Context, revision: str) -> None:
    """Upgrade the schema to REVISION (default: the newest)."""
    engine = _engine(ctx)
    try:
        db.upgrade(engine, revision)
        with db.connection(engine, "read schema version") as conn:
            click.echo(f"at revision {db.current_revision(conn)}")
    finally:
        engine.dispose()


@db_group.command("downgrade")
@click.argument("revision")
@click.pass_context
@_errors_as_exit_2
def db_downgrade(ctx: click.Context, revision: str) -> None:
    """Downgrade the schema to REVISION ("base" removes every prunestore table)."""
    engine = _engine(ctx)
    try:
        db.downgrade(engine, revision)
        with db.connection(engine, "read schema version") as conn:
            click.echo(f"at revision {db.current_revision(conn) or 'base'}")
    finally:
        engine.dispose()


@db_group.command("current")
@click.pass_context
@_errors_as_exit_2
def db_current(ctx: click.Context) -> None:
    """Print the schema revision of the database and the newest one known."""
    engine = _engine(ctx)
    try:
        with db.connection(engine, "read schema version") as conn:
            current = db.current_revision(conn)
        click.echo(f"current: {current or 'base (empty)'}\nhead:    {db.head_revision()}")
    finally:
        engine.dispose()
