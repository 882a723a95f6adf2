"""An OpenAI Agents SDK session whose items are the pruned history, every call paired with its output.

Needs ``openai-agents`` (``pip install '.[openai-agents]'``). Items
are Responses-style: messages, tool calls (``function_call`` and the other
``*_call`` items) with their ``*_call_output``, and anything else the SDK
records (reasoning, hosted tool calls), which is stored and given back
as it came. A ``reasoning`` item is sent only while the item stored right
after it (the call or message it preceded) is sent: the Responses API
refuses a reasoning item without the item that followed it. An output's tool key is its call's tool name plus canonical
arguments, so a later identical call supersedes it and its call goes too; a
call whose output has not arrived yet stays.

Turns and tool keys come from the store, read under the session's lock as
each batch is appended, and item ids are the store's (an item's own ``id``
is kept in the item): providers reuse ids (``__fake_id__``, ``call_0``), and
an item added twice is stored twice, as `SQLiteSession` stores it. Any
number of session objects, tasks, threads and processes may share a session.

The SDK reads a session once, when a run starts, and then sends every model
call of the run the whole run so far. ``RunConfig(call_model_input_filter=
session.model_input_filter)`` prunes inside the run too: the SDK stores each
step's items in the session as the run goes, so each model call can be sent
the session's prompt instead.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection
from typing import Any

from ..aio import AsyncPruneStore
from ..errors import SessionNotFoundError
from ..frozen import freeze
from ..model import Message, Role, StoredMessage
from ..sql.sessions import SessionState
from ..store import PruneStore
from ..views import Unit
from ._shared import importer_after, on_store, with_call_keys

__all__ = ["PruneStoreSession", "AGENT_ITEMS"]

_ROLES: dict[str, Role] = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


class PruneStoreSession:
    """The Agents SDK ``Session`` protocol over one prunestore session.

    `store` is an `AsyncPruneStore`, or a `PruneStore` (then its calls run in
    a worker thread). A user message with text starts a new turn. Options:
    `keep_tools` (tools whose repeated identical calls must not supersede each
    other: they have side effects), `document_tools` (tools whose outputs are
    retrieved passages), `ttl` and `keys_of`, as for `prunestore.from_openai`;
    `session_settings` as the SDK's sessions take it.
    """

    def __init__(
        self,
        session_id: str,
        store: AsyncPruneStore | PruneStore,
        *,
        session_settings: Any = None,
        keep_tools: Collection[str] = (),
        document_tools: Collection[str] = (),
        ttl: dict[str, int] | None = None,
        keys_of: Callable | None = None,
    ) -> None:
        self.session_id = session_id
        self.store = store
        self.session_settings = session_settings
        self.options = {"keep_tools": keep_tools, "document_tools": document_tools, "ttl": ttl, "keys_of": keys_of}

    async def get_items(self, limit: int | None = None) -> list[dict]:
        """The live items, oldest first; with `limit` (or ``session_settings.limit``), the latest `limit`.

        As `SQLiteSession` reads them: ``limit=0`` gives none, a negative limit all.
        The items are shared with the store's cache, so they are read-only
        (`prunestore.frozen`): ``dict(item)`` or ``copy.deepcopy(item)`` gives
        a changeable copy (the SDK makes its own copies before changing one).
        """
        if limit is None and self.session_settings is not None:
            settings = self.session_settings
            limit = settings.get("limit") if isinstance(settings, dict) else getattr(settings, "limit", None)
        try:
            items = await on_store(self.store, "view", self.session_id, AGENT_ITEMS)
        except SessionNotFoundError:
            return []
        if limit is not None and limit >= 0:
            return items[max(len(items) - limit, 0) :] if limit else []
        return items

    async def model_input_filter(self, data: Any) -> Any:
        """For ``RunConfig(call_model_input_filter=...)``: send each model call of a run the session's prompt.

        `data` is the SDK's ``CallModelData``. When the session holds the newest
        item the call was to send (the SDK stores each step before the next
        call), the call is sent the session's live items in place of the whole
        run so far; otherwise (a step not stored yet) it goes as given. The
        instructions are left as they are.
        """
        given = data.model_data
        if not given.input:
            return given
        items = await self.get_items()
        if not items or items[-1] != _plain(given.input[-1]):
            return given
        return dataclasses.replace(given, input=list(items))

    async def add_items(self, items: list[Any]) -> None:
        if items:
            await on_store(
                self.store, "append_with", self.session_id, _builder([_plain(i) for i in items], self.options)
            )

    async def pop_item(self) -> dict | None:
        """Remove the session's last stored item and return it: one atomic call on the store."""
        popped = await on_store(self.store, "pop", self.session_id)
        return None if popped is None else _item_of(popped)

    async def clear_session(self) -> None:
        try:
            await on_store(self.store, "delete_session", self.session_id)
        except SessionNotFoundError:
            pass


# -- items in ------------------------------------------------------------------------


def _builder(items: list[dict], options: dict[str, Any]) -> Callable[[SessionState], list[Message]]:
    made = {i["call_id"] for i in items if _is_call(i)}
    answered: list[str] = [i["call_id"] for i in items if _is_output(i) and i["call_id"] not in made]

    def build(state: SessionState) -> list[Message]:
        importer = importer_after(state, answered, _calls, options)
        out = []
        for seq, item in enumerate(items, state.last_seq + 1):
            message_id, role = f"item-{seq}", item.get("role")
            if _is_output(item):
                text, metadata = _pack(item, _output_text(item), "output")
                message = importer.result(message_id, item["call_id"], text, metadata)
                out.append(with_call_keys(message, answers=item["call_id"]))
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


def _is_output(item: dict) -> bool:
    kind = item.get("type")
    return isinstance(kind, str) and kind.endswith("_call_output") and isinstance(item.get("call_id"), str)


def _call_of(item: dict) -> tuple[str, Any]:
    """A call's tool name and arguments, whatever kind of call it is."""
    name = item.get("name") or item["type"]
    for field in ("arguments", "input", "action"):
        if field in item:
            return name, item[field]
    return name, None


def _calls(stored: StoredMessage) -> list[tuple[str, Any, Any]]:
    item = _item_of(stored)
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


def _item_of(message: StoredMessage) -> dict:
    metadata = message.metadata or {}
    field = metadata.get("responses_in_content")
    if field == "*":
        return json.loads(message.content)
    item = dict(metadata.get("responses") or {})
    if field is not None:
        item[field] = message.content
    return item


def _plain(item: Any) -> dict:
    """An item as a JSON-ready dict (the SDK may hand over pydantic models)."""
    if hasattr(item, "model_dump"):
        return item.model_dump(exclude_unset=True, mode="json")
    return json.loads(json.dumps(item))


# -- items out -----------------------------------------------------------------------


class _AgentItems:
    """Responses input items as a `views.View` sends them: each call is an item of its own."""

    name = "openai-agents"

    def unit(self, message: StoredMessage) -> Unit:
        item = freeze(_item_of(message))
        if _is_call(item):
            return Unit(item, calls=(item["call_id"],))
        if _is_output(item):
            return Unit(item, answers=item["call_id"])
        return Unit(item, leads=item.get("type") == "reasoning")

    def without_calls(self, item: dict, dropped: frozenset[str]) -> dict | None:
        return None  # the item is the call


AGENT_ITEMS = _AgentItems()
