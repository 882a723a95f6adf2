"""The pages of ``prunestore serve``, each reading only what it shows.

- ``/``: the sessions, a page of names at a time, with counts read from the
  session rows (`PruneStore.summaries`);
- ``/session?session=``: a window of the session as the model sees it, pruned
  messages folded in place with their verdict and cause (`PruneStore.window`);
- ``/message?session=&id=``: why one message has its verdict, with links
  (`PruneStore.entry`);
- ``/erasures?session=``: the receipts of the session's erasures, each with
  the messages it erased and the verdicts it moved (`PruneStore.erasures`);
- ``/chart?session=``: the prompt's tokens per turn before and after pruning
  (`PruneStore.history`), with the budget and the removal events;
- ``/prompt?session=&format=&placeholders=1``: the prompt as sent, exactly
  what `PruneStore.render` gives, with the calls it leaves out and why, from
  what render reads (`PruneStore.prompt_messages`).

Names and ids travel as query parameters, so ``/``, ``?``, ``#`` and ``%``
in them are ordinary characters. Only GET exists. Text is escaped by the
templates, control characters are shown as symbols, and the pages carry a
Content-Security-Policy that allows no script at all. Only requests naming
an allowed host are answered (by default this machine's names), so a web
page the operator visits cannot reach the view through a name of its own
that resolves here (DNS rebinding). A request the store refuses is a 400,
a database that fails is a 503, each a page with the same headers.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timezone
from itertools import groupby
from typing import Any, cast
from urllib.parse import quote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from ..catalog import MOST
from ..errors import DatabaseError, MessageNotFoundError, PruneStoreError, SessionNotFoundError
from ..formats import FORMATS, Format
from ..formats.plan import item_of
from ..model import ERASED, LIVE_VERDICTS, ROLES, VERDICTS
from ..results import Entry, SessionSummary
from ..sql import db
from ..store import PruneStore
from .chart import cost_chart, tokens_chart
from .prompt import CallMark, call_marks, format_of, prompt_page

PAGE_SIZE = 50  # sessions per page
WINDOW = 100  # messages per window of a session
PROMPT_WINDOW = 500  # messages per window of the prompt as sent: a long agent run's, whole
ROW_CHARS = 2_000  # of a message's text in a session's window
MESSAGE_CHARS = 65_536  # on a message's page; the whole text is at /content

_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# Other errors the store raises on purpose are about the request: 400.
_STATUS = {SessionNotFoundError: 404, MessageNotFoundError: 404, DatabaseError: 503}
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# C0 controls and DEL as their visible symbols (U+2400 on), so NUL and friends show. Text keeps
# its tabs and line breaks; names, ids and keys show every control, so no two look alike.
_CONTROLS = {code: 0x2400 + code for code in range(0x20)} | {0x7F: 0x2421}
_TEXT_CONTROLS = {code: symbol for code, symbol in _CONTROLS.items() if code not in (0x09, 0x0A)}


def shown(text: str) -> str:
    return text.translate(_TEXT_CONTROLS)


def label(text: str) -> str:
    return text.translate(_CONTROLS)


def _url(path: str, **params: object) -> str:
    query = urlencode({k: v for k, v in params.items() if v not in (None, "", False)}, quote_via=quote)
    return f"{path}?{query}" if query else path


def _when(at: int | datetime | None) -> str:
    """A time as the pages show it, in UTC: a stored one in seconds (0: never) or a datetime."""
    if isinstance(at, int):
        at = datetime.fromtimestamp(at, timezone.utc) if at else None
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if at else "—"


def _window_start(seq: int, size: int = WINDOW) -> int:
    """The `after` of the window of `size` holding `seq` (counted from 1; 0 is the first window's)."""
    return (max(seq, 1) - 1) // size * size


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("prunestore.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(
        shown=shown,
        label=label,
        when=_when,
        pretty=lambda value: json.dumps(value, indent=2, ensure_ascii=False),
        count_by=lambda values: sorted(Counter(values).items(), key=lambda item: -item[1]),
    )
    env.globals.update(url=_url, window_start=_window_start, live_verdicts=LIVE_VERDICTS, row_chars=ROW_CHARS)
    return env


FOLDED_RUN = 3  # pruned messages in a row that a window folds into one line
# The sessions page's orders (`PruneStore.summaries`), each with its column's heading.
SORTS = {
    "name": "Session",
    "messages": "Messages",
    "tokens": "Tokens",
    "live_tokens": "In the prompt",
    "updated_at": "Last write",
}
_ONLY = {"prompt": LIVE_VERDICTS, "pruned": tuple(v for v in VERDICTS if v not in LIVE_VERDICTS)}


def _filter(chosen: dict[str, str | None]) -> dict[str, Any]:
    """`PruneStore.window`'s filter from the page's `only`, `role` and `q` parameters."""
    only: dict[str, Any] = {}
    if chosen["only"]:
        if chosen["only"] not in _ONLY:
            raise HTTPException(400, f"only={chosen['only'][:30]!r}: must be prompt or pruned")
        only["verdicts"] = _ONLY[chosen["only"]]
    if chosen["role"]:
        only["roles"] = (chosen["role"],)
    if chosen["q"]:
        only["contains"] = chosen["q"]
    return only


def _marks(store: PruneStore, name: str, entries: Sequence[Entry], only: dict) -> dict[int, tuple[CallMark, ...]]:
    """Which calls of the window's messages the prompt as sent keeps, reading up to a window more for results.

    None on a filtered page: its messages are not consecutive, so the results between them were not read.
    """
    messages = [e.message for e in entries]
    if only or not messages or not any(item_of(m).calls for m in messages):
        return {}
    following = store.window(name, after=messages[-1].seq, limit=WINDOW, text_chars=0)
    at_end = len(following.entries) < WINDOW
    return call_marks(messages, [e.message for e in following.entries], at_end)


def _found(store: PruneStore, name: str, goto: str) -> str:
    """The address of the window holding the message `goto` names: its id, ``#seq``, or a turn (a number)."""
    seq = None
    try:
        seq = store.entry(name, goto).message.seq
    except MessageNotFoundError:
        if goto.startswith("#") and goto[1:].isdigit() and len(goto) < 20:
            seq = int(goto[1:])
        elif goto.isascii() and goto.isdigit() and len(goto) < 20:
            first = store.window(name, limit=1, from_turn=int(goto)).entries
            seq = first[0].message.seq if first else None
    except PruneStoreError:  # not an id at all (too long, NUL): perhaps a turn; otherwise nothing matches
        pass
    if seq is None:
        raise HTTPException(404, f"goto={goto[:60]!r}: no message has this id, and no turn this number")
    return _url("/session", session=name, after=_window_start(seq)) + f"#m{seq}"


def folded_runs(entries: Sequence[Entry], live: Collection[str]) -> list[tuple[bool, list[Entry]]]:
    """The entries in runs: each run of at least `FOLDED_RUN` pruned ones folded (True), the rest as they come."""
    runs: list[tuple[bool, list[Entry]]] = []
    for pruned, group in groupby(entries, key=lambda e: e.message.verdict not in live):
        items = list(group)
        folded = pruned and len(items) >= FOLDED_RUN
        if runs and not folded and not runs[-1][0]:
            runs[-1][1].extend(items)
        else:
            runs.append((folded, items))
    return runs


def _text(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise HTTPException(400, f"{name}: missing")
    return value


def _count(request: Request, name: str, default: int = 0) -> int:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    if not value.isascii() or not value.isdigit() or len(value) > 19 or int(value) > MOST:
        raise HTTPException(400, f"{name}={value[:30]!r}: must be a whole number from 0 to 2**62")
    return int(value)


def host_name(header: str) -> str:
    """The name in a Host header, without its port: ``[::1]:8000`` is ``::1``."""
    if header.startswith("["):
        return header[1:].partition("]")[0].lower()
    return header.rpartition(":")[0].lower() if header.count(":") == 1 else header.lower()


class _AllowedHosts:
    """Answer only requests whose Host header names one of `hosts` (any port); others get a 400."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if host_name(header) not in self.hosts:
                shown = header[:60] or "(none)"
                response = PlainTextResponse(
                    f"Host {shown!r} is not served here: see prunestore serve --allow-host", 400
                )
                response.headers.update(_HEADERS)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(store: PruneStore, *, allowed_hosts: Iterable[str] | None = LOOPBACK_HOSTS) -> Starlette:
    """The read-only web view of `store`, as an ASGI application (run it with uvicorn, or `prunestore serve`).

    Only requests whose Host header names one of `allowed_hosts` are answered
    (by default this machine's names); None answers every host.
    """
    templates = Jinja2Templates(env=_environment())

    def page(request: Request, template: str, code: int = 200, **context: object) -> Response:
        response = templates.TemplateResponse(
            request, template, {"store_url": db.shown_url(store.url), **context}, code
        )
        response.headers.update(_HEADERS)
        return response

    def sessions(request: Request) -> Response:
        prefix = request.query_params.get("prefix") or None
        after = request.query_params.get("after") or None
        order = request.query_params.get("sort") or "name"
        if order not in SORTS:
            raise HTTPException(400, f"sort={order[:30]!r}: must be one of {', '.join(SORTS)}")
        last: str | SessionSummary | None = after
        if order != "name" and after is not None:  # the previous page's last row, as its link names it
            counts: dict[str, Any] = dict.fromkeys(
                ("messages", "tokens", "live_tokens", "current_turn", "events", "created_at"), 0
            )
            last = SessionSummary(after, **{**counts, "updated_at": 0, order: _count(request, "value")})
        rows = store.summaries(prefix, limit=PAGE_SIZE + 1, after=last, order=order)  # one more: a next page?
        rows, more = rows[:PAGE_SIZE], rows[PAGE_SIZE - 1] if len(rows) > PAGE_SIZE else None
        more_value = getattr(more, order) if more is not None and order != "name" else None
        count = store.session_count(prefix)
        return page(
            request,
            "sessions.html",
            rows=rows,
            prefix=prefix or "",
            after=after,
            more=more,
            more_value=more_value,
            order=order,
            sorts=SORTS,
            count=count,
            prices=store.policy.prices,
        )

    def session(request: Request) -> Response:
        name = _text(request, "session" if "session" in request.query_params else "name")  # name=: older links
        goto = request.query_params.get("goto", "").strip()
        if goto:
            return RedirectResponse(_found(store, name, goto), 303, headers=_HEADERS)
        after, everything = _count(request, "after"), request.query_params.get("show") == "all"
        chosen = {key: request.query_params.get(key) or None for key in ("only", "role", "q")}
        only = _filter(chosen)
        window = store.window(name, after=after, limit=WINDOW, text_chars=ROW_CHARS, **only)
        summary = window.session
        runs = folded_runs(window.entries, LIVE_VERDICTS) if not only else [(False, list(window.entries))]
        marks = _marks(store, name, window.entries, only)
        more = window.entries[-1].message.seq if only and len(window.entries) == WINDOW else None
        return page(
            request,
            "session.html",
            summary=summary,
            entries=window.entries,
            runs=runs,
            after=after,
            everything=everything,
            window=WINDOW,
            chosen=chosen,
            filtering=bool(only),
            more=more,
            roles=sorted(ROLES),
            marks=marks,
            prices=store.policy.prices,
            erasures=window.erasures,
        )

    def message(request: Request) -> Response:
        name, message_id = _text(request, "session"), _text(request, "id")
        read = store.entry(name, message_id)
        receipt = None
        if read.message.verdict == ERASED:  # the latest receipt naming it, if one was kept
            numbered = reversed(list(enumerate(store.erasures(name), 1)))
            receipt = next(((n, r) for n, r in numbered if message_id in r.erased), None)
        return page(
            request,
            "message.html",
            session=name,
            m=read.message,
            why=read.explanation,
            limit=MESSAGE_CHARS,
            receipt=receipt,
        )

    def erasures(request: Request) -> Response:
        name = _text(request, "session")
        return page(request, "erasures.html", session=name, receipts=store.erasures(name))

    def content(request: Request) -> Response:
        name, message_id = _text(request, "session"), _text(request, "id")
        (stored,) = store.messages(name, ids=[message_id])
        return PlainTextResponse(stored.content, headers=_HEADERS)

    def prompt(request: Request) -> Response:
        name = _text(request, "session")
        source = store.prompt_messages(name)  # what render reads: the prompt, and the calls tied to it
        chosen = request.query_params.get("format") or format_of(source.messages)
        if chosen not in FORMATS:
            raise HTTPException(400, f"format={chosen[:30]!r}: must be one of {', '.join(FORMATS)}")
        placeholders = request.query_params.get("placeholders") == "1"
        size = (source.stored, source.tokens)
        laid_out = prompt_page(source.messages, cast(Format, chosen), placeholders, size)  # a format checked above
        after, everything = _count(request, "after"), request.query_params.get("show") == "all"
        sent = laid_out.blocks if chosen == "text" else laid_out.messages  # a block per message in the text format
        shown = sent if everything else sent[after : after + PROMPT_WINDOW]
        return page(
            request,
            "prompt.html",
            name=name,
            prompt=laid_out,
            placeholders=placeholders,
            formats=FORMATS,
            shown=shown,
            total=len(sent),
            after=0 if everything else after,
            everything=everything,
            window=PROMPT_WINDOW,
        )

    def chart(request: Request) -> Response:
        name = _text(request, "session")
        history = store.history(name)
        budgets = {generation: policy.budget for generation, policy in store.policies().items()}
        drawn = tokens_chart(history, store.policy.budget, budgets)
        costs = cost_chart(history)
        return page(request, "chart.html", name=name, chart=drawn, budget=store.policy.budget, costs=costs)

    def failed(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            status, detail = exc.status_code, str(exc.detail)
        elif isinstance(exc, PruneStoreError):
            status = next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)
            detail = str(exc)
        else:  # a defect: the page says so, and the server logs it
            status, detail = 500, "the page failed; the server's log has the details"
        return page(request, "error.html", status, status=status, detail=detail)

    app = Starlette(
        routes=[
            Route("/", sessions, methods=["GET"]),
            Route("/session", session, methods=["GET"]),
            Route("/message", message, methods=["GET"]),
            Route("/erasures", erasures, methods=["GET"]),
            Route("/content", content, methods=["GET"]),
            Route("/chart", chart, methods=["GET"]),
            Route("/prompt", prompt, methods=["GET"]),
        ],
        exception_handlers={HTTPException: failed, PruneStoreError: failed, Exception: failed},
    )
    if allowed_hosts is not None:
        app.add_middleware(_AllowedHosts, hosts=frozenset(host.lower().strip("[]") for host in allowed_hosts))
    return app
