"""``prunestore db``: the schema, by Alembic, with no alembic.ini."""

from __future__ import annotations

from collections.abc import Callable

import click

from ..errors import InvalidRevisionError
from ..sql import db, partitions, recall_index
from .common import CONTEXT, command, confirm, echo_json, main


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
        echo_json({"revision": current, "head": db.head_revision()})
    else:
        click.echo(f"at revision {current or 'base'} (newest: {db.head_revision()})")


@command(db_group, "upgrade")
@click.argument("revision", default="head")
def db_upgrade(ctx: click.Context, revision: str, as_json: bool) -> None:
    """Upgrade the schema to REVISION (default: the newest)."""
    _schema(ctx, lambda engine: db.upgrade(engine, revision), as_json)


@command(db_group, "downgrade")
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
    confirm(f"Downgrade {db.shown_url(ctx.find_root().obj)} to {revision}? This drops {what}.", yes)
    _schema(ctx, lambda engine: db.downgrade(engine, revision), as_json)


@command(db_group, "analyze")
def db_analyze(ctx: click.Context, as_json: bool) -> None:
    """Refresh PostgreSQL's planner statistics of the prunestore tables (after bulk loads; a no-op on SQLite)."""
    engine = db.make_engine(ctx.find_root().obj)
    try:
        db.analyze(engine)
    finally:
        engine.dispose()
    analyzed = engine.dialect.name == "postgresql"
    if as_json:
        echo_json({"analyzed": analyzed})
    else:
        click.echo("statistics refreshed" if analyzed else "nothing to do on SQLite")


@command(db_group, "partition")
@click.argument("count", type=click.IntRange(2, partitions.MAX_PARTITIONS))
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def db_partition(ctx: click.Context, count: int, yes: bool, as_json: bool) -> None:
    """Hash-partition the per-session tables into COUNT partitions by session id (PostgreSQL).

    Rewrites the tables in one transaction, keeping every row: sessions wait
    until it commits, so run it at creation or in a quiet hour. Run it again
    with another COUNT to repartition.
    """
    url = ctx.find_root().obj
    engine = db.make_engine(url)
    try:
        if engine.dialect.name == "postgresql":
            confirm(f"Partition the tables of {db.shown_url(url)} into {count}? Writers wait until it is done.", yes)
        partitions.partition(engine, count)
        with db.connection(engine, "read the partitions") as conn:
            now = partitions.partition_count(conn)
    finally:
        engine.dispose()
    if as_json:
        echo_json({"partitions": now})
    else:
        click.echo(f"{now} partitions per table")


@command(db_group, "recall-index")
@click.option("--drop", is_flag=True, help="Remove the index instead: recall then reads the session.")
@click.option("--status", is_flag=True, help="Only say whether the store has the index.")
def db_recall_index(ctx: click.Context, drop: bool, status: bool, as_json: bool) -> None:
    """Give the store an index of its messages' text, so recall by words need not read the session.

    SQLite: an FTS5 table of trigrams kept by triggers; PostgreSQL: indexes
    that need pg_trgm (installed here where it may be). Every store object
    open on the store uses it from then on. It costs appends and disk space
    (docs/operations.md, "The recall index").
    """
    if drop and status:
        raise click.UsageError("--drop and --status: give one of them")
    engine = db.make_engine(ctx.find_root().obj)
    try:
        if status:
            indexed, changed = recall_index.present_in(engine), False
        else:
            indexed, changed = not drop, (recall_index.drop if drop else recall_index.create)(engine)
    finally:
        engine.dispose()
    if as_json:
        echo_json({"recall_index": indexed, "changed": changed})
    else:
        state = "has a recall index" if indexed else "has no recall index"
        unchanged = "" if status else " (it already had)" if indexed else " (it had none)"
        click.echo(f"the store {state}" + ("" if changed else unchanged))


@command(db_group, "current")
def db_current(ctx: click.Context, as_json: bool) -> None:
    """Print the schema revision of the database and the newest one known."""
    _schema(ctx, None, as_json)
