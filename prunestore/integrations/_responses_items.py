"""Responses API input items as prunestore messages, and back: shared by the Agents SDK session and the
Responses history.

Items are messages, tool calls (``function_call`` and the other ``*_call``
items) with their ``*_call_output``, and anything else (reasoning, hosted
tool calls), stored whole and given back as it came. Each call is an item of
its own, so parallel calls are consecutive items, one group waiting for its
outputs (`views.Unit.joins`). A ``reasoning`` item is
sent only while the item stored right after it (the call or message it
preceded) is sent: the Responses API refuses a reasoning item without the
item that followed it. An output's tool key is its call's tool name plus
canonical arguments, so a later identical call supersedes it and its call
goes too; a call whose output has not arrived yet stays.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..frozen import freeze
from ..model import Message, Role, StoredMessage
from ..sql.sessions import SessionState
from ..views import Unit
from ._shared import importer_after, with_call_keys

_ROLES: dict[str, Role] = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


# -- items in ------------------------------------------------------------------------


def items_builder(items: list[dict], options: dict[str, Any]) -> Callable[[SessionState], list[Message]]:
    made = {i["call_id"] for i in items if _is_call(i)}
    answered: list[str] = [_answered(i) for i in items if _is_output(i) and _answered(i) not in made]

    def build(state: SessionState) -> list[Message]:
        importer = importer_after(state, answered, _calls, options)
        out = []
        for seq, item in enumerate(items, state.last_seq + 1):
            message_id, role = f"item-{seq}", item.get("role")
            if _is_output(item):
                text, metadata = _pack(item, _output_text(item), "output")
                message = importer.result(message_id, _answered(item), text, metadata)
                out.append(with_call_keys(message, answers=_answered(item)))
            elif _is_call(item):
                name, arguments = _call_of(item)
                importer.calls[item["call_id"]] = (name, arguments)
                shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
                text, metadata = _pack(item, f"{name}({shown})", None)
                message = Message(message_id, "assistant", text, importer.turn, metadata=metadata)
                out.append(with_call_keys(message, makes=[item["call_id"]]))
            elif role in _ROLES and item.get("type") in (None, "message"):
                words = _text(item.get("content"))
                turn = importer.advance(0, role == "user" and bool(words.strip()))
                text, metadata = _pack(item, words, "content" if isinstance(item.get("content"), str) else None)
                out.append(Message(message_id, _ROLES[role], text, turn, metadata=metadata))
            else:  # an item this adapter does not interpret: kept, and given back as it came
                text, metadata = _pack(item, "", "*")
                out.append(Message(message_id, "assistant", text, importer.turn, metadata=metadata))
        return out

    return build


def _is_call(item: dict) -> bool:
    kind = item.get("type")
    return isinstance(kind, str) and kind.endswith("_call") and isinstance(item.get("call_id"), str)


# Outputs whose type does not end in ``_call_output``: a client-side tool search's answers its call too.
_OTHER_OUTPUTS = frozenset({"tool_search_output"})


def _is_output(item: dict) -> bool:
    kind = item.get("type")
    return (
        isinstance(kind, str)
        and (kind.endswith("_call_output") or kind in _OTHER_OUTPUTS)
        and isinstance(_answered(item), str)
    )


def _answered(item: dict) -> Any:
    """The call id an output answers: its ``call_id``; the API's ``local_shell_call_output`` names it ``id``."""
    if "call_id" in item or item.get("type") != "local_shell_call_output":
        return item.get("call_id")
    return item.get("id")


def _call_of(item: dict) -> tuple[str, Any]:
    """A call's tool name and arguments, whatever kind of call it is."""
    name = item.get("name") or item["type"]
    for field in ("arguments", "input", "action"):
        if field in item:
            return name, item[field]
    return name, None


def _calls(stored: StoredMessage) -> list[tuple[str, Any, Any]]:
    item = item_of(stored)
    return [(item["call_id"], *_call_of(item))] if _is_call(item) else []


def _output_text(item: dict) -> str:
    output = item.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _text(output) or json.dumps(output, ensure_ascii=False)
    return json.dumps(output, ensure_ascii=False)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    return ""


# Items larger than this as JSON (a large tool output, an image) are kept whole in the message's content:
# the store caps metadata (1 MiB by default) and content far higher (16 MiB).
_LARGE_ITEM = 256 * 1024


def _pack(item: dict, text: str, field: str | None) -> tuple[str, dict]:
    """The message content and metadata of an item: the item less the field the content holds already.

    With `field` ``"*"``, or an item too large for metadata, the content is the whole item as JSON.
    """
    if field != "*":
        if field is not None and item.get(field) == text:
            metadata = {"responses": {k: v for k, v in item.items() if k != field}, "responses_in_content": field}
        else:
            metadata = {"responses": item}
        if len(json.dumps(metadata, ensure_ascii=False)) <= _LARGE_ITEM:
            return text, metadata
    return json.dumps(item, sort_keys=True, ensure_ascii=False), {"responses_in_content": "*"}


def item_of(message: StoredMessage) -> dict:
    metadata = message.metadata or {}
    field = metadata.get("responses_in_content")
    if field == "*":
        return json.loads(message.content)
    item = dict(metadata.get("responses") or {})
    if field is not None:
        item[field] = message.content
    return item


def plain_item(item: Any) -> dict:
    """An item as a JSON-ready dict (the SDK may hand over pydantic models)."""
    if hasattr(item, "model_dump"):
        return item.model_dump(exclude_unset=True, mode="json")
    return json.loads(json.dumps(item))


# -- items out -----------------------------------------------------------------------


class _ResponsesItems:
    """Responses input items as a `views.View` sends them: each call is an item of its own."""

    name = "openai-agents"
    indexed = True  # its call ids are among those `prunestore.sql.calls.call_ids` finds in the metadata

    def unit(self, message: StoredMessage) -> Unit:
        item = freeze(item_of(message))
        if _is_call(item):
            return Unit(item, calls=(item["call_id"],), joins=True)
        if _is_output(item):
            return Unit(item, answers=_answered(item))
        return Unit(item, leads=item.get("type") == "reasoning")

    def without_calls(self, item: dict, dropped: frozenset[str]) -> dict | None:
        return None  # the item is the call


RESPONSES_ITEMS = _ResponsesItems()
