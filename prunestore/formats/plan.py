"""Rendering, the provider-neutral part: which stored messages go out, and each call with its result.

Every kept call has its result right after it; a call whose result was
pruned is removed (or, with ``dropped="placeholder"``, its result says why
it is gone). A call with no result stored:

- is *waiting* while nothing but results follows its message: it stays,
  last in the prompt, for the caller to add its result before sending;
- is *abandoned* once any other message follows: it is removed (or, with
  ``dropped="placeholder"``, gets a result saying none came), since
  providers refuse a call left without its result.

A result answers the last message before it that made its call id (some
providers number every turn's calls from the same id), and a call answered
twice goes out with its later result; a result no earlier message called
for is an ordinary message. An assistant message left empty is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import DUPLICATE, EVICTED, EXPIRED, LIVE_VERDICTS, SUPERSEDED, StoredMessage
from .text import OPENAI_ROLES, anthropic_text, openai_text

DROPPED_MODES = ("omit", "placeholder")
PLACEHOLDERS = {
    SUPERSEDED: "[result pruned: superseded by a later call of the same tool with the same arguments]",
    DUPLICATE: "[result pruned: duplicate of an earlier passage]",
    EXPIRED: "[result pruned: expired]",
    EVICTED: "[result pruned: evicted to stay under the token budget]",
}
ABANDONED = "[no result: the conversation went on without one]"


@dataclass(frozen=True)
class RenderReport:
    """What rendering did: messages and tokens in (stored) and out (sent), calls removed, placeholders used."""

    messages_in: int
    messages_out: int
    tokens_in: int
    tokens_out: int
    calls_removed: int
    placeholders: int


@dataclass(frozen=True)
class Rendered:
    """A prompt for one provider: ``messages`` (and ``system`` for Anthropic), or ``text``."""

    format: str
    messages: list[dict]
    system: str | list | None
    text: str
    report: RenderReport


@dataclass
class Call:
    id: str
    name: str
    arguments: Any  # OpenAI: the arguments string; Anthropic: the input object

    @property
    def shown(self) -> str:
        """``name(arguments)``, the arguments as given or as JSON."""
        arguments = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        return f"{self.name}({arguments})"


@dataclass
class Item:
    """One stored message seen through its provider metadata."""

    message: StoredMessage
    role: str  # system, user, assistant or tool
    source: str | None  # "openai", "anthropic" or None (appended by hand)
    original: Any
    calls: list[Call] = field(default_factory=list)
    call_id: str | None = None  # for a tool result
    content: str | None = None  # replaced content (a placeholder)
    waiting: set[str] = field(default_factory=set)  # ids of calls whose result is still to come


def item_of(message: StoredMessage) -> Item:
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    if isinstance(metadata.get("openai"), dict):
        original = metadata["openai"]
        if original.get("role") == "tool":
            return Item(message, "tool", "openai", original, call_id=original.get("tool_call_id"))
        calls = [
            Call(c.get("id"), c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
            for c in original.get("tool_calls") or []
        ]
        return Item(message, OPENAI_ROLES.get(original.get("role"), "user"), "openai", original, calls)
    if isinstance(metadata.get("anthropic"), dict):
        original = metadata["anthropic"]
        if "system" in original:
            return Item(message, "system", "anthropic", original)
        content = original.get("content")
        if isinstance(content, list) and content and content[0].get("type") == "tool_result":
            return Item(message, "tool", "anthropic", original, call_id=content[0].get("tool_use_id"))
        return Item(message, original.get("role", "user"), "anthropic", original, tool_uses(content))
    role = {"system": "system", "assistant": "assistant"}.get(message.role, "user")
    return Item(message, role, None, None)


def tool_uses(content: Any) -> list[Call]:
    """The calls of an Anthropic message's content: its ``tool_use`` blocks."""
    blocks = content if isinstance(content, list) else []
    return [Call(b.get("id"), b.get("name"), b.get("input")) for b in blocks if b.get("type") == "tool_use"]


# The items that go out, each with the results it answers; the calls removed; the placeholders used.
Planned = tuple[list[tuple[Item, list[Item]]], int, int]


