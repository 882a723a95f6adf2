"""`AsyncPruneStore`: the store's calls as coroutines, on SQLAlchemy's asyncio engines.

There is one implementation of the store. SQLAlchemy's asyncio engines wrap
aiosqlite and psycopg's async connections in a DBAPI-shaped adapter whose
calls suspend on the event loop from inside a greenlet; `PruneStore`'s own
code runs unchanged on that adapter through `greenlet_spawn`, so every
cascade, lock and retry is the same code the blocking store runs. While one
call waits on the database, the event loop runs other tasks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import db
from .formats import Rendered
from .livecache import DEFAULT_LIVE_CACHE_BYTES, LiveCache, check_cache_bytes
from .model import Message, Policy, StoredMessage
from .results import Delta, Explanation, Stats, VerifyReport
from .storage import SessionState
from .store import DEFAULT_MAX_CONTENT_BYTES, DEFAULT_MAX_METADATA_BYTES, PruneStore
from .text import count_tokens
from .views import Form

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["AsyncPruneStore"]


class AsyncPruneStore:
    """`PruneStore` for asyncio code: the same calls, awaited.

    Needs the ``asyncio`` extra (``pip install 'prunestore[asyncio]'``). The
    database is opened on first use (or by ``await store.open()`` /
    ``async with AsyncPruneStore(...) as store``); close it with
    ``await store.close()``. Connections belong to an event loop, so each
    event loop that uses the store gets its own engine; they share the
    store's cache of live lists, and any number of loops may use it at once.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        policy: Policy | None = None,
        tokenizer: Callable[[str], int] = count_tokens,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        live_cache_bytes: int = DEFAULT_LIVE_CACHE_BYTES,
    ) -> None:
        check_cache_bytes(live_cache_bytes)
        self.url = db.resolve_url(url)
        self.engine = db.make_async_engine(self.url)  # the first loop's; others make their own
        self._options = (policy, tokenizer, max_content_bytes, max_metadata_bytes)
        self._cache = LiveCache(live_cache_bytes)
        self._unused: AsyncEngine | None = self.engine
        self._loops: dict[asyncio.AbstractEventLoop, tuple[AsyncEngine, PruneStore]] = {}
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._guard = threading.Lock()

    async def open(self) -> AsyncPruneStore:
        """Create or migrate the schema and settle the policy (once per event loop; later calls return at once)."""
        await self._here()
        return self

    async def _here(self) -> PruneStore:
        """The store over this event loop's engine, opened on first use."""
        loop = asyncio.get_running_loop()
        opened = self._loops.get(loop)
        if opened is not None:
            return opened[1]
        with self._guard:
            opening = self._opening.setdefault(loop, asyncio.Lock())
        async with opening:
            if loop not in self._loops:
                with self._guard:
                    self._forget_closed_loops()
                    engine, self._unused = self._unused or db.make_async_engine(self.url), None
                try:
                    store = await _in_greenlet(
                        PruneStore._over, engine.sync_engine, self.url, *self._options, live_cache=self._cache
                    )
                except BaseException:
                    await engine.dispose()
                    raise
                with self._guard:
                    self._loops[loop] = (engine, store)
            return self._loops[loop][1]

    def _forget_closed_loops(self) -> None:
        """Let go of the engines of event loops that have closed (their connections cannot be closed any more)."""
        for loop in [loop for loop in self._loops if loop.is_closed()]:
            engine, _ = self._loops.pop(loop)
            self._opening.pop(loop, None)
            engine.sync_engine.dispose(close=False)

    @property
    def policy(self) -> Policy:
        for _, store in list(self._loops.values()):
            return store.policy
        raise RuntimeError("the store is not open yet: await store.open() first")

    async def close(self) -> None:
        """Close this event loop's connections, and let go of the other loops' engines."""
        loop = asyncio.get_running_loop()
        with self._guard:
            mine = self._loops.pop(loop, None)
            others = list(self._loops.values())
            self._loops.clear()
            self._opening.clear()
            unused, self._unused = self._unused, None
        for engine in [e for e, _ in [mine] if mine] + ([unused] if unused else []):
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
        return await _in_greenlet(method, store, *args, **kwargs)

    # -- the calls of PruneStore, awaited ------------------------------------

    async def append(self, session: str, messages: Message | Iterable[Message]) -> Delta:
        return await self._call(PruneStore.append, session, messages)

    async def append_many(self, batches: Mapping[str, Message | Iterable[Message]]) -> dict[str, Delta]:
        return await self._call(PruneStore.append_many, batches)

    async def rebuild(self, session: str | None = None, *, policy: Policy | None = None) -> None:
        await self._call(PruneStore.rebuild, session, policy=policy)

    async def delete_session(self, session: str) -> None:
        await self._call(PruneStore.delete_session, session)

    async def truncate(self, session: str, after_message_id: str) -> Delta:
        return await self._call(PruneStore.truncate, session, after_message_id)

    async def fork(self, session: str, at_message_id: str, new_session: str) -> None:
        await self._call(PruneStore.fork, session, at_message_id, new_session)

    async def live(self, session: str) -> list[StoredMessage]:
        return await self._call(PruneStore.live, session)

    async def view(self, session: str, form: Form) -> list[Any]:
        return await self._call(PruneStore.view, session, form)

    async def append_with(self, session: str, build: Callable[[SessionState], Message | Iterable[Message]]) -> Delta:
        return await self._call(PruneStore.append_with, session, build)

    async def pop(self, session: str) -> StoredMessage | None:
        return await self._call(PruneStore.pop, session)

    async def messages(self, session: str, ids: Iterable[str] | None = None) -> list[StoredMessage]:
        return await self._call(PruneStore.messages, session, ids)

    async def render(self, session: str, format: str = "openai", *, dropped: str = "omit") -> Rendered:
        return await self._call(PruneStore.render, session, format, dropped=dropped)

    async def sessions(self) -> list[str]:
        return await self._call(PruneStore.sessions)

    async def explain(self, session: str, message_id: str) -> Explanation:
        return await self._call(PruneStore.explain, session, message_id)

    async def stats(self, session: str | None = None) -> Stats:
        return await self._call(PruneStore.stats, session)

    async def verify(self, session: str | None = None) -> VerifyReport:
        return await self._call(PruneStore.verify, session)


async def _in_greenlet(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    from sqlalchemy.util import greenlet_spawn

    return await greenlet_spawn(function, *args, **kwargs)
