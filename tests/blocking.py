"""`AsyncPruneStore` driven from synchronous tests, so the behaviour tests run against it unchanged."""

from __future__ import annotations

import asyncio
import inspect

import sqlalchemy as sa

from prunestore.aio import AsyncPruneStore


class BlockingAsyncStore:
    """Every coroutine call of an `AsyncPruneStore`, run to completion on an event loop of its own.

    `engine` is a plain blocking engine on the same database, for the tests' own SQL.
    """

    def __init__(self, url: str, **options) -> None:
        self._loop = asyncio.new_event_loop()
        self.aio = AsyncPruneStore(url, **options)
        self._loop.run_until_complete(self.aio.open())
        self.url = self.aio.url
        self.engine = sa.create_engine(self.url)

    @property
    def policy(self):
        return self.aio.policy

    def __getattr__(self, name: str):
        attribute = getattr(self.aio, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute
        return lambda *args, **kwargs: self._loop.run_until_complete(attribute(*args, **kwargs))

    def let_go(self) -> None:
        """Close the pooled connections of both engines and of the store's (each opens anew on its next use)."""
        self.engine.dispose()
        for engine, _ in list(self.aio._loops.values()):
            disposed = engine.dispose()
            if inspect.isawaitable(disposed):
                self._loop.run_until_complete(disposed)

    def close(self) -> None:
        self._loop.run_until_complete(self.aio.close())
        self._loop.close()
        self.engine.dispose()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
