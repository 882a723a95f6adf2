"""An OpenAI Agents SDK session whose items are the pruned history, every call paired with its output.

Needs ``openai-agents`` (``pip install 'prunestore[openai-agents]'``). Items
are Responses-style: messages, ``function_call`` and ``function_call_output``
pairs, and anything else the SDK records (reasoning, hosted tool calls),
which is stored and given back untouched. An output's tool key is its call's
tool name plus canonical arguments, so a later identical call supersedes it;
a call goes back to the model only with its output.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from typing import Any

from ..aio import AsyncPruneStore
from ..errors import SessionNotFoundError, TurnOrderError
from ..formats import tool_key
from ..model import Message, StoredMessage
from ..store import PruneStore

__all__ = ["PruneStoreSession"]

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


class PruneStoreSession:
    """The Agents SDK ``Session`` protocol over one prunestore session.

    `store` is an `AsyncPruneStore`, or a `PruneStore` (then its calls run in
    a worker thread). A user message with text starts a new turn.
    """

    session_settings = None

    def __init__(self, session_id: str, store: AsyncPruneStore | PruneStore) -> None:
        self.session_id = session_id
        self.store = store
        self._turn: int | None = None  # the session's turn and calls, read on first use
        self._calls: dict[Any, tuple[Any, Any]] = {}

    async def _run(self, name: str, *args: Any) -> Any:
        method = getattr(self.store, name)
        if isinstance(self.store, AsyncPruneStore):
            return await method(*args)
        return await asyncio.to_thread(method, *args)

    async def _stored(self) -> list[StoredMessage]:
        try:
            return await self._run("messages", self.session_id)
        except SessionNotFoundError:
            return []

    async def get_items(self, limit: int | None = None) -> list[dict]:
        stored = await self._stored()
        outputs = {_item(m).get("call_id"): m for m in stored if _item(m).get("type") == "function_call_output"}
        calls = {_item(m).get("call_id") for m in stored if _item(m).get("type") == "function_call"}
        items = []
        for message in stored:
            item = _item(message)
            kind = item.get("type")
            if kind == "function_call":
                output = outputs.get(item.get("call_id"))
                if output is not None and output.live:  # sent with its output, or not at all
                    items.append(item)
            elif kind == "function_call_output":
                if message.live and item.get("call_id") in calls:
                    items.append(item)
            elif message.live:
                items.append(item)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
            while items and items[0].get("type") == "function_call_output":  # its call was cut off
                items.pop(0)
        return items

    async def add_items(self, items: list[dict]) -> None:
        for attempt in range(2):
            if self._turn is None:
                self._learn(await self._stored())
            turn, calls = self._turn, dict(self._calls)
            try:
                await self._run("append", self.session_id, self._convert(items))
                return
            except TurnOrderError:  # another writer moved the session on: read where it is, once
                self._turn = None
                if attempt:
                    raise
            except BaseException:
                self._turn, self._calls = turn, calls
                raise

    async def pop_item(self) -> dict | None:
        stored = await self._stored()
        if not stored:
            return None
        if len(stored) == 1:
            await self._run("delete_session", self.session_id)
        else:
            await self._run("truncate", self.session_id, stored[-2].id)
        self._turn = None
        return _item(stored[-1])

    async def clear_session(self) -> None:
        try:
            await self._run("delete_session", self.session_id)
        except SessionNotFoundError:
            pass
        self._turn, self._calls = None, {}

    def _learn(self, stored: Sequence[StoredMessage]) -> None:
        self._turn = stored[-1].turn if stored else 0
        self._calls = {}
        for message in stored:
            item = _item(message)
            if item.get("type") == "function_call":
                self._calls[item.get("call_id")] = (item.get("name"), item.get("arguments"))

    def _convert(self, items: Sequence[Any]) -> list[Message]:
        """Items as Messages; advances the turn and remembers calls."""
        assert self._turn is not None
        out = []
        for item in items:
            item = _plain(item)
            kind, role = item.get("type"), item.get("role")
            text = _text(item.get("content"))
            key = None
            if kind == "function_call":
                self._calls[item.get("call_id")] = (item.get("name"), item.get("arguments"))
                mapped, text, message_id = "assistant", f"{item.get('name')}({item.get('arguments')})", None
            elif kind == "function_call_output":
                name, arguments = self._calls.get(item.get("call_id"), (None, None))
                key = tool_key(name, arguments) if name is not None else None
                output = item.get("output")
                text = output if isinstance(output, str) else json.dumps(output)
                mapped, message_id = "tool_output", f"output-{item.get('call_id')}"
            elif role in _ROLES and kind in (None, "message"):
                mapped, message_id = _ROLES[role], None
                if role == "user" and text:
                    self._turn += 1
            else:  # an item this adapter does not interpret: kept, and given back as it came
                mapped, text, message_id = "assistant", json.dumps(item, sort_keys=True), None
            given = item.get("id")
            if message_id is None:
                message_id = given if isinstance(given, str) and given else f"item-{uuid.uuid4().hex}"
            out.append(Message(message_id, mapped, text, self._turn, tool_key=key, metadata={"responses": item}))
        return out


def _item(message: StoredMessage) -> dict:
    return (message.metadata or {}).get("responses") or {}


def _plain(item: Any) -> dict:
    """An item as a JSON-ready dict (the SDK may hand over pydantic models)."""
    if hasattr(item, "model_dump"):
        return item.model_dump(exclude_unset=True, mode="json")
    return json.loads(json.dumps(item))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
