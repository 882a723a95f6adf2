"""`AsyncPruneStore`: the store's calls as coroutines.

There is one implementation of the store: `PruneStore`'s own code runs for
every call, so every cascade, lock and retry is the same code the blocking
store runs, and while one call waits on the database the event loop runs
other tasks.

- PostgreSQL: on SQLAlchemy's asyncio engine, whose psycopg adapter suspends
  on the event loop from inside a greenlet (`greenlet_spawn`). Connections
  belong to an event loop, so each loop that uses the store gets its engine.
- SQLite: in a worker thread, on the blocking engine. SQLite does its I/O on
  the calling thread; an asyncio driver (aiosqlite) would hop to a thread of
  its own for every statement, where this hops once per call (an append is
  about ten statements: an Agents SDK turn on 100 items took 7.6 ms through
  aiosqlite and 2.1 ms this way).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from .appending import DEFAULT_MAX_CONTENT_BYTES, DEFAULT_MAX_METADATA_BYTES, Options
from .formats import Dropped, Format, Rendered
from .livecache import DEFAULT_LIVE_CACHE_BYTES, LiveCache, check_cache_bytes
from .model import Message, Role, StoredMessage
from .policy import Policy
from .prices import Prices
from .results import (
    Delta,
    Entry,
    Erasure,
    Explanation,
    GcReport,
    HistoryPoint,
    PromptSource,
    SessionSummary,
    Stats,
    Summarized,
    VerifyReport,
    Window,
)
from .sql import db
from .sql.sessions import SessionState
from .sql.settings import chosen_tokenizer
from .store import PruneStore
from .summarizing import Summarizer, Summarizing
from .views import Form, Prompt
from .whatif import WhatIf

__all__ = ["AsyncPruneStore"]


class AsyncPruneStore:
    """`PruneStore` for asyncio code: the same calls, awaited.

    On PostgreSQL it needs the ``asyncio`` extra (``pip install
    '.[asyncio]'`` from prunestore's folder). The database is opened on first use (or by
    ``await store.open()`` / ``async with AsyncPruneStore(...) as store``);
    close it with ``await store.close()``. Any number of event loops may use
    one store at once; they share its cache of live lists.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        policy: Policy | None = None,
        tokenizer: Callable[[str], int] | str | None = None,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        live_cache_bytes: int = DEFAULT_LIVE_CACHE_BYTES,
    ) -> None:
        check_cache_bytes(live_cache_bytes)
        self.url = db.resolve_url(url)
        self._threaded = self.url.startswith("sqlite")
        # An in-memory SQLite database is one connection's: every call runs on one thread, the same each time.
        self._executor = ThreadPoolExecutor(1, "prunestore") if self._threaded and db.in_memory(self.url) else None
        # SQLite: the blocking engine, used from worker threads. PostgreSQL: the first loop's; others make theirs.
        self.engine: Any = db.make_engine(self.url) if self._threaded else db.make_async_engine(self.url)
        self._policy = policy
        self._options = Options(chosen_tokenizer(tokenizer), max_content_bytes, max_metadata_bytes)
        self._cache = LiveCache(live_cache_bytes)
        self._unused: Any = None if self._threaded else self.engine
        self._loops: dict[Any, tuple[Any, PruneStore]] = {}  # event loop (None: threads) -> (engine, store)
        self._opening: dict[Any, asyncio.Lock] = {}  # PostgreSQL: one lock per event loop
        self._guard = threading.Lock()
        self._opening_lock = threading.Lock()  # SQLite: opening happens in a worker thread, under this lock

    async def open(self) -> AsyncPruneStore:
        """Create or migrate the schema and settle the policy (once; later calls return at once)."""
        await self._here()
        return self

    async def _here(self) -> PruneStore:
        """The store for this event loop (SQLite: for every loop), opened on first use."""
        loop = None if self._threaded else asyncio.get_running_loop()
        opened = self._loops.get(loop)
        if opened is not None:
            return opened[1]
        if self._threaded:  # loops of other threads may be opening it too: wait for them in a worker thread
            return await self._in_thread(self._open_threaded)
        with self._guard:
            opening = self._opening.setdefault(loop, asyncio.Lock())  # this loop's alone
        async with opening:
            if loop not in self._loops:
                opened = await self._open_in_loop()
                with self._guard:
                    self._loops[loop] = opened
            return self._loops[loop][1]

    def _open_threaded(self) -> PruneStore:
        """Open the store once, whichever thread asks first; the others wait for it."""
        with self._opening_lock:
            if None not in self._loops:
                store = PruneStore._over(self.engine, self.url, self._policy, self._options, self._cache)
                self._loops[None] = (self.engine, store)
            return self._loops[None][1]

    async def _in_thread(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _open_in_loop(self) -> tuple[Any, PruneStore]:
        with self._guard:
            self._forget_closed_loops()
            engine, self._unused = self._unused or db.make_async_engine(self.url), None
        try:
            store = await _in_greenlet(
                PruneStore._over, engine.sync_engine, self.url, self._policy, self._options, self._cache
            )
        except BaseException:
            await engine.dispose()
            raise
        return engine, store

    def _forget_closed_loops(self) -> None:
        """Let go of the engines of event loops that have closed (their connections cannot be closed any more)."""
        for loop in [loop for loop in self._loops if loop is not None and loop.is_closed()]:
            engine, _ = self._loops.pop(loop)
            self._opening.pop(loop, None)
            engine.sync_engine.dispose(close=False)

    def _opened(self) -> PruneStore:
        for _, store in list(self._loops.values()):
            return store
        raise RuntimeError("the store is not open yet: await store.open() first")

    @property
    def policy(self) -> Policy:
        """The store's policy, as of the last call of this event loop's store (a change elsewhere shows on the next)."""
        return self._opened().policy

    @property
    def tokenizer(self) -> Callable[[str], int]:
        return self._opened().tokenizer

    @property
    def tokenizer_name(self) -> str:
        return self._opened().tokenizer_name

    async def close(self) -> None:
        """Close the connections (PostgreSQL: this event loop's; the other loops' engines are let go)."""
        if self._threaded:
            await self._in_thread(self.engine.dispose)
            with self._guard:
                self._loops.clear()
                self._opening.clear()
            return
        loop = asyncio.get_running_loop()
        with self._guard:
            mine = self._loops.pop(loop, None)
            others = list(self._loops.values())
            self._loops.clear()
            self._opening.clear()
            unused, self._unused = self._unused, None
        for engine in ([mine[0]] if mine else []) + ([unused] if unused else []):
            await engine.dispose()
        for engine, _ in others:
            engine.sync_engine.dispose(close=False)

    async def __aenter__(self) -> AsyncPruneStore:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncPruneStore({self.engine.url.render_as_string(hide_password=True)!r})"

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        store = await self._here()
        if self._threaded:
            return await self._in_thread(method, store, *args, **kwargs)
        return await _in_greenlet(method, store, *args, **kwargs)

    # -- the calls of PruneStore, awaited ------------------------------------

    async def append(self, session: str, messages: Message | Iterable[Message]) -> Delta:
        return await self._call(PruneStore.append, session, messages)

    async def append_many(self, batches: Mapping[str, Message | Iterable[Message]]) -> dict[str, Delta]:
        return await self._call(PruneStore.append_many, batches)

    async def rebuild(
        self,
        session: str | None = None,
        *,
        policy: Policy | None = None,
        tokenizer: Callable[[str], int] | str | None = None,
    ) -> None:
        await self._call(PruneStore.rebuild, session, policy=policy, tokenizer=tokenizer)

    async def delete_session(self, session: str) -> None:
        await self._call(PruneStore.delete_session, session)

    async def truncate(self, session: str, after_message_id: str) -> Delta:
        return await self._call(PruneStore.truncate, session, after_message_id)

    async def erase(self, session: str, ids: str | Iterable[str]) -> Erasure:
        return await self._call(PruneStore.erase, session, ids)

    async def fork(self, session: str, at_message_id: str, new_session: str) -> None:
        await self._call(PruneStore.fork, session, at_message_id, new_session)

    async def live(self, session: str) -> list[StoredMessage]:
        return await self._call(PruneStore.live, session)

    async def view(self, session: str, form: Form) -> Prompt:
        return await self._call(PruneStore.view, session, form)

    async def append_with(self, session: str, build: Callable[[SessionState], Message | Iterable[Message]]) -> Delta:
        return await self._call(PruneStore.append_with, session, build)

    async def pop(self, session: str) -> StoredMessage | None:
        return await self._call(PruneStore.pop, session)

    async def messages(self, session: str, ids: Iterable[str] | None = None) -> list[StoredMessage]:
        return await self._call(PruneStore.messages, session, ids)

    async def recall(
        self,
        session: str,
        *,
        key: str | None = None,
        text: str | None = None,
        first: str | None = None,
        last: str | None = None,
        limit: int = 10,
    ) -> list[StoredMessage]:
        return await self._call(PruneStore.recall, session, key=key, text=text, first=first, last=last, limit=limit)

    async def unsummarized(self, session: str) -> list[list[StoredMessage]]:
        return await self._call(PruneStore.unsummarized, session)

    async def summarize(self, session: str, summarizer: Summarizer, *, role: Role = "user") -> Summarized:
        """`PruneStore.summarize`, whose summarizer may be async: what it returns is awaited when it can be."""
        job = Summarizing(session, role, summarizer)
        for span in await self.unsummarized(session):
            text = job.text(span)
            if inspect.isawaitable(text):
                try:
                    text = await text
                except Exception as exc:  # the caller's function: its failure leaves the span as it is
                    job.fail(span, exc)
                    continue
            summary = job.summary(span, text)
            if summary is not None:
                try:
                    await self.append_with(session, summary)
                except Summarizing.REFUSED as exc:
                    job.appended(span, summary, exc)
                else:
                    job.appended(span, summary, None)
        return job.result()

    async def render(self, session: str, format: Format = "openai", *, dropped: Dropped = "omit") -> Rendered:
        return await self._call(PruneStore.render, session, format, dropped=dropped)

    async def sessions(
        self,
        prefix: str | None = None,
        *,
        idle_for: timedelta | float | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[str]:
        return await self._call(PruneStore.sessions, prefix, idle_for=idle_for, limit=limit, after=after)

    async def gc(self, idle_for: timedelta | float, *, dry_run: bool = False, batch_size: int = 100) -> GcReport:
        return await self._call(PruneStore.gc, idle_for, dry_run=dry_run, batch_size=batch_size)

    async def summaries(
        self,
        prefix: str | None = None,
        *,
        idle_for: timedelta | float | None = None,
        limit: int | None = None,
        after: str | SessionSummary | None = None,
        order: str = "name",
    ) -> list[SessionSummary]:
        return await self._call(PruneStore.summaries, prefix, idle_for=idle_for, limit=limit, after=after, order=order)

    async def summary(self, session: str) -> SessionSummary:
        return await self._call(PruneStore.summary, session)

    async def window(
        self,
        session: str,
        *,
        after: int = 0,
        limit: int = 100,
        text_chars: int | None = None,
        verdicts: Iterable[str] | None = None,
        roles: Iterable[str] | None = None,
        contains: str | None = None,
        from_turn: int | None = None,
    ) -> Window:
        filters = {"verdicts": verdicts, "roles": roles, "contains": contains, "from_turn": from_turn}
        return await self._call(PruneStore.window, session, after=after, limit=limit, text_chars=text_chars, **filters)

    async def entry(self, session: str, message_id: str) -> Entry:
        return await self._call(PruneStore.entry, session, message_id)

    async def prompt_messages(self, session: str) -> PromptSource:
        return await self._call(PruneStore.prompt_messages, session)

    async def erasures(self, session: str) -> list[Erasure]:
        return await self._call(PruneStore.erasures, session)

    async def history(self, session: str) -> list[HistoryPoint]:
        return await self._call(PruneStore.history, session)

    async def explain(self, session: str, message_id: str) -> Explanation:
        return await self._call(PruneStore.explain, session, message_id)

    async def session_count(self, prefix: str | None = None) -> int:
        return await self._call(PruneStore.session_count, prefix)

    async def policies(self) -> dict[int, Policy]:
        return await self._call(PruneStore.policies)

    async def stats(self, session: str | None = None) -> Stats:
        return await self._call(PruneStore.stats, session)

    async def verify(self, session: str | None = None) -> VerifyReport:
        return await self._call(PruneStore.verify, session)

    async def what_if(self, session: str, policy: Policy | None = None, prices: Prices | str | None = None) -> WhatIf:
        return await self._call(PruneStore.what_if, session, policy, prices)


async def _in_greenlet(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    from sqlalchemy.util import greenlet_spawn

    return await greenlet_spawn(function, *args, **kwargs)
