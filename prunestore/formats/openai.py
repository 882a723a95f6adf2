"""OpenAI Chat Completions: transcripts in, prompts out."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..errors import InvalidMessageError, shorten
from ..model import LIVE_VERDICTS, Message
from .plan import Item, assistant_text, kept_calls, plain_text, result_text
from .text import OPENAI_ROLES, anthropic_text, openai_text
from .transcripts import Continuation, Importer, KeysHook, check_dict, check_list


def from_openai(
    messages: Sequence[Mapping[str, Any]],
    *,
    document_tools: Collection[str] = (),
    keep_tools: Collection[str] = (),
    ttl: Mapping[str, int] | None = None,
    keys_of: KeysHook | None = None,
    turns: Sequence[int] | None = None,
    continuation: Continuation | None = None,
) -> list[Message]:
    """Chat Completions messages as prunestore `Message`s, one per provider message.

    Ids: the message's ``id`` when it has one, the ``tool_call_id`` for a tool
    result (``<tool_call_id>#<n>`` for the n-th result of a call id used again),
    else ``m<position>``; so importing a transcript again, or a longer
    one with the same start, appends only what is new. A `continuation`
    imports a transcript piece by piece (and is brought up to date).
    """
    start = continuation or Continuation()
    made, answered = dict(start.calls), dict(start.results)  # the continuation moves on only if the piece imports
    importer = Importer(document_tools, keep_tools, ttl or {}, keys_of, turns, start.turn, made, answered)
    out = []
    for index, raw in enumerate(check_list("messages", messages)):
        original = check_dict(f"messages[{index}]", raw)
        role = original.get("role")
        metadata = {"openai": original}
        if role == "tool":
            call_id = original.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidMessageError(f"messages[{index}].tool_call_id={shorten(call_id)}: a tool message needs it")
            importer.advance(index, False)
            text = openai_text(original.get("content"), f"messages[{index}]")
            out.append(importer.result(importer.result_id(call_id), call_id, text, metadata))
            continue
        if role not in OPENAI_ROLES:
            raise InvalidMessageError(f"messages[{index}].role={shorten(role)}: not a Chat Completions role")
        text = openai_text(original.get("content"), f"messages[{index}]")
        calls = original.get("tool_calls") or []
        if role == "assistant":
            lines = [text] if text else []
            for call in check_list(f"messages[{index}].tool_calls", calls):
                function = check_dict(f"messages[{index}].tool_calls[].function", call.get("function"))
                importer.calls[call.get("id")] = (function.get("name"), function.get("arguments"))
                lines.append(f"{function.get('name')}({function.get('arguments')})")
            text = "\n".join(lines)
        turn = importer.advance(index, role == "user" and bool(text))
        given = original.get("id")
        message_id: str = given if isinstance(given, str) and given else f"m{start.position + index}"
        out.append(Message(message_id, OPENAI_ROLES[role], text, turn, metadata=metadata))
    if continuation is not None:
        continuation.turn, continuation.position = importer.turn, start.position + len(out)
        continuation.calls, continuation.results = made, answered
    return out


def to_openai(plan: list[tuple[Item, list[Item]]]) -> list[dict]:
    out: list[dict] = []
    for item, answered in plan:
        if item.role == "tool":  # a result whose call is not in the session: no valid tool message
            out.append({"role": "user", "content": plain_text(item)})
        elif item.source == "openai" and item.role != "assistant":
            out.append(item.original)
        elif item.role == "assistant":
            calls = kept_calls(item, answered)
            live = item.message.verdict in LIVE_VERDICTS
            if item.source == "openai" and live and len(calls) == len(item.calls):
                message = item.original
            elif item.source == "openai":
                message = {k: v for k, v in item.original.items() if k != "tool_calls"}
                if not live:
                    message["content"] = None
                kept = {c.id for c in calls}
                chosen = [c for c in item.original.get("tool_calls") or [] if c.get("id") in kept]
                if chosen:
                    message["tool_calls"] = chosen
            else:
                message = {"role": "assistant", "content": assistant_text(item) or None}
                if calls:
                    message["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {
                                "name": c.name,
                                "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
                            },
                        }
                        for c in calls
                    ]
            if message.get("content") in (None, "", []) and not message.get("tool_calls"):
                continue
            out.append(message)
            for result in answered:
                if result.source == "openai" and result.content is None:
                    out.append(result.original)
                else:
                    out.append({"role": "tool", "tool_call_id": result.call_id, "content": result_text(result)})
        else:
            role = "system" if item.role == "system" else "user"
            content = anthropic_text(item.original.get("system", "")) if item.role == "system" and item.source else None
            out.append({"role": role, "content": content if content is not None else plain_text(item)})
    return out
