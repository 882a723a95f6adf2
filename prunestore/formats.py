"""Provider transcripts in, provider-valid prompts out.

`from_openai` and `from_anthropic` turn a Chat Completions or Messages
transcript into `Message`s: each tool result its own message, keyed by its
call (tool name plus canonical arguments) so a later identical call
supersedes it. The provider's original message, or the part of it a message
holds, goes into ``metadata`` under ``"openai"`` or ``"anthropic"``, so
nothing is lost and rendering can give it back exactly.

`render` turns stored messages back into a prompt a provider accepts: every
kept call has its result right after it, a call whose result is gone is
removed (or, with ``dropped="placeholder"``, its result says why it is
gone), an assistant message left empty is dropped, and Anthropic's
user/assistant alternation holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidMessageError, shorten
from .model import DUPLICATE, EXPIRED, LIVE_VERDICTS, SUPERSEDED, Message, StoredMessage
from .text import count_tokens

__all__ = [
    "ToolResult",
    "Continuation",
    "from_openai",
    "from_anthropic",
    "tool_key",
    "render",
    "Rendered",
    "RenderReport",
    "FORMATS",
]

FORMATS = ("openai", "anthropic", "text")
DROPPED_MODES = ("omit", "placeholder")
PLACEHOLDERS = {
    SUPERSEDED: "[result pruned: superseded by a later call of the same tool with the same arguments]",
    DUPLICATE: "[result pruned: duplicate of an earlier passage]",
    EXPIRED: "[result pruned: expired]",
}


@dataclass(frozen=True)
class ToolResult:
    """A tool result as the `keys_of` hook sees it: which call produced what."""

    name: str
    arguments: Any  # the parsed JSON arguments (OpenAI) or input (Anthropic); the raw string if not JSON
    content: str
    call_id: str


KeysHook = Callable[[ToolResult], "tuple[Iterable[str], Iterable[str]] | None"]


@dataclass
class Continuation:
    """Where a transcript imported in pieces left off: its turn, the calls made so far, the next position.

    Pass the same one to `from_openai` for each piece (a chat history adapter
    does, one turn at a time): tool results then find calls made in earlier
    pieces, turns keep counting and positional ids keep going.
    """

    turn: int = 0
    position: int = 0
    calls: dict[Any, tuple[Any, Any]] = field(default_factory=dict)  # call id -> (name, arguments)

    @classmethod
    def after(cls, stored: Sequence[Message]) -> Continuation:
        """The continuation of a session that holds `stored` (imported with `from_openai`)."""
        found = cls(turn=stored[-1].turn if stored else 0, position=len(stored))
        for message in stored:
            for call_id, name, arguments in openai_calls((message.metadata or {}).get("openai") or {}):
                found.calls[call_id] = (name, arguments)
        return found


def openai_calls(original: Mapping[str, Any]) -> list[tuple[Any, Any, Any]]:
    """The tool calls of a Chat Completions message: (call id, tool name, arguments string)."""
    calls = []
    for call in original.get("tool_calls") or []:
        function = call.get("function") or {}
        calls.append((call.get("id"), function.get("name"), function.get("arguments")))
    return calls


def tool_key(name: str, arguments: Any) -> str:
    """The name plus the canonical JSON of the arguments: equal calls share a key, different ones never do.

    A string that is not valid JSON is used as it is.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return f"{name}:{arguments}"
    return f"{name}:{json.dumps(arguments, sort_keys=True, separators=(',', ':'), ensure_ascii=False)}"


