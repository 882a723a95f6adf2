"""``prunestore serve``: the read-only web view (the ``web`` extra)."""

from __future__ import annotations

import ipaddress

import click

from .. import db
from ..store import PruneStore
from .common import command, main


def is_loopback(host: str) -> bool:
    """Whether `host` only takes connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@command(main, as_json=False)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
def serve(ctx: click.Context, host: str, port: int) -> None:
    """A read-only web view of the store's sessions, at http://HOST:PORT/.

    Pages list the sessions, show one as the model sees it (pruned messages
    folded in place, with why), explain a message, and chart the prompt's
    tokens per turn. Nothing can be written through it, and it asks for no
    login: it listens on this machine only unless --host says otherwise.
    Needs the web extra: pip install 'prunestore[web]'.
    """
    try:
        import uvicorn

        from ..web import create_app
    except ImportError as exc:
        raise click.ClickException(
            f"prunestore serve needs the web extra ({exc.name} is missing): pip install 'prunestore[web]'"
        ) from exc
    store = PruneStore(ctx.find_root().obj)
    if not is_loopback(host):
        click.secho(
            f"WARNING: listening on {host}, not on this machine only: anyone who can reach port {port} "
            "can read every session in this store, and there is no login.",
            fg="red",
            bold=True,
            err=True,
        )
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"prunestore: {db.shown_url(store.url)}, read-only, at http://{shown}:{port}/ (Ctrl-C stops)", err=True)
    try:
        uvicorn.run(create_app(store), host=host, port=port, log_level="warning")
    finally:
        store.close()
