"""Anthropic Messages: transcripts in, prompts out (with its user/assistant alternation)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..errors import InvalidMessageError, shorten
from ..model import LIVE_VERDICTS, Message
from .plan import Item, as_blocks, assistant_text, call_input, kept_calls, plain_or_openai, result_text
from .text import anthropic_text
from .transcripts import Importer, KeysHook, check_dict, check_list

REASONING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def from_anthropic(
    messages: Sequence[Mapping[str, Any]],
    system: str | Sequence[Mapping[str, Any]] | None = None,
    *,
    document_tools: Collection[str] = (),
    keep_tools: Collection[str] = (),
    ttl: Mapping[str, int] | None = None,
    keys_of: KeysHook | None = None,
    turns: Sequence[int] | None = None,
) -> list[Message]:
    """Messages API messages (and the ``system`` prompt) as prunestore `Message`s.

    Each ``tool_result`` block becomes a message of its own (id: its
    ``tool_use_id``, and ``<tool_use_id>#<n>`` for the n-th result of an id
    used again); the blocks between them stay together as one message
    (id ``m<position>`` or ``m<position>.<part>``).
    """
    importer = Importer(document_tools, keep_tools, ttl or {}, keys_of, turns)
    out = []
    if system is not None and system != "" and system != []:
        out.append(Message("system", "system", anthropic_text(system), 0, metadata={"anthropic": {"system": system}}))
    for index, raw in enumerate(check_list("messages", messages)):
        original = check_dict(f"messages[{index}]", raw)
        role, content = original.get("role"), original.get("content")
        if role not in ("user", "assistant"):
            openai = role in ("system", "developer", "tool") or "tool_calls" in original
            raise InvalidMessageError(
                f"messages[{index}].role={shorten(role)}: must be 'user' or 'assistant'"
                + (" (an OpenAI transcript?)" if openai else "")
            )
        if isinstance(content, str):
            turn = importer.advance(index, role == "user" and bool(content))
            out.append(Message(f"m{index}", role, content, turn, metadata={"anthropic": original}))
            continue
        blocks = check_list(f"messages[{index}].content", content)
        has_text = any(isinstance(b, dict) and b.get("type") == "text" and b.get("text") for b in blocks)
        turn = importer.advance(index, role == "user" and has_text)
        if role == "assistant":
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    importer.calls[block.get("id")] = (block.get("name"), block.get("input"))
            out.append(Message(f"m{index}", role, anthropic_text(blocks), turn, metadata={"anthropic": original}))
            continue
        parts: list[list[dict]] = []  # runs of other blocks, and each tool_result alone
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                parts.append([block])
            elif parts and parts[-1][0].get("type") != "tool_result":
                parts[-1].append(block)
            else:
                parts.append([block])
        for number, part in enumerate(parts):
            metadata = {"anthropic": {"role": role, "content": part, "part_of": index}}
            if part[0].get("type") == "tool_result":
                call_id = part[0].get("tool_use_id")
                if not isinstance(call_id, str) or not call_id:
                    raise InvalidMessageError(f"messages[{index}] tool_result.tool_use_id={shorten(call_id)}: needed")
                out.append(
                    importer.result(
                        importer.result_id(call_id), call_id, anthropic_text(part[0].get("content", "")), metadata
                    )
                )
            else:
                message_id = f"m{index}" if len(parts) == 1 else f"m{index}.{number}"
                out.append(Message(message_id, role, anthropic_text(part), turn, metadata=metadata))
    return out


def to_anthropic(plan: list[tuple[Item, list[Item]]]) -> tuple[str | list | None, list[dict]]:
    system_parts: list[Any] = []
    turns: list[dict] = []  # {"role", "parts": [content...]}, merged by role

    def add(role: str, content: Any) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["parts"].append(content)
        else:
            turns.append({"role": role, "parts": [content]})

    for item, answered in plan:
        if item.role == "system":
            system_parts.append(item.original["system"] if item.source == "anthropic" else plain_or_openai(item))
            continue
        if item.role == "assistant":
            calls = kept_calls(item, answered)
            live = item.message.verdict in LIVE_VERDICTS
            if item.source == "anthropic" and live and len(calls) == len(item.calls):
                content = item.original["content"]
            else:
                keep = {c.id for c in calls}
                if item.source == "anthropic" and live:
                    content = [
                        b
                        for b in as_blocks(item.original["content"])
                        if b.get("type") != "tool_use" or b.get("id") in keep
                    ]
                    said = [b for b in content if b.get("type") not in REASONING_BLOCKS]
                    if not keep and not said:  # reasoning goes with the last of its calls, never on its own
                        content = []
                else:
                    text = assistant_text(item)
                    content = ([{"type": "text", "text": text}] if text else []) + [
                        {"type": "tool_use", "id": c.id, "name": c.name, "input": call_input(c.arguments)}
                        for c in calls
                    ]
            if not content:
                continue
            add("assistant", content)
            for result in answered:
                if result.source == "anthropic" and result.content is None:
                    add("user", result.original["content"])
                else:
                    add(
                        "user",
                        [{"type": "tool_result", "tool_use_id": result.call_id, "content": result_text(result)}],
                    )
            continue
        if item.source == "anthropic" and item.role != "tool":
            add(item.role, item.original["content"])
        else:
            add("user", plain_or_openai(item))
    messages = []
    for turn in turns:
        parts = turn["parts"]
        if len(parts) == 1:
            content = parts[0]
        else:
            blocks = [b for part in parts for b in as_blocks(part)]
            # Tool results first in a user message, as the API requires; otherwise the original order.
            content = [b for b in blocks if b.get("type") == "tool_result"] + [
                b for b in blocks if b.get("type") != "tool_result"
            ]
        messages.append({"role": turn["role"], "content": content})
    if not system_parts:
        system = None
    elif len(system_parts) == 1:
        system = system_parts[0]
    else:
        system = "\n\n".join(anthropic_text(part) for part in system_parts)
    return system, messages