@dataclass
class _Importer:
    """What both importers share: turns, tool options, and how a tool result becomes a Message."""

    document_tools: Collection[str]
    keep_tools: Collection[str]
    ttl: Mapping[str, int]
    keys_of: KeysHook | None
    turns: Sequence[int] | None
    turn: int = 0
    calls: dict[Any, tuple[Any, Any]] = field(default_factory=dict)  # call id -> (name, arguments)

    def advance(self, index: int, starts_turn: bool) -> int:
        if self.turns is not None:
            if index >= len(self.turns):
                raise InvalidMessageError(f"turns: {len(self.turns)} given for more messages than that")
            self.turn = self.turns[index]
        elif starts_turn:
            self.turn += 1
        return self.turn

    def result(self, message_id: str, call_id: str, content: str, metadata: dict) -> Message:
        name, arguments = self.calls.get(call_id, (None, None))
        role, key, expires = "tool_output", None, None
        defines: tuple[str, ...] = ()
        refs: tuple[str, ...] = ()
        if name is not None:
            if name in self.document_tools:
                role = "retrieved_doc"
            elif name not in self.keep_tools:
                key = tool_key(name, arguments)
            if name in self.ttl:
                expires = self.turn + self.ttl[name]
            if self.keys_of is not None:
                parsed = arguments
                if isinstance(parsed, str):
                    try:
                        parsed = json.loads(parsed)
                    except ValueError:
                        pass
                found = self.keys_of(ToolResult(name, parsed, content, call_id))
                if found is not None:
                    defines, refs = tuple(found[0]), tuple(found[1])
        return Message(
            message_id,
            role,
            content,
            self.turn,
            tool_key=key,
            expires_after_turn=expires,
            defines=defines,
            refs=refs,
            metadata=metadata,
        )


def _check_list(name: str, value: object) -> list:
    if not isinstance(value, list):
        raise InvalidMessageError(f"{name}={shorten(value)}: expected a list of provider messages")
    return value


def _check_dict(name: str, value: object) -> dict:
    if not isinstance(value, dict):
        raise InvalidMessageError(f"{name}={shorten(value)}: expected a JSON object")
    return value


# -- OpenAI Chat Completions -------------------------------------------------

_OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


_OPENAI_PARTS = frozenset({"text", "image_url", "input_audio", "file", "refusal"})


def _openai_text(content: object, where: str | None = None) -> str:
    """The text of a content field: a string, or the text parts of a list (other parts named).

    On import (`where` names the message), a part of a type Chat Completions
    does not have (``tool_use``, ``tool_result``: an Anthropic transcript) is
    refused rather than stored as a placeholder.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidMessageError(f"{where}.content={shorten(content)}: expected a string or a list of parts")
    texts = []
    for number, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if where is None and not isinstance(part, dict):
            continue
        if where is not None and kind not in _OPENAI_PARTS:
            raise InvalidMessageError(
                f"{where}.content[{number}].type={shorten(kind)}: not a Chat Completions content part "
                "(an Anthropic transcript?)"
            )
        texts.append(part.get("text", "") if kind == "text" else f"[{kind or 'part'}]")
    return "\n".join(texts)


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
    result, else ``m<position>``; so importing a transcript again, or a longer
    one with the same start, appends only what is new. A `continuation`
    imports a transcript piece by piece (and is brought up to date).
    """
    start = continuation or Continuation()
    importer = _Importer(document_tools, keep_tools, ttl or {}, keys_of, turns, start.turn, start.calls)
    out = []
    for index, raw in enumerate(_check_list("messages", messages)):
        original = _check_dict(f"messages[{index}]", raw)
        role = original.get("role")
        metadata = {"openai": original}
        if role == "tool":
            call_id = original.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidMessageError(f"messages[{index}].tool_call_id={shorten(call_id)}: a tool message needs it")
            importer.advance(index, False)
            text = _openai_text(original.get("content"), f"messages[{index}]")
            out.append(importer.result(call_id, call_id, text, metadata))
            continue
        if role not in _OPENAI_ROLES:
            raise InvalidMessageError(f"messages[{index}].role={shorten(role)}: not a Chat Completions role")
        text = _openai_text(original.get("content"), f"messages[{index}]")
        calls = original.get("tool_calls") or []
        if role == "assistant":
            lines = [text] if text else []
            for call in _check_list(f"messages[{index}].tool_calls", calls):
                function = _check_dict(f"messages[{index}].tool_calls[].function", call.get("function"))
                importer.calls[call.get("id")] = (function.get("name"), function.get("arguments"))
                lines.append(f"{function.get('name')}({function.get('arguments')})")
            text = "\n".join(lines)
        turn = importer.advance(index, role == "user" and bool(text))
        given = original.get("id")
        message_id: str = given if isinstance(given, str) and given else f"m{start.position + index}"
        out.append(Message(message_id, _OPENAI_ROLES[role], text, turn, metadata=metadata))
    if continuation is not None:
        continuation.turn, continuation.position = importer.turn, start.position + len(out)
    return out


