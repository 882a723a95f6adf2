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

import json
from collections.abc import Callable, Sequence
from typing import Any

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        convert_to_messages,
        message_to_dict,
        messages_from_dict,
    )
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"prunestore.integrations.langchain needs langchain-core ({exc.name} is missing): install the langchain "
        "extra (python -m pip install '.[langchain]' in prunestore's folder)",
        name=exc.name,
    ) from exc

from ..aio import AsyncPruneStore
from ..errors import SessionNotFoundError
from ..formats import openai_calls
from ..model import Message, Role, StoredMessage
from ..sql.sessions import SessionState
from ..store import PruneStore
from ..views import Unit
from ._shared import blocking, importer_after, on_store, with_call_keys

__all__ = ["PrunedChatMessageHistory", "LANGCHAIN"]

_ROLES: dict[str, Role] = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "chat": "user",
    "function": "tool_output",
}
_CHAT_ROLES: dict[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
}
_CALL_BLOCKS = ("tool_use", "tool_call", "function_call", "server_tool_use")


class PrunedChatMessageHistory(BaseChatMessageHistory):
    """The history of one prunestore session, as LangChain messages.

    `store` is a `PruneStore` or an `AsyncPruneStore` (then use the ``a``
    methods). Keyword options (``document_tools``, ``keep_tools``, ``ttl``,
    ``keys_of``) say how tool results are pruned, as for `from_openai`.

    Every message added is stored, in order, as InMemoryChatMessageHistory
    would hold it: adding the same message object again (a model that reuses
    message ids, such as ``FakeMessagesListChatModel``) stores it again. The
    messages returned are shared with the store's cache: treat them as
    read-only.
    """

    def __init__(self, session: str, store: PruneStore | AsyncPruneStore, **options: Any) -> None:
        self.session = session
        self.store = store
        self.options = options

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
            self._blocking().append_with(self.session, _builder(list(messages), self.options))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            await on_store(self.store, "append_with", self.session, _builder(list(messages), self.options))

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


# -- LangChain messages in ------------------------------------------------------------


def _builder(messages: list[BaseMessage], options: dict[str, Any]) -> Callable[[SessionState], list[Message]]:
    """What `append_with` runs under the session's lock: the messages, with turns and keys from the store."""
    made = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c.get("id")}
    answered = [m.tool_call_id for m in messages if isinstance(m, ToolMessage) and m.tool_call_id not in made]

    def build(state: SessionState) -> list[Message]:
        importer = importer_after(state, answered, _calls, options)
        out = []
        for seq, message in enumerate(messages, state.last_seq + 1):
            message_id, text, metadata = f"lc-{seq}", _text(message), {"langchain": message_to_dict(message)}
            if isinstance(message, ToolMessage):
                stored = importer.result(message_id, message.tool_call_id, text, metadata)
                out.append(with_call_keys(stored, answers=message.tool_call_id))
                continue
            calls = [c for c in message.tool_calls if c.get("id")] if isinstance(message, AIMessage) else []
            for call in calls:
                importer.calls[call["id"]] = (call["name"], call["args"])
            text = "\n".join([text] * bool(text) + [f"{c['name']}({_json(c['args'])})" for c in calls])
            turn = importer.advance(0, isinstance(message, HumanMessage) and bool(text.strip()))
            stored = Message(message_id, _role(message), text, turn, metadata=metadata)
            out.append(with_call_keys(stored, makes=_call_ids(calls)))
        return out

    return build


def _calls(stored: StoredMessage) -> list[tuple[str, Any, Any]]:
    """The calls a stored message made: (call id, tool name, arguments)."""
    metadata = stored.metadata or {}
    if "langchain" in metadata:
        calls = metadata["langchain"].get("data", {}).get("tool_calls") or []
        return [(c.get("id"), c.get("name"), c.get("args")) for c in calls]
    return openai_calls(metadata.get("openai") or {})  # written by an earlier version


def _call_ids(calls: list) -> list[str]:
    return [call_id for call in calls if (call_id := call.get("id"))]


def _role(message: BaseMessage) -> Role:
    if isinstance(message, ChatMessage):
        return _CHAT_ROLES.get(message.role, "user")
    return _ROLES.get(message.type, "user")


def _text(message: BaseMessage) -> str:
    """The text the pruning sees (tokens, duplicates, DEFINE/REF markers): string content or its text blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    )


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


# -- LangChain messages out -----------------------------------------------------------


class _LangChainForm:
    """LangChain messages as a `views.View` sends them."""

    name = "langchain"

    def unit(self, message: StoredMessage) -> Unit:
        data = (message.metadata or {}).get("langchain")
        item = messages_from_dict([data])[0] if isinstance(data, dict) else _from_plain(message)
        if isinstance(item, AIMessage):
            return Unit(item, calls=tuple(_call_ids(item.tool_calls)))
        if isinstance(item, ToolMessage):
            return Unit(item, answers=item.tool_call_id)
        return Unit(item)

    def without_calls(self, item: AIMessage, dropped: frozenset[str]) -> AIMessage | None:
        calls = [c for c in item.tool_calls if c.get("id") not in dropped]
        content = item.content
        if isinstance(content, list):
            content = [
                b
                for b in content
                if not (isinstance(b, dict) and b.get("type") in _CALL_BLOCKS and b.get("id") in dropped)
            ]
        if not calls and not _text(AIMessage(content=content)).strip() and not _other_blocks(content):
            return None
        kwargs = dict(item.additional_kwargs)
        if "tool_calls" in kwargs:
            kwargs["tool_calls"] = [c for c in kwargs["tool_calls"] if c.get("id") not in dropped]
            if not kwargs["tool_calls"]:
                del kwargs["tool_calls"]
        return item.model_copy(update={"tool_calls": calls, "content": content, "additional_kwargs": kwargs})


def _other_blocks(content: str | list) -> bool:
    """Whether list content holds something to send besides text and calls (an image, say)."""
    return isinstance(content, list) and any(
        not isinstance(b, dict) or b.get("type") not in ("text", *_CALL_BLOCKS) for b in content
    )


def _from_plain(message: StoredMessage) -> BaseMessage:
    """A message not written by this adapter (appended by hand, or imported): the closest LangChain message."""

    original = (message.metadata or {}).get("openai")
    if isinstance(original, dict):
        return convert_to_messages([original])[0]
    if message.role == "system":
        return SystemMessage(message.content, id=message.id)
    if message.role == "assistant":
        return AIMessage(message.content, id=message.id)
    return HumanMessage(message.content, id=message.id)


LANGCHAIN = _LangChainForm()
