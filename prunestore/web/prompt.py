"""The prompt as sent: what `render` gives for a session, laid out for people, and the calls it left out.

The page shows `render`'s own output (so it can never drift from what a
provider receives), each message as a list of parts: text, a call, a
result. What the wire prompt drops is listed beside it: each call that is
not sent, struck through, with the reason, linked to the stored message it
comes from (the pruned result, or the call's own message).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..formats import Dropped, Format, Rendered, render_plan
from ..formats.plan import ABANDONED, PLACEHOLDERS, item_of, plan_prompt, text_blocks
from ..model import LIVE_VERDICTS, StoredMessage

_PLACEHOLDER_TEXTS = (*PLACEHOLDERS.values(), ABANDONED)


@dataclass(frozen=True)
class Part:
    kind: str  # "text", "call", "result", "placeholder"
    text: str
    call_id: str | None = None
    source: str | None = None  # the stored message a placeholder stands for


@dataclass(frozen=True)
class WireMessage:
    role: str
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class LeftOut:
    """A call of a message the prompt sends (whole, or for its other calls) that it leaves out, and why."""

    call_id: str
    call: str  # name(arguments)
    caller: str  # id of the stored message that made it
    reason: str
    cause: str | None  # id of the stored message the reason is about (the pruned result), if any


@dataclass(frozen=True)
class PromptPage:
    format: str
    messages: tuple[WireMessage, ...]
    blocks: tuple[str, ...]  # the "text" format's prompt, one block per message sent, to be joined by blank lines
    left_out: tuple[LeftOut, ...]
    report: Any


def format_of(stored: Sequence[StoredMessage]) -> Format:
    """The provider format a session was imported from (its messages' metadata says), else OpenAI's."""
    for message in stored:
        if isinstance(message.metadata, dict) and "anthropic" in message.metadata:
            return "anthropic"
    return "openai"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") if part.get("type") == "text" else f"[{part.get('type', 'part')}]"
            for part in content
            if isinstance(part, dict)
        )
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _result(call_id: str | None, content: Any, sources: dict[str, str]) -> Part:
    text = _text(content)
    if text in _PLACEHOLDER_TEXTS:
        return Part("placeholder", text, call_id, sources.get(call_id or ""))
    return Part("result", text, call_id)


def _openai(messages: list[dict], sources: dict[str, str]) -> list[WireMessage]:
    out = []
    for m in messages:
        if m.get("role") == "tool":
            out.append(WireMessage("tool", (_result(m.get("tool_call_id"), m.get("content"), sources),)))
            continue
        parts = [Part("text", _text(m.get("content")))] if m.get("content") not in (None, "", []) else []
        for call in m.get("tool_calls") or []:
            function = call.get("function", {})
            parts.append(Part("call", f"{function.get('name')}({function.get('arguments')})", call.get("id")))
        out.append(WireMessage(m.get("role", "user"), tuple(parts)))
    return out


def _anthropic(system: Any, messages: list[dict], sources: dict[str, str]) -> list[WireMessage]:
    out = [WireMessage("system", (Part("text", _text(system)),))] if system else []
    for m in messages:
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        parts = []
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_use":
                arguments = json.dumps(block.get("input"), ensure_ascii=False)
                parts.append(Part("call", f"{block.get('name')}({arguments})", block.get("id")))
            elif kind == "tool_result":
                parts.append(_result(block.get("tool_use_id"), block.get("content", ""), sources))
            else:
                parts.append(Part("text", _text([block])))
        out.append(WireMessage(m.get("role", "user"), tuple(parts)))
    return out


def prompt_page(
    stored: Sequence[StoredMessage], format: Format, placeholders: bool, session: tuple[int, int] | None = None
) -> PromptPage:
    """`render`'s prompt for `format`, as parts, and every stored call it does not send.

    `stored` is the session's messages, or those that decide its prompt (`PruneStore.prompt_messages`)
    with the session's size as `session` (messages, tokens).
    """
    dropped: Dropped = "placeholder" if placeholders else "omit"
    whole = (len(stored), sum(m.tokens for m in stored)) if session is None else session
    rendered, blocks = _rendered(stored, format, dropped, whole)
    items = [item_of(m) for m in stored]
    results = {i.call_id: i.message for i in items if i.role == "tool" and i.call_id is not None}
    sources = {call_id: m.id for call_id, m in results.items()}
    if format == "openai":
        messages = _openai(rendered.messages, sources)
    elif format == "anthropic":
        messages = _anthropic(rendered.system, rendered.messages, sources)
    else:
        messages = []
    sent = {p.call_id for m in messages for p in m.parts if p.kind == "call"}
    left_out = []
    for item in items:
        for call in item.calls:
            if format == "text" or call.id in sent:
                continue
            if item.message.verdict not in LIVE_VERDICTS and not any(c.id in sent for c in item.calls):
                continue  # its whole message is out of the prompt (the session page says why), not just the call
            result = results.get(call.id)
            if result is not None:
                reason, cause = f"its result is {result.verdict}", result.id
            else:
                reason, cause = "abandoned: no result came, and the conversation went on", None
            left_out.append(LeftOut(call.id, call.shown, item.message.id, reason, cause))
    return PromptPage(format, tuple(messages), blocks, tuple(left_out), rendered.report)


def _rendered(
    stored: Sequence[StoredMessage], format: Format, dropped: Dropped, session: tuple[int, int]
) -> tuple[Rendered, tuple[str, ...]]:
    """The prompt as `render` gives it and, for the text format, its blocks: from one plan, which is
    garbage once they are made (the page goes on to make an item of every message)."""
    planned = plan_prompt(stored, dropped)
    blocks = tuple(text_blocks(planned[0])) if format == "text" else ()
    return render_plan(planned, format, session), blocks


@dataclass(frozen=True)
class CallMark:
    """A call a message of a window makes, and whether the prompt as sent keeps it (`reason` None) or why not."""

    call_id: str
    call: str  # name(arguments)
    reason: str | None
    cause: str | None  # id of the stored message the reason is about


def call_marks(
    messages: Sequence[StoredMessage], following: Sequence[StoredMessage], at_end: bool
) -> dict[int, tuple[CallMark, ...]]:
    """For each message of a window that makes calls (by seq), its calls and which the prompt drops.

    `messages` are the window's, `following` the ones read after it (results
    mostly follow their call closely), `at_end` whether those reach the
    session's end. The rule is `render`'s: a call whose result was pruned is
    dropped; one with no result stored is dropped once a message other than a
    result follows its message (abandoned). A call with no result among what
    was read is marked abandoned only when that reaches the session's end
    (its result could lie further on); otherwise it is shown without a mark.
    """
    items = [item_of(m) for m in (*messages, *following)]
    results: dict[str, StoredMessage] = {}
    for item in items:
        if item.role == "tool" and item.call_id is not None:
            results.setdefault(item.call_id, item.message)
    callers = {call.id for item in items for call in item.calls}
    marks: dict[int, tuple[CallMark, ...]] = {}
    for index, item in enumerate(items[: len(messages)]):
        if not item.calls:
            continue
        moved_on = any(not (i.role == "tool" and i.call_id in callers) for i in items[index + 1 :])
        shown = []
        for call in item.calls:
            result = results.get(call.id)
            reason = cause = None
            if result is not None:
                cause = result.id
                reason = None if result.verdict in LIVE_VERDICTS else f"its result is {result.verdict}"
            elif moved_on and at_end:
                reason = "abandoned: no result came, and the conversation went on"
            shown.append(CallMark(call.id, call.shown, reason, cause))
        marks[item.message.seq] = tuple(shown)
    return marks
