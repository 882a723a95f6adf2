"""A history of OpenAI Responses API input items, for code that calls ``client.responses.create`` itself.

`OpenAIResponsesHistory` is to the Responses API what `OpenAIChatHistory` is
to Chat Completions, for code that keeps the conversation itself (with
``store=False``, or to prune what a ``previous_response_id`` chain would
resend whole): `add` stores input items (dicts, or the SDK's output items,
``response.output``), `items` gives the pruned input, ready to send as
``input=``, kept in the store's cache and patched from each append.

- A tool call (``function_call`` and the other ``*_call`` items) goes when
  its output is pruned: a later call of the same tool with the same
  arguments supersedes an output. A call whose output has not arrived yet
  stays.
- A ``reasoning`` item (with its ``encrypted_content``: ask for it with
  ``include=["reasoning.encrypted_content"]``) is stored whole and sent
  only while the item stored right after it, the call or message it
  preceded, is sent: the API refuses a reasoning item without it.
- Every other item is stored whole and given back as it came.

Where nothing was pruned, `items` is the list of items as given, each as
its JSON (``model_dump(mode="json", exclude_unset=True)`` for the SDK's
objects). The dicts are shared with the cache and read-only
(`prunestore.frozen`): ``copy.deepcopy`` gives a changeable copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..aio import AsyncPruneStore
from ..errors import InvalidMessageError, SessionNotFoundError, shorten
from ..results import Delta
from ..store import PruneStore
from ._responses_items import RESPONSES_ITEMS, items_builder, plain_item
from ._shared import (
    PRUNING_OPTIONS,
    RECALL_DESCRIPTION,
    RECALL_PARAMETERS,
    RecallTool,
    blocking,
    checked_options,
    on_store,
)

__all__ = ["OpenAIResponsesHistory"]


class OpenAIResponsesHistory(RecallTool):
    """One prunestore session as the ``input`` items of ``client.responses.create``.

    `store` is a `PruneStore` or an `AsyncPruneStore` (then use `aadd` and
    `aitems`). Options (``document_tools``, ``keep_tools``, ``ttl``,
    ``keys_of``) say how tool outputs are pruned, as for `from_openai`.

    `recall_tool()` is a tool for the model, ``recall(words)``, to add to the
    request's ``tools``; answer its calls with `recall(words)` (or `arecall`),
    the messages out of the prompt that hold those words.
    """

    _tool = {
        "type": "function",
        "name": "recall",
        "description": RECALL_DESCRIPTION,
        "parameters": RECALL_PARAMETERS,
        "strict": True,
    }

    def __init__(self, session: str, store: PruneStore | AsyncPruneStore, **options: Any) -> None:
        self.session = session
        self.store = store
        self.options = checked_options(options, PRUNING_OPTIONS)

    def add(self, items: Sequence[Mapping[str, Any] | Any]) -> Delta:
        """Store items: input item dicts, or the output items of the SDK's ``Response``.

        Returns the append's `Delta` (its `evicted`: what the budget took out of the model's view)."""
        plain = _items(items)
        if not plain:
            return Delta()
        return self._blocking().append_with(self.session, items_builder(plain, self.options))

    def items(self) -> list[dict]:
        """The pruned input: a new list of read-only items."""
        try:
            return self._blocking().view(self.session, RESPONSES_ITEMS)
        except SessionNotFoundError:
            return []

    async def aadd(self, items: Sequence[Mapping[str, Any] | Any]) -> Delta:
        plain = _items(items)
        if not plain:
            return Delta()
        return await on_store(self.store, "append_with", self.session, items_builder(plain, self.options))

    async def aitems(self) -> list[dict]:
        try:
            return await on_store(self.store, "view", self.session, RESPONSES_ITEMS)
        except SessionNotFoundError:
            return []

    def _blocking(self) -> PruneStore:
        return blocking(self.store, "aadd / aitems")


def _items(items: Sequence[Mapping[str, Any] | Any]) -> list[dict]:
    """The items as JSON-ready dicts, each a message (with a role) or an item with a type."""
    if isinstance(items, (str, bytes, Mapping)) or hasattr(items, "model_dump"):
        raise InvalidMessageError(f"items={shorten(items)}: expected a list of items")
    out = []
    for index, item in enumerate(items):
        plain = plain_item(item) if isinstance(item, Mapping) or hasattr(item, "model_dump") else None
        if not isinstance(plain, dict) or not (isinstance(plain.get("type"), str) or "role" in plain):
            raise InvalidMessageError(f"items[{index}]={shorten(item)}: not a Responses input item")
        out.append(plain)
    return out
