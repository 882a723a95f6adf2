"""``prunestore serve``: the read-only web view (the ``web`` extra)."""

from __future__ import annotations

import ipaddress

import click

from .. import db
from ..store import PruneStore
from .common import command, echo_json, main


def is_loopback(host: str) -> bool:
    """Whether `host` only takes connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@command(main)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
def serve(ctx: click.Context, host: str, port: int, as_json: bool) -> None:
    """A read-only web view of the store's sessions, at http://HOST:PORT/.

    Pages list the sessions, show one as the model sees it (pruned messages
    folded in place, with why), explain a message, and chart the prompt's
    tokens per turn. Nothing can be written through it, and it asks for no
    login: it listens on this machine only unless --host says otherwise.
    Needs the web extra: pip install 'prunestore[web]'. With --json, the
    store and the address are printed as one JSON object before serving.
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
    address = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    if as_json:
        echo_json({"store": db.shown_url(store.url), "address": address, "read_only": True})
    else:
        click.echo(f"prunestore: {db.shown_url(store.url)}, read-only, at {address} (Ctrl-C stops)", err=True)
    try:
        uvicorn.run(create_app(store), host=host, port=port, log_level="warning")
    finally:
        store.close()