def plan_prompt(stored: Sequence[StoredMessage], dropped: str, read: Mapping[int, Item] | None = None) -> Planned:
    """Which items go out, in order, each assistant item with the results of the calls it keeps; `read`
    holds items already made of some of the messages, by seq (fresh ones: planning changes them).

    Returns (sequence of (item, its results), calls removed, placeholders used).
    """
    made = read or {}
    items = [made.get(m.seq) or item_of(m) for m in stored]
    results: dict[int, dict[str, Item]] = {}  # a caller's place -> call id -> its result
    latest: dict[str, int] = {}  # call id -> the place of the last message before that made it
    paired: set[int] = set()  # the places of results that go out with their call
    for index, item in enumerate(items):
        if item.role == "tool" and item.call_id in latest:
            results[latest[item.call_id]][item.call_id] = item  # a later result of the call answers it
            paired.add(index)
        if item.calls:
            results[index] = {}
            latest.update((call.id, index) for call in item.calls)
    # The last message that is not a result: calls with no result made before it are abandoned.
    moved_on = max((i for i in range(len(items)) if i not in paired), default=-1)
    removed = placeholders = 0
    plan: list[tuple[Item, list[Item]]] = []
    for index, item in enumerate(items):
        live = item.message.verdict in LIVE_VERDICTS
        if index in paired:
            continue  # goes out right after its call, or not at all
        if item.calls:
            answered = []
            for call in item.calls:
                result = results[index].get(call.id)
                if result is not None and result.message.verdict in LIVE_VERDICTS:
                    answered.append(result)
                elif result is not None and dropped == "placeholder" and live:
                    result.content = PLACEHOLDERS.get(result.message.verdict, "[result pruned]")
                    answered.append(result)
                    placeholders += 1
                elif result is None and live and index == moved_on:
                    item.waiting.add(call.id)
                elif result is None and live and dropped == "placeholder":
                    answered.append(Item(item.message, "tool", None, None, call_id=call.id, content=ABANDONED))
                    placeholders += 1
            kept_ids = {r.call_id for r in answered} | item.waiting
            removed += sum(call.id not in kept_ids for call in item.calls) if (live or answered) else 0
            if not live and not answered:
                continue
            plan.append((item, answered))
        elif live:
            plan.append((item, []))
    if any(item.message.place is not None for item, _ in plan):
        # Each summary where its span began (docs/semantics.md, "Summaries"). A call and its results are one
        # entry and move as one: a span that begins at a result puts its summary after that call's group,
        # never between the call and a result.
        plan.sort(key=lambda entry: entry[0].message.prompt_order())
    return plan, removed, placeholders


def kept_calls(item: Item, answered: list[Item]) -> list[Call]:
    """The calls of `item` that go out: those with a result in `answered`, and those waiting for theirs."""
    ids = {r.call_id for r in answered} | item.waiting
    return [call for call in item.calls if call.id in ids]


def assistant_text(item: Item) -> str:
    """An assistant item's own words (its calls apart); none when the message itself was pruned."""
    if item.message.verdict not in LIVE_VERDICTS:
        return ""
    if item.source == "openai":
        return openai_text(item.original.get("content"))
    if item.source == "anthropic":
        content = item.original.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
    return item.message.content


def result_text(item: Item) -> str:
    if item.content is not None:
        return item.content
    if item.source == "anthropic":
        return anthropic_text(item.original["content"][0].get("content", ""))
    if item.source == "openai":
        return openai_text(item.original.get("content"))
    return item.message.content


def plain_text(item: Item) -> str:
    if item.role == "tool":  # a result whose call is not in the session
        return f"[tool result] {result_text(item)}"
    if item.source == "anthropic":
        return anthropic_text(item.original.get("content", ""))
    return item.message.content


def plain_or_openai(item: Item) -> str:
    if item.source == "openai" and item.role != "tool":
        return openai_text(item.original.get("content"))
    return plain_text(item)


def as_blocks(content: Any) -> list[dict]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def call_input(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return {"arguments": arguments}
    return arguments


def to_text(plan: list[tuple[Item, list[Item]]]) -> str:
    return "\n\n".join(text_blocks(plan))


def text_blocks(plan: list[tuple[Item, list[Item]]]) -> list[str]:
    """The text format's prompt, one block per message sent (with the results that answer it), to join."""
    blocks = []
    for item, answered in plan:
        lines = []
        if item.role == "assistant":
            text = assistant_text(item)
            if text:
                lines.append(f"assistant: {text}")
            for call in kept_calls(item, answered):
                lines.append(f"assistant called {call.shown}")
            for result in answered:
                lines.append(f"tool result: {result_text(result)}")
        elif item.role == "system":
            lines.append(f"system: {plain_or_openai(item) if item.source != 'anthropic' else item.message.content}")
        else:
            lines.append(f"{item.role}: {item.message.content}")
        if lines:
            blocks.append("\n\n".join(lines))
    return blocks
