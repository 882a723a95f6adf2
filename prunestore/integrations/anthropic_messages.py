"""A history of Anthropic Messages API messages, for code that calls ``client.messages.create`` itself.

`AnthropicHistory` does for the Anthropic SDK what `OpenAIChatHistory` does
for Chat Completions: `add` stores the messages of the conversation (the
``MessageParam`` dicts the code sends, and the SDK's ``Message`` the model
returns), `messages` gives the pruned prompt, ready to send as
``messages=``, kept in the store's cache and patched from each append. The
list is new on every call; the messages in it are shared with the cache and
read-only (`prunestore.frozen`; ``copy.deepcopy`` gives a changeable copy),
as `OpenAIChatHistory`'s are.

- Each ``tool_result`` block is stored as a message of its own, keyed like
  an imported transcript (`from_anthropic`: a later call of the same tool
  with the same arguments supersedes it); a ``tool_use`` block goes when
  its result is pruned, and stays while its result is on its way.
- Reasoning (``thinking`` and ``redacted_thinking`` blocks, with their
  signatures) stays with the assistant message it came in, unchanged, while
  a tool call of that message is in the prompt or the message has text to
  send; it is never sent on its own.
- Consecutive messages of one role are merged into one, tool results
  first, so user and assistant alternate as the API requires.
- With ``cache=True`` (the default) the last block of the prompt carries a
  ``cache_control`` breakpoint, so each call reads the previous call's
  prompt from Anthropic's prompt cache and writes only what is new; under a
  budget with removal events that prefix stays put between events. While
  messages are pending (in the prompt until the next event takes them
  out), a second breakpoint ends the part before them, which the event
  leaves as it is; the first call after the prompt changed before its end
  (an event, a comeback, a cut), or that adds more blocks than the API
  looks back over, has it at the end of the part the previous call sent,
  so that the API finds that part in the cache.
- The system prompt, given to the history as ``system=``, is not stored (it
  is the caller's code, not the conversation): `request` gives it with the
  messages, its last block with a breakpoint of its own (with ``cache``), so
  tools and system stay cached when an event changes the first messages.
  That makes three of the four breakpoints the API allows, one left for the
  caller's ``tools``; the caller's own breakpoints in ``system`` count, and
  where they leave no room the system's and then the second give way.

Where nothing was pruned, `messages` is the list of messages as given, with
consecutive messages of one role merged and the breakpoint added.
"""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..aio import AsyncPruneStore
from ..errors import InvalidMessageError, SessionNotFoundError, shorten
from ..formats.anthropic import REASONING_BLOCKS
from ..formats.text import anthropic_text
from ..frozen import FrozenDict, FrozenList, freeze
from ..model import Message, StoredMessage
from ..prices import common_prefix
from ..results import Delta
from ..sql.sessions import SessionState
from ..store import PruneStore
from ..views import Prompt, Unit
from ._shared import (
    RECALL_DESCRIPTION,
    RECALL_PARAMETERS,
    RecallTool,
    blocking,
    checked_options,
    importer_after,
    on_store,
    reported_tokens,
    with_call_keys,
)

__all__ = ["AnthropicHistory", "ANTHROPIC_MESSAGES"]

_BREAKPOINT = {"type": "ephemeral"}
_MAX_BREAKPOINTS = 4  # cache_control breakpoints the API takes in one request
_LOOK_BACK = 20  # blocks the API looks back from a breakpoint for a prefix an earlier request cached


