"""An OpenAI Agents SDK session whose items are the pruned history, every call paired with its output.

Needs ``openai-agents`` (``pip install '.[openai-agents]'``). Items
are Responses-style, stored and sent as `OpenAIResponsesHistory` stores and
sends them: messages, tool calls with their outputs (a later identical call
supersedes an output, and its call goes too; a call whose output has not
arrived yet stays), and anything else the SDK records (reasoning, hosted
tool calls) as it came, a ``reasoning`` item only while the item stored
right after it is sent.

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
from collections.abc import Callable, Collection
from typing import Any

from ..aio import AsyncPruneStore
from ..errors import SessionNotFoundError
from ..store import PruneStore
from ._responses_items import RESPONSES_ITEMS, item_of, items_builder, plain_item
from ._shared import RECALL_DESCRIPTION, on_store, recall_answer

__all__ = ["PruneStoreSession", "AGENT_ITEMS"]

AGENT_ITEMS = RESPONSES_ITEMS  # the items a session gives, as the store's `view` form


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
        if not items or items[-1] != plain_item(given.input[-1]):
            return given
        return dataclasses.replace(given, input=list(items))

    async def add_items(self, items: list[Any]) -> None:
        if items:
            await on_store(
                self.store, "append_with", self.session_id, items_builder([plain_item(i) for i in items], self.options)
            )

    async def pop_item(self) -> dict | None:
        """Remove the session's last stored item and return it: one atomic call on the store."""
        popped = await on_store(self.store, "pop", self.session_id)
        return None if popped is None else item_of(popped)

    def recall_tool(self) -> Any:
        """A tool for the agent, ``recall(words)``: the session's items out of the prompt that hold the words.

        Give it to the agent (``Agent(..., tools=[..., session.recall_tool()])``); what the model asks
        back comes as that call's output (`PruneStore.recall`).
        """
        from agents import function_tool

        async def recall(words: str) -> str:
            return await recall_answer(self.store, self.session_id, words)

        return function_tool(recall, name_override="recall", description_override=RECALL_DESCRIPTION)

    async def clear_session(self) -> None:
        try:
            await on_store(self.store, "delete_session", self.session_id)
        except SessionNotFoundError:
            pass