# -- Anthropic Messages -------------------------------------------------------


def _anthropic_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidMessageError(f"content={shorten(content)}: expected a string or a list of blocks")
    lines = []
    for block in content:
        if not isinstance(block, dict):
            raise InvalidMessageError(f"content block={shorten(block)}: expected a JSON object")
        kind = block.get("type")
        if kind == "text":
            lines.append(block.get("text", ""))
        elif kind == "tool_use":
            lines.append(f"{block.get('name')}({json.dumps(block.get('input'), sort_keys=True)})")
        elif kind == "tool_result":
            lines.append(_anthropic_text(block.get("content", "")))
        else:
            lines.append(f"[{kind}]")
    return "\n".join(lines)


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
    ``tool_use_id``); the blocks between them stay together as one message
    (id ``m<position>`` or ``m<position>.<part>``).
    """
    importer = _Importer(document_tools, keep_tools, ttl or {}, keys_of, turns)
    out = []
    if system is not None and system != "" and system != []:
        out.append(Message("system", "system", _anthropic_text(system), 0, metadata={"anthropic": {"system": system}}))
    for index, raw in enumerate(_check_list("messages", messages)):
        original = _check_dict(f"messages[{index}]", raw)
        role, content = original.get("role"), original.get("content")
        if role not in ("user", "assistant"):
            raise InvalidMessageError(f"messages[{index}].role={shorten(role)}: must be 'user' or 'assistant'")
        if isinstance(content, str):
            turn = importer.advance(index, role == "user" and bool(content))
            out.append(Message(f"m{index}", role, content, turn, metadata={"anthropic": original}))
            continue
        blocks = _check_list(f"messages[{index}].content", content)
        has_text = any(isinstance(b, dict) and b.get("type") == "text" and b.get("text") for b in blocks)
        turn = importer.advance(index, role == "user" and has_text)
        if role == "assistant":
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    importer.calls[block.get("id")] = (block.get("name"), block.get("input"))
            out.append(Message(f"m{index}", role, _anthropic_text(blocks), turn, metadata={"anthropic": original}))
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
                out.append(importer.result(call_id, call_id, _anthropic_text(part[0].get("content", "")), metadata))
            else:
                message_id = f"m{index}" if len(parts) == 1 else f"m{index}.{number}"
                out.append(Message(message_id, role, _anthropic_text(part), turn, metadata=metadata))
    return out


# -- rendering ----------------------------------------------------------------


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
class _Call:
    id: str
    name: str
    arguments: Any  # OpenAI: the arguments string; Anthropic: the input object


@dataclass
class _Item:
    """One stored message seen through its provider metadata."""

    message: StoredMessage
    role: str  # system, user, assistant or tool
    source: str | None  # "openai", "anthropic" or None (appended by hand)
    original: Any
    calls: list[_Call] = field(default_factory=list)
    call_id: str | None = None  # for a tool result
    content: str | None = None  # replaced content (a placeholder)


def _item(message: StoredMessage) -> _Item:
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    if isinstance(metadata.get("openai"), dict):
        original = metadata["openai"]
        if original.get("role") == "tool":
            return _Item(message, "tool", "openai", original, call_id=original.get("tool_call_id"))
        calls = [
            _Call(c.get("id"), c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
            for c in original.get("tool_calls") or []
        ]
        return _Item(message, _OPENAI_ROLES.get(original.get("role"), "user"), "openai", original, calls)
    if isinstance(metadata.get("anthropic"), dict):
        original = metadata["anthropic"]
        if "system" in original:
            return _Item(message, "system", "anthropic", original)
        content = original.get("content")
        if isinstance(content, list) and content and content[0].get("type") == "tool_result":
            return _Item(message, "tool", "anthropic", original, call_id=content[0].get("tool_use_id"))
        calls = [
            _Call(b.get("id"), b.get("name"), b.get("input"))
            for b in (content if isinstance(content, list) else [])
            if b.get("type") == "tool_use"
        ]
        return _Item(message, original.get("role", "user"), "anthropic", original, calls)
    role = {"system": "system", "assistant": "assistant"}.get(message.role, "user")
    return _Item(message, role, None, None)


def _plan(stored: Sequence[StoredMessage], dropped: str) -> tuple[list[tuple[_Item, list[_Item]]], int, int]:
    """Which items go out, in order, each assistant item with the results of the calls it keeps.

    Returns (sequence of (item, its results), calls removed, placeholders used).
    """
    items = [_item(m) for m in stored]
    results: dict[str, _Item] = {}
    callers: dict[str, _Item] = {}
    for item in items:
        if item.role == "tool" and item.call_id is not None:
            results.setdefault(item.call_id, item)
        for call in item.calls:
            callers.setdefault(call.id, item)
    removed = placeholders = 0
    plan: list[tuple[_Item, list[_Item]]] = []
    for item in items:
        live = item.message.verdict in LIVE_VERDICTS
        if item.role == "tool" and item.call_id in callers:
            continue  # goes out right after its call, or not at all
        if item.calls:
            answered = []
            for call in item.calls:
                result = results.get(call.id)
                if result is not None and result.message.verdict in LIVE_VERDICTS:
                    answered.append(result)
                elif result is not None and dropped == "placeholder" and live:
                    result.content = PLACEHOLDERS.get(result.message.verdict, "[result pruned]")
                    answered.append(result)
                    placeholders += 1
            kept_ids = {r.call_id for r in answered}
            removed += sum(call.id not in kept_ids for call in item.calls) if (live or answered) else 0
            if not live and not answered:
                continue
            plan.append((item, answered))
        elif live:
            plan.append((item, []))
    return plan, removed, placeholders


def render(stored: Sequence[StoredMessage], format: str = "openai", dropped: str = "omit") -> Rendered:
    """The live messages of a session as a prompt `format` accepts (see the module docstring)."""
    if format not in FORMATS:
        raise InvalidMessageError(f"format={shorten(format)}: must be one of {', '.join(FORMATS)}")
    if dropped not in DROPPED_MODES:
        raise InvalidMessageError(f"dropped={shorten(dropped)}: must be 'omit' or 'placeholder'")
    plan, removed, placeholders = _plan(stored, dropped)
    sent = [item for item, answered in plan for item in [item, *answered]]
    tokens_out = sum(count_tokens(item.content) if item.content is not None else item.message.tokens for item in sent)
    system: str | list | None = None
    text = ""
    if format == "openai":
        messages = _to_openai(plan)
    elif format == "anthropic":
        system, messages = _to_anthropic(plan)
    else:
        messages, text = [], _to_text(plan)
    report = RenderReport(
        messages_in=len(stored),
        messages_out=len(messages) if format != "text" else len(sent),
        tokens_in=sum(m.tokens for m in stored),
        tokens_out=tokens_out,
        calls_removed=removed,
        placeholders=placeholders,
    )
    return Rendered(format, messages, system, text, report)


def _kept_calls(item: _Item, answered: list[_Item]) -> list[_Call]:
    ids = {r.call_id for r in answered}
    return [call for call in item.calls if call.id in ids]


def _assistant_text(item: _Item) -> str:
    """An assistant item's own words (its calls apart); none when the message itself was pruned."""
    if item.message.verdict not in LIVE_VERDICTS:
        return ""
    if item.source == "openai":
        return _openai_text(item.original.get("content"))
    if item.source == "anthropic":
        content = item.original.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
    return item.message.content


