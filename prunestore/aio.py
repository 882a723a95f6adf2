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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import db
from .formats import Rendered
from .livecache import DEFAULT_LIVE_CACHE_BYTES, check_cache_bytes
from .model import Message, Policy, StoredMessage
from .results import Delta, Explanation, Stats, VerifyReport
from .store import DEFAULT_MAX_CONTENT_BYTES, DEFAULT_MAX_METADATA_BYTES, PruneStore
from .text import count_tokens

__all__ = ["AsyncPruneStore"]


class AsyncPruneStore:
    """`PruneStore` for asyncio code: the same calls, awaited.

    Needs the ``asyncio`` extra (``pip install 'prunestore[asyncio]'``). The
    database is opened on first use (or by ``await store.open()`` /
    ``async with AsyncPruneStore(...) as store``); close it with
    ``await store.close()``.
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
        self.engine = db.make_async_engine(self.url)
        self._options = (policy, tokenizer, max_content_bytes, max_metadata_bytes, live_cache_bytes)
        self._store: PruneStore | None = None
        self._opening = asyncio.Lock()

    async def open(self) -> AsyncPruneStore:
        """Create or migrate the schema and settle the policy (once; later calls return at once)."""
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    self._store = await _in_greenlet(
                        PruneStore._over, self.engine.sync_engine, self.url, *self._options
                    )
        return self

    @property
    def policy(self) -> Policy:
        if self._store is None:
            raise RuntimeError("the store is not open yet: await store.open() first")
        return self._store.policy

    async def close(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> AsyncPruneStore:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncPruneStore({self.engine.url.render_as_string(hide_password=True)!r})"

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        await self.open()
        return await _in_greenlet(method, self._store, *args, **kwargs)

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
