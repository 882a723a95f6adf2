"""A LangChain chat message history whose messages are the pruned, provider-valid history.

Needs ``langchain-core`` (``pip install 'prunestore[langchain]'``). Messages
go in through `prunestore.formats.from_openai` (tool results keyed by their
call's tool name and canonical arguments) and come out through
`PruneStore.render`, so an AI message never carries a call whose result was
pruned.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, convert_to_messages, convert_to_openai_messages

from ..aio import AsyncPruneStore
from ..errors import SessionNotFoundError, TurnOrderError
from ..formats import Continuation, from_openai
from ..store import PruneStore

__all__ = ["PrunedChatMessageHistory"]


class PrunedChatMessageHistory(BaseChatMessageHistory):
    """The history of one prunestore session, as LangChain messages.

    `store` is a `PruneStore` or an `AsyncPruneStore` (then use the ``a``
    methods). Keyword options (``document_tools``, ``keep_tools``, ``ttl``,
    ``keys_of``) go to `from_openai`. A human message with text starts a new
    turn.
    """

    def __init__(self, session: str, store: PruneStore | AsyncPruneStore, **import_options: Any) -> None:
        self.session = session
        self.store = store
        self.import_options = import_options
        self._continuation: Continuation | None = None  # read from the store on first use

    # -- reading --------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        try:
            rendered = self._blocking().render(self.session, "openai")
        except SessionNotFoundError:
            return []
        return convert_to_messages(rendered.messages)

    async def aget_messages(self) -> list[BaseMessage]:
        if not isinstance(self.store, AsyncPruneStore):
            return await asyncio.to_thread(lambda: self.messages)
        try:
            rendered = await self.store.render(self.session, "openai")
        except SessionNotFoundError:
            return []
        return convert_to_messages(rendered.messages)

    # -- writing --------------------------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        store = self._blocking()
        for attempt in range(2):
            if self._continuation is None:
                self._continuation = Continuation.after(_stored(store, self.session))
            try:
                store.append(self.session, self._convert(messages))
                return
            except TurnOrderError:  # another writer moved the session on: read where it is, once
                self._continuation = None
                if attempt:
                    raise

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if not isinstance(self.store, AsyncPruneStore):
            await asyncio.to_thread(self.add_messages, messages)
            return
        for attempt in range(2):
            if self._continuation is None:
                try:
                    stored = await self.store.messages(self.session)
                except SessionNotFoundError:
                    stored = []
                self._continuation = Continuation.after(stored)
            try:
                await self.store.append(self.session, self._convert(messages))
                return
            except TurnOrderError:
                self._continuation = None
                if attempt:
                    raise

    def clear(self) -> None:
        try:
            self._blocking().delete_session(self.session)
        except SessionNotFoundError:
            pass
        self._continuation = None

    async def aclear(self) -> None:
        if not isinstance(self.store, AsyncPruneStore):
            await asyncio.to_thread(self.clear)
            return
        try:
            await self.store.delete_session(self.session)
        except SessionNotFoundError:
            pass
        self._continuation = None

    # -- conversion -----------------------------------------------------------

    def _convert(self, messages: Sequence[BaseMessage]) -> list:
        assert self._continuation is not None
        before = Continuation(self._continuation.turn, self._continuation.position, dict(self._continuation.calls))
        try:
            converted = from_openai(
                convert_to_openai_messages(list(messages)), continuation=self._continuation, **self.import_options
            )
        except BaseException:
            self._continuation = before
            raise
        # Ids: a tool result's is its call id; others keep LangChain's id or get a random one, so two
        # writers of one session never take the same id for different messages.
        return [
            m if (m.metadata or {})["openai"]["role"] == "tool" else replace(m, id=lc.id or f"lc-{uuid.uuid4().hex}")
            for m, lc in zip(converted, messages, strict=True)
        ]

    def _blocking(self) -> PruneStore:
        if not isinstance(self.store, PruneStore):
            raise TypeError("this history wraps an AsyncPruneStore: use aget_messages / aadd_messages / aclear")
        return self.store


def _stored(store: PruneStore, session: str) -> list:
    try:
        return store.messages(session)
    except SessionNotFoundError:
        return []