class AnthropicHistory(RecallTool):
    """One prunestore session as the ``messages`` of ``client.messages.create``.

    `store` is a `PruneStore` or an `AsyncPruneStore` (then use `aadd` and
    `amessages`). Options (``document_tools``, ``keep_tools``, ``ttl``,
    ``keys_of``) say how tool results are pruned, as for `from_anthropic`.
    With ``tokens_from_usage=True`` a model's response is stored with the output
    tokens its framework reported (docs/integrations.md).
    `system` (a string, or a list of text blocks) is the system prompt that
    `request` sends with the messages; it is not stored.

    `recall_tool()` is a tool for the model, ``recall(words)``, to add to the
    request's ``tools``; answer its calls with `recall(words)` (or `arecall`),
    the messages out of the prompt that hold those words.
    """

    _tool = {"name": "recall", "description": RECALL_DESCRIPTION, "input_schema": RECALL_PARAMETERS}

    def __init__(
        self,
        session: str,
        store: PruneStore | AsyncPruneStore,
        *,
        system: str | Sequence[Mapping[str, Any]] | None = None,
        cache: bool = True,
        **options: Any,
    ):
        self.session = session
        self.store = store
        self.cache = cache
        self.system = _system(system)
        self.options = checked_options(options)

    def add(self, messages: Sequence[Mapping[str, Any] | Any]) -> Delta:
        """Store messages: ``MessageParam`` dicts, or the ``Message`` objects ``messages.create`` returns.

        Returns the append's `Delta` (its `evicted`: what the budget took out of the model's view)."""
        params, usage = _params(messages)
        if not params:
            return Delta()
        return self._blocking().append_with(self.session, _builder(params, usage, self.options))

    def messages(self) -> list[dict]:
        """The prompt: a new list of read-only messages."""
        try:
            items = self._blocking().view(self.session, ANTHROPIC_MESSAGES)
        except SessionNotFoundError:
            return []
        return _merged(self.store, self.session, items, self.cache)

    def request(self) -> dict[str, Any]:
        """``system`` (when given) and ``messages``: ``client.messages.create(model=..., max_tokens=...,
        **history.request())``."""
        return self._request(self.messages())

    async def aadd(self, messages: Sequence[Mapping[str, Any] | Any]) -> Delta:
        params, usage = _params(messages)
        if not params:
            return Delta()
        return await on_store(self.store, "append_with", self.session, _builder(params, usage, self.options))

    async def amessages(self) -> list[dict]:
        try:
            items = await on_store(self.store, "view", self.session, ANTHROPIC_MESSAGES)
        except SessionNotFoundError:
            return []
        return _merged(self.store, self.session, items, self.cache)

    async def arequest(self) -> dict[str, Any]:
        return self._request(await self.amessages())

    def _request(self, messages: list[dict]) -> dict[str, Any]:
        if self.system is None:
            return {"messages": messages}
        system = list(self.system)
        # The API takes 4 breakpoints: one is left for the caller's tools, and the caller's own in the system
        # prompt count. Ours go in this order while they fit: the prompt's end, the system prompt's end (one
        # the caller set there, a 1-hour one say, stays), the end of what the next event leaves.
        room = _MAX_BREAKPOINTS - 1 - sum("cache_control" in b for b in system)
        if self.cache and "cache_control" not in system[-1] and room > 1:
            system = _with_breakpoint(system)
            room -= 1
        return {"system": system, "messages": _within(messages, max(room, 1))}

    def _blocking(self) -> PruneStore:
        return blocking(self.store, "aadd / amessages / arequest")


def _system(system: str | Sequence[Mapping[str, Any]] | None) -> list[dict] | None:
    """The system prompt as text blocks (the form a breakpoint needs); None or empty: no system prompt."""
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else None
    if system is None or (isinstance(system, Sequence) and not system):
        return None
    blocks: list[Any] = list(system) if isinstance(system, Sequence) else []
    if blocks and all(isinstance(b, Mapping) and b.get("type") == "text" for b in blocks):
        return [dict(b) for b in blocks]
    raise InvalidMessageError(f"system={shorten(system)}: a string or a list of text blocks")


def _with_breakpoint(blocks: list) -> list:
    return [*blocks[:-1], {**blocks[-1], "cache_control": dict(_BREAKPOINT)}]


def _within(messages: list[dict], room: int) -> list[dict]:
    """`messages` with at most `room` breakpoints, the earliest taken off first (the prompt's last stays)."""
    marked = [
        (i, j) for i, m in enumerate(messages) for j, b in enumerate(_blocks(m["content"])) if "cache_control" in b
    ]
    if len(marked) <= room:
        return messages
    out = list(messages)
    for i, j in marked[: len(marked) - room]:
        blocks = _blocks(out[i]["content"])
        blocks[j] = {k: v for k, v in blocks[j].items() if k != "cache_control"}
        out[i] = {"role": out[i]["role"], "content": blocks}
    return out


def _params(messages: Sequence[Mapping[str, Any] | Any]) -> tuple[list[dict], list[Any]]:
    """The messages as ``MessageParam`` dicts, and the output tokens each one's usage reported (or None).

    An SDK ``Message`` gives its role, content blocks and usage.
    """
    if isinstance(messages, (str, bytes, Mapping)) or hasattr(messages, "model_dump"):
        raise InvalidMessageError(f"messages={shorten(messages)}: expected a list of messages")
    out: list[dict] = []
    usage: list[Any] = []
    for index, message in enumerate(messages):
        usage.append(None)
        if hasattr(message, "model_dump"):  # the SDK's Message (a pydantic model), as create returns it
            dumped = message.model_dump(mode="json", exclude_none=True)
            message = {"role": dumped.get("role"), "content": dumped.get("content")}
            usage[-1] = (dumped.get("usage") or {}).get("output_tokens")
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            raise InvalidMessageError(f"messages[{index}]={shorten(message)}: not a user or assistant message")
        content = message.get("content")
        if isinstance(content, list) and all(isinstance(b, Mapping) and "type" in b for b in content):
            content = [dict(b) for b in content]
        elif not isinstance(content, str):
            raise InvalidMessageError(f"messages[{index}].content={shorten(content)}: a string or a list of blocks")
        out.append({"role": message["role"], "content": content})
    return out, usage