def _result_text(item: _Item) -> str:
    if item.content is not None:
        return item.content
    if item.source == "anthropic":
        return _anthropic_text(item.original["content"][0].get("content", ""))
    if item.source == "openai":
        return _openai_text(item.original.get("content"))
    return item.message.content


def _to_openai(plan: list[tuple[_Item, list[_Item]]]) -> list[dict]:
    out: list[dict] = []
    for item, answered in plan:
        if item.role == "tool":  # a result whose call is not in the session: no valid tool message
            out.append({"role": "user", "content": _plain_text(item)})
        elif item.source == "openai" and item.role != "assistant":
            out.append(item.original)
        elif item.role == "assistant":
            calls = _kept_calls(item, answered)
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
                message = {"role": "assistant", "content": _assistant_text(item) or None}
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
                    out.append({"role": "tool", "tool_call_id": result.call_id, "content": _result_text(result)})
        else:
            role = "system" if item.role == "system" else "user"
            content = (
                _anthropic_text(item.original.get("system", "")) if item.role == "system" and item.source else None
            )
            out.append({"role": role, "content": content if content is not None else _plain_text(item)})
    return out


def _plain_text(item: _Item) -> str:
    if item.role == "tool":  # a result whose call is not in the session
        return f"[tool result] {_result_text(item)}"
    if item.source == "anthropic":
        return _anthropic_text(item.original.get("content", ""))
    return item.message.content


