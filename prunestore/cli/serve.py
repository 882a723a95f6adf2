"""``prunestore serve``: the read-only web view (the ``web`` extra)."""

from __future__ import annotations

import ipaddress
import socket

import click

from ..errors import PruneStoreError
from ..sql import db
from .common import command, echo_json, main, open_store


def check_port(host: str, port: int) -> None:
    """Refuse, before saying anything else, an address this process cannot listen on (a port in use)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise PruneStoreError(f"host={host!r}: cannot listen there ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will
        try:
            probe.bind(address)
        except OSError as exc:
            raise PruneStoreError(f"port={port}: cannot listen on {host}:{port} ({exc.strerror})") from None


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
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer requests for this host name (repeatable); by default only this machine's names "
    "when listening on it, and any name otherwise.",
)
def serve(ctx: click.Context, host: str, port: int, allow_hosts: tuple[str, ...], as_json: bool) -> None:
    """A read-only web view of the store's sessions, at http://HOST:PORT/.

    Pages list the sessions, show one as the model sees it (pruned messages
    folded in place, with why), explain a message, and chart the prompt's
    tokens per turn. Nothing can be written through it, and it asks for no
    login: it listens on this machine only unless --host says otherwise.
    Needs the web extra: pip install '.[web]'. With --json, the
    store and the address are printed as one JSON object before serving.

    Listening on this machine, it answers only requests for localhost,
    127.0.0.1 and ::1 (and the --allow-host names), so a web page in the
    operator's browser cannot read it through a name of its own (DNS
    rebinding).
    """
    try:
        import uvicorn

        from ..web import create_app
        from ..web.app import LOOPBACK_HOSTS
    except ImportError as exc:
        raise PruneStoreError(
            f"prunestore serve needs the web extra ({exc.name} is missing): "
            "python -m pip install '.[web]' in prunestore's folder"
        ) from exc
    check_port(host, port)
    store = open_store(ctx, reading=True)
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
        loopback = is_loopback(host)
        allowed = [*LOOPBACK_HOSTS, *allow_hosts] if loopback else (list(allow_hosts) or None)
        if allowed is not None and not loopback:
            allowed.append(host)
        uvicorn.run(create_app(store, allowed_hosts=allowed), host=host, port=port, log_level="warning")
    finally:
        store.close()