def _builder(
    messages: list[dict], usage: list[Any], options: dict[str, Any]
) -> Callable[[SessionState], list[Message]]:
    blocks = [(m, b) for m in messages if isinstance(m["content"], list) for b in m["content"]]
    made = {b.get("id") for m, b in blocks if m["role"] == "assistant" and b.get("type") == "tool_use"}
    answered = [b.get("tool_use_id") for _, b in blocks if b.get("type") == "tool_result"]
    for call_id in answered:
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(f"tool_result.tool_use_id={shorten(call_id)}: needed")

    def build(state: SessionState) -> list[Message]:
        importer = importer_after(state, [c for c in answered if c not in made], _calls, options)
        out = []
        seq = state.last_seq
        for original, output_tokens in zip(messages, usage, strict=True):
            role, content = original["role"], original["content"]
            if role == "assistant" or isinstance(content, str):
                seq += 1
                calls = [b for b in content if b.get("type") == "tool_use"] if isinstance(content, list) else []
                for call in calls:
                    importer.calls[call.get("id")] = (call.get("name"), call.get("input"))
                text = anthropic_text(content)
                turn = importer.advance(0, role == "user" and bool(text.strip()))
                metadata = {"anthropic": original}
                tokens = reported_tokens(options, output_tokens)
                stored = Message(f"ant-{seq}", role, text, turn, metadata=metadata, tokens=tokens)
                out.append(with_call_keys(stored, makes=[c.get("id") for c in calls]))
                continue
            starts = any(b.get("type") == "text" and b.get("text") for b in content)
            turn = importer.advance(0, starts)
            for part in _parts(content):
                seq += 1
                metadata = {"anthropic": {"role": role, "content": part}}
                if part[0].get("type") == "tool_result":
                    call_id = part[0]["tool_use_id"]
                    result = importer.result(
                        f"ant-{seq}", call_id, anthropic_text(part[0].get("content", "")), metadata
                    )
                    out.append(with_call_keys(result, answers=call_id))
                else:
                    out.append(Message(f"ant-{seq}", role, anthropic_text(part), turn, metadata=metadata))
        return out

    return build


def _parts(blocks: list[dict]) -> list[list[dict]]:
    """A user message's blocks: each tool_result alone, the runs of other blocks together."""
    parts: list[list[dict]] = []
    for block in blocks:
        if block.get("type") != "tool_result" and parts and parts[-1][0].get("type") != "tool_result":
            parts[-1].append(block)
        else:
            parts.append([block])
    return parts


def _calls(stored: StoredMessage) -> list[tuple[Any, Any, Any]]:
    content = ((stored.metadata or {}).get("anthropic") or {}).get("content")
    if not isinstance(content, list):
        return []
    return [(b.get("id"), b.get("name"), b.get("input")) for b in content if b.get("type") == "tool_use"]


class _AnthropicMessages:
    """Messages API messages as a `views.View` sends them: one item per stored message."""

    name = "anthropic-messages"
    indexed = True  # its call ids are among those `prunestore.sql.calls.call_ids` finds in the metadata

    def unit(self, message: StoredMessage) -> Unit:
        original = freeze((message.metadata or {}).get("anthropic"))  # shared by every caller: read-only
        if not isinstance(original, dict) or "role" not in original:  # appended by hand
            return Unit(
                freeze({"role": "assistant" if message.role == "assistant" else "user", "content": message.content})
            )
        content = original.get("content")
        first = content[0] if isinstance(content, list) and content else {}
        if original["role"] == "user" and first.get("type") == "tool_result":
            return Unit(original, answers=first.get("tool_use_id"))
        calls = tuple(b["id"] for b in content if b.get("type") == "tool_use") if isinstance(content, list) else ()
        return Unit(original, calls=calls)

    def without_calls(self, item: dict, dropped: frozenset[str]) -> dict | None:
        blocks = [b for b in item["content"] if b.get("type") != "tool_use" or b.get("id") not in dropped]
        said = [b for b in blocks if b.get("type") not in REASONING_BLOCKS]
        if not any(b.get("type") != "text" or b.get("text") for b in said):
            return None  # reasoning stays with the message's text or calls, and goes with the last of them
        return freeze({**item, "content": blocks})


