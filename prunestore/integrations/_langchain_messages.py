"""LangChain messages in and out of a store session, shared by the chat history and the agent middleware.

A message is stored in LangChain's serialized form (`message_to_dict`) with
the text the pruning sees; its turn and tool keys come from the store under
the session's lock, and `LANGCHAIN` turns stored messages back into
LangChain messages, provider-valid.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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

from ..formats import openai_calls
from ..model import Message, Role, StoredMessage
from ..sql.sessions import SessionState
from ..views import Unit
from ._shared import importer_after, reported_tokens, with_call_keys

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
_REASONING_BLOCKS = ("thinking", "redacted_thinking", "reasoning")


# -- LangChain messages in ------------------------------------------------------------


def builder(
    messages: list[BaseMessage], options: dict[str, Any], ids: list[str] | None = None
) -> Callable[[SessionState], list[Message]]:
    """What `append_with` runs under the session's lock: the messages, with turns and keys from the store.

    A message's store id is its entry in `ids`, or ``lc-<seq>`` (its place in the session) without them.
    """
    made = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c.get("id")}
    answered = [m.tool_call_id for m in messages if isinstance(m, ToolMessage) and m.tool_call_id not in made]

    def build(state: SessionState) -> list[Message]:
        importer = importer_after(state, answered, _calls, options)
        out = []
        for seq, message in enumerate(messages, state.last_seq + 1):
            message_id = ids[seq - state.last_seq - 1] if ids is not None else f"lc-{seq}"
            text, metadata = _text(message), {"langchain": message_to_dict(message)}
            if isinstance(message, ToolMessage):
                stored = importer.result(message_id, message.tool_call_id, text, metadata)
                out.append(with_call_keys(stored, answers=message.tool_call_id))
                continue
            calls = [c for c in message.tool_calls if c.get("id")] if isinstance(message, AIMessage) else []
            for call in calls:
                importer.calls[call["id"]] = (call["name"], call["args"])
            text = "\n".join([text] * bool(text) + [f"{c['name']}({_json(c['args'])})" for c in calls])
            turn = importer.advance(0, isinstance(message, HumanMessage) and bool(text.strip()))
            usage = message.usage_metadata if isinstance(message, AIMessage) else None
            tokens = reported_tokens(options, usage.get("output_tokens") if usage else None)
            stored = Message(message_id, _role(message), text, turn, metadata=metadata, tokens=tokens)
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
    indexed = True  # its call ids are among those `prunestore.sql.calls.call_ids` finds in the metadata

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
        content = said = item.content
        if isinstance(content, list):
            content = [
                b
                for b in content
                if not (isinstance(b, dict) and b.get("type") in _CALL_BLOCKS and b.get("id") in dropped)
            ]
            said = [b for b in content if not (isinstance(b, dict) and b.get("type") in _REASONING_BLOCKS)]
        if not calls and not _text(AIMessage(content=said)).strip() and not _other_blocks(said):
            return None  # reasoning stays with the message's text or calls, and goes with the last of them
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
