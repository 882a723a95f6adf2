"""A chat history of OpenAI Chat Completions messages, for code that talks to a model without a framework.

`OpenAIChatHistory` is what the LangChain and Agents SDK adapters are, for
plain Chat Completions dicts: `add` stores messages (turns and tool keys read
from the store under the session's lock, so any number of objects and
processes on one session agree), `messages` gives the pruned prompt, kept in
the store's cache and patched from each append. Each message comes back as
it was given where nothing was pruned; an assistant message loses the calls
whose results were pruned, and a call whose result has not arrived yet
stays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..aio import AsyncPruneStore
from ..errors import InvalidMessageError, SessionNotFoundError, shorten
from ..formats import openai_calls
from ..formats.text import OPENAI_ROLES, openai_text
from ..frozen import freeze
from ..model import Message, StoredMessage
from ..results import Delta
from ..sql.sessions import SessionState
from ..store import PruneStore
from ..views import Unit
from ._shared import (
    PRUNING_OPTIONS,
    RECALL_DESCRIPTION,
    RECALL_PARAMETERS,
    RecallTool,
    blocking,
    checked_options,
    importer_after,
    on_store,
    with_call_keys,
)

__all__ = ["OpenAIChatHistory", "OPENAI_CHAT"]


class OpenAIChatHistory(RecallTool):
    """One prunestore session as a list of Chat Completions messages.

    `store` is a `PruneStore` or an `AsyncPruneStore` (then use `aadd` and
    `amessages`). Options (``document_tools``, ``keep_tools``, ``ttl``,
    ``keys_of``) say how tool results are pruned, as for `from_openai`. The
    dicts returned are shared with the store's cache, and read-only
    (`prunestore.frozen`): ``copy.deepcopy`` gives a changeable copy.

    `recall_tool()` is a tool for the model, ``recall(words)``, to add to the
    request's ``tools``; answer its calls with `recall(words)` (or `arecall`),
    the messages out of the prompt that hold those words.
    """

    _tool = {
        "type": "function",
        "function": {
            "name": "recall",
            "description": RECALL_DESCRIPTION,
            "parameters": RECALL_PARAMETERS,
            "strict": True,
        },
    }

    def __init__(self, session: str, store: PruneStore | AsyncPruneStore, **options: Any) -> None:
        self.session = session
        self.store = store
        self.options = checked_options(options, PRUNING_OPTIONS)

    def add(self, messages: Sequence[Mapping[str, Any] | Any]) -> Delta:
        """Store messages: dicts, or the SDK's message objects (``completion.choices[0].message``).

        Returns the append's `Delta` (its `evicted`: what the budget took out of the model's view)."""
        if not messages:
            return Delta()
        return self._blocking().append_with(self.session, _builder(_plain(messages), self.options))

    def messages(self) -> list[dict]:
        try:
            return self._blocking().view(self.session, OPENAI_CHAT)
        except SessionNotFoundError:
            return []

    async def aadd(self, messages: Sequence[Mapping[str, Any] | Any]) -> Delta:
        if not messages:
            return Delta()
        return await on_store(self.store, "append_with", self.session, _builder(_plain(messages), self.options))

    async def amessages(self) -> list[dict]:
        try:
            return await on_store(self.store, "view", self.session, OPENAI_CHAT)
        except SessionNotFoundError:
            return []

    def _blocking(self) -> PruneStore:
        return blocking(self.store, "aadd / amessages")


def _plain(messages: Sequence[Mapping[str, Any] | Any]) -> list[Any]:
    """The messages as dicts: an SDK message object (a pydantic model) as the SDK sends it, the fields it was
    given (``exclude_unset``), so that it comes back as the caller's own list would have sent it."""
    return [m.model_dump(mode="json", exclude_unset=True) if hasattr(m, "model_dump") else m for m in messages]


def _builder(messages: list[Mapping[str, Any]], options: dict[str, Any]) -> Callable[[SessionState], list[Message]]:
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in OPENAI_ROLES and role != "tool":
            raise InvalidMessageError(f"messages[{index}]={shorten(message)}: not a Chat Completions message")
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise InvalidMessageError(f"messages[{index}].tool_call_id={shorten(message.get('tool_call_id'))}: needed")
    made = {c.get("id") for m in messages for c in m.get("tool_calls") or []}
    answered: list[str] = [m["tool_call_id"] for m in messages if m["role"] == "tool" and m["tool_call_id"] not in made]

    def build(state: SessionState) -> list[Message]:
        importer = importer_after(state, answered, _calls, options)
        out = []
        for seq, original in enumerate(messages, state.last_seq + 1):
            message_id, metadata = f"oai-{seq}", {"openai": dict(original)}
            text = openai_text(original.get("content"))
            if original["role"] == "tool":
                call_id: str = original["tool_call_id"]
                out.append(with_call_keys(importer.result(message_id, call_id, text, metadata), answers=call_id))
                continue
            calls = [call for call in openai_calls(original) if call[0]]
            for call_id, name, arguments in calls:
                importer.calls[call_id] = (name, arguments)
            lines = [text] * bool(text) + [f"{name}({arguments})" for _, name, arguments in calls]
            turn = importer.advance(0, original["role"] == "user" and bool(text.strip()))
            stored = Message(message_id, OPENAI_ROLES[original["role"]], "\n".join(lines), turn, metadata=metadata)
            out.append(with_call_keys(stored, makes=[call_id for call_id, _, _ in calls]))
        return out

    return build


def _calls(stored: StoredMessage) -> list[tuple[Any, Any, Any]]:
    return openai_calls((stored.metadata or {}).get("openai") or {})


class _OpenAIChat:
    """Chat Completions messages as a `views.View` sends them."""

    name = "openai-chat"
    indexed = True  # its call ids are among those `prunestore.sql.calls.call_ids` finds in the metadata

    def unit(self, message: StoredMessage) -> Unit:
        original = freeze((message.metadata or {}).get("openai"))  # shared by every caller: read-only
        if not isinstance(original, dict):  # appended by hand: the closest Chat Completions message
            role = {"system": "system", "assistant": "assistant"}.get(message.role, "user")
            return Unit(freeze({"role": role, "content": message.content}))
        if original.get("role") == "tool":
            return Unit(original, answers=original.get("tool_call_id"))
        return Unit(original, calls=tuple(c["id"] for c in original.get("tool_calls") or [] if c.get("id")))

    def without_calls(self, item: dict, dropped: frozenset[str]) -> dict | None:
        calls = [c for c in item.get("tool_calls") or [] if c.get("id") not in dropped]
        if not calls and not openai_text(item.get("content")).strip():
            return None
        trimmed = {k: v for k, v in item.items() if k != "tool_calls"}
        return freeze({**trimmed, "tool_calls": calls} if calls else trimmed)


OPENAI_CHAT = _OpenAIChat()