ANTHROPIC_MESSAGES = _AnthropicMessages()


def alternating(items: Prompt, cache: bool) -> list[dict]:
    """The items as the API takes them: consecutive ones of a role merged (tool results first) and, with
    `cache`, breakpoints on the last block and on the last that the next removal event leaves in place."""
    messages: list[dict] = []
    ends: list[int] = []
    _merge(items, 0, messages, ends)
    return _sendable(messages, cache, _second_end(messages, ends, items.stable))


def _merge(items: list[dict], start: int, messages: list[dict], ends: list[int]) -> None:
    """Merge `items[start:]` onto `messages`; `ends[i]` is the index of the last item merged into message i.
    The messages are read-only (`prunestore.frozen`), so they can be kept and shared."""
    role = messages[-1]["role"] if messages else None
    for index in range(start, len(items)):
        item = items[index]
        if item["role"] != role:
            role = item["role"]
            messages.append(FrozenDict(role=role, content=item["content"]))
            ends.append(index)
            continue
        blocks = _blocks(messages[-1]["content"]) + _blocks(item["content"])
        if role == "user":  # the API wants a user message's tool results first
            blocks = [b for b in blocks if b.get("type") == "tool_result"] + [
                b for b in blocks if b.get("type") != "tool_result"
            ]
        messages[-1] = FrozenDict(role=role, content=FrozenList(blocks))
        ends[-1] = index


def _second_end(messages: list[dict], ends: list[int], kept: int) -> int:
    """The index of the last message whose blocks begin every prompt that keeps the first `kept` items
    (the next removal event's, or the previous call's that the cache holds); -1 for none.

    The messages made of those items alone stay, but the last of them may merge with what follows once
    the messages between go: an assistant's blocks stay first, a user's may not (its merged tool results
    go first), so then it is the message before.
    """
    if not ends or kept > ends[-1]:  # all of them: the last breakpoint is the one
        return -1
    whole = bisect_right(ends, kept - 1)  # messages whose items are all kept
    if whole and messages[whole - 1]["role"] == "user":
        whole -= 1
    return whole - 1


def _sendable(messages: list[dict], cache: bool, second: int = -1) -> list[dict]:
    """A new list of the shared read-only messages, with breakpoints on copies of the last one and of the
    one at index `second` (when it is another)."""
    out = list(messages)
    if cache:
        for index in {len(out) - 1, second} - {-1}:
            blocks = _blocks(out[index]["content"])
            if blocks:
                out[index] = {"role": out[index]["role"], "content": _with_breakpoint(blocks)}
    return out


class _Merged:
    """A session's items as last merged: the next call merges only from where the items differ."""

    __slots__ = ("items", "messages", "ends")

    def __init__(self, items: list[dict], messages: list[dict], ends: list[int]) -> None:
        self.items, self.messages, self.ends = items, messages, ends


_MERGED_SESSIONS = 256  # sessions per store whose merge is kept
_merged_by_store: weakref.WeakKeyDictionary[Any, OrderedDict[str, _Merged]] = weakref.WeakKeyDictionary()
_merged_lock = threading.Lock()


def _merged(store: Any, session: str, items: Prompt, cache: bool) -> list[dict]:
    """`alternating(items, cache)`, reusing the messages of the previous call on the session's items that
    are still the same objects (the view's items are shared until their row changes)."""
    with _merged_lock:
        kept = _merged_by_store.setdefault(store, OrderedDict())
        last = kept.pop(session, None)
    messages: list[dict] = []
    ends: list[int] = []
    kept_until = len(items)  # the items the previous call sent that this one sends unchanged, when it changed any
    if last is not None:
        same = common_prefix(last.items, items)
        # The messages whose items all lie in the common prefix, but the last of them: it may merge on.
        reuse = max(0, bisect_right(last.ends, same - 1) - 1)
        messages, ends = last.messages[:reuse], last.ends[:reuse]
        if same < len(last.items):  # an event, a comeback, a cut: the cache holds the prompt up to there
            kept_until = same
        elif sum(len(_blocks(item["content"])) for item in items[same:]) >= _LOOK_BACK:
            kept_until = same  # grown past what the last breakpoint looks back over: mark where it was
    _merge(items, ends[-1] + 1 if ends else 0, messages, ends)
    with _merged_lock:
        kept[session] = _Merged(items, messages, ends)
        while len(kept) > _MERGED_SESSIONS:
            kept.popitem(last=False)
    return _sendable(messages, cache, _second_end(messages, ends, min(items.stable, kept_until)))


def _blocks(content: str | list) -> list:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
