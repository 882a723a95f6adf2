"""A LangChain chat message history whose messages are the pruned, provider-valid history.

Needs ``langchain-core`` (``pip install '.[langchain]'``). Each
message is stored in LangChain's own serialized form (`message_to_dict`), so
what comes back is equal to what went in (ids, kwargs, metadata, artifacts,
statuses, content blocks) wherever nothing was pruned; what was pruned is
left out, with the tool calls whose results were pruned.

Turns and tool keys come from the store, read under the session's lock as
each batch is appended (`PruneStore.append_with`), so any number of history
objects and processes on one session agree: a human message with text starts
the next turn, and a tool result is keyed by its call's tool name and
canonical arguments, so a later identical call supersedes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"prunestore.integrations.langchain needs langchain-core ({exc.name} is missing): install the langchain "
        "extra (python -m pip install '.[langchain]' in prunestore's folder)",
        name=exc.name,
    ) from exc

from ..aio import AsyncPruneStore
from ..errors import SessionNotFoundError
from ..store import PruneStore
from ._langchain_messages import LANGCHAIN, builder
from ._shared import blocking, checked_options, on_store

__all__ = ["PrunedChatMessageHistory", "LANGCHAIN"]


class PrunedChatMessageHistory(BaseChatMessageHistory):
    """The history of one prunestore session, as LangChain messages.

    `store` is a `PruneStore` or an `AsyncPruneStore` (then use the ``a``
    methods). Keyword options (``document_tools``, ``keep_tools``, ``ttl``,
    ``keys_of``) say how tool results are pruned, as for `from_openai`.
    With ``tokens_from_usage=True`` a model's response is stored with the output
    tokens its framework reported (docs/integrations.md).

    Every message added is stored, in order, as InMemoryChatMessageHistory
    would hold it: adding the same message object again (a model that reuses
    message ids, such as ``FakeMessagesListChatModel``) stores it again. The
    messages returned are shared with the store's cache: treat them as
    read-only.
    """

    def __init__(self, session: str, store: PruneStore | AsyncPruneStore, **options: Any) -> None:
        self.session = session
        self.store = store
        self.options = checked_options(options)

    # -- reading --------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        try:
            return self._blocking().view(self.session, LANGCHAIN)
        except SessionNotFoundError:
            return []

    async def aget_messages(self) -> list[BaseMessage]:
        try:
            return await on_store(self.store, "view", self.session, LANGCHAIN)
        except SessionNotFoundError:
            return []

    # -- writing --------------------------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            self._blocking().append_with(self.session, builder(list(messages), self.options))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            await on_store(self.store, "append_with", self.session, builder(list(messages), self.options))

    def clear(self) -> None:
        try:
            self._blocking().delete_session(self.session)
        except SessionNotFoundError:
            pass

    async def aclear(self) -> None:
        try:
            await on_store(self.store, "delete_session", self.session)
        except SessionNotFoundError:
            pass

    def _blocking(self) -> PruneStore:
        return blocking(self.store, "aget_messages / aadd_messages / aclear")


def __getattr__(name: str) -> Any:
    """`PruneStoreMiddleware` for ``create_agent``, imported on first use: it needs ``langchain``, not only its core."""
    if name == "PruneStoreMiddleware":
        from .langchain_agents import PruneStoreMiddleware

        return PruneStoreMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