def _blocks(content: Any) -> list[dict]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _to_anthropic(plan: list[tuple[_Item, list[_Item]]]) -> tuple[str | list | None, list[dict]]:
    system_parts: list[Any] = []
    turns: list[dict] = []  # {"role", "parts": [content...]}, merged by role

    def add(role: str, content: Any) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["parts"].append(content)
        else:
            turns.append({"role": role, "parts": [content]})

    for item, answered in plan:
        if item.role == "system":
            system_parts.append(item.original["system"] if item.source == "anthropic" else _plain_or_openai(item))
            continue
        if item.role == "assistant":
            calls = _kept_calls(item, answered)
            live = item.message.verdict in LIVE_VERDICTS
            if item.source == "anthropic" and live and len(calls) == len(item.calls):
                content = item.original["content"]
            else:
                keep = {c.id for c in calls}
                if item.source == "anthropic" and live:
                    content = [
                        b
                        for b in _blocks(item.original["content"])
                        if b.get("type") != "tool_use" or b.get("id") in keep
                    ]
                else:
                    text = _assistant_text(item)
                    content = ([{"type": "text", "text": text}] if text else []) + [
                        {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)} for c in calls
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
                        [{"type": "tool_result", "tool_use_id": result.call_id, "content": _result_text(result)}],
                    )
            continue
        if item.source == "anthropic" and item.role != "tool":
            add(item.role, item.original["content"])
        else:
            add("user", _plain_or_openai(item))
    messages = []
    for turn in turns:
        parts = turn["parts"]
        if len(parts) == 1:
            content = parts[0]
        else:
            blocks = [b for part in parts for b in _blocks(part)]
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
        system = "\n\n".join(_anthropic_text(part) for part in system_parts)
    return system, messages


def _plain_or_openai(item: _Item) -> str:
    if item.source == "openai" and item.role != "tool":
        return _openai_text(item.original.get("content"))
    return _plain_text(item)


def _input(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return {"arguments": arguments}
    return arguments


def _to_text(plan: list[tuple[_Item, list[_Item]]]) -> str:
    lines = []
    for item, answered in plan:
        if item.role == "assistant":
            text = _assistant_text(item)
            if text:
                lines.append(f"assistant: {text}")
            for call in _kept_calls(item, answered):
                arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
                lines.append(f"assistant called {call.name}({arguments})")
            for result in answered:
                lines.append(f"tool result: {_result_text(result)}")
        elif item.role == "system":
            lines.append(f"system: {_plain_or_openai(item) if item.source != 'anthropic' else item.message.content}")
        else:
            lines.append(f"{item.role}: {item.message.content}")
    return "\n\n".join(lines)
