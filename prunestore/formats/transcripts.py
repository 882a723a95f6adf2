"""What importing any provider's transcript shares: tool results keyed by their call, turns, continuations.

A tool result becomes a message of its own, keyed by its call (tool name plus
canonical arguments), so a later identical call supersedes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidMessageError, shorten
from ..model import MAX_IDENTIFIER_BYTES, Message, Role


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
    pieces, turns keep counting, and positional ids and the ids of results of
    a reused call id keep going.
    """

    turn: int = 0
    position: int = 0
    calls: dict[Any, tuple[Any, Any]] = field(default_factory=dict)  # call id -> (name, arguments)
    results: dict[str, int] = field(default_factory=dict)  # call id -> how many results of it came so far

    @classmethod
    def after(cls, stored: Sequence[Message]) -> Continuation:
        """The continuation of a session that holds `stored` (imported with `from_openai`)."""
        found = cls(turn=stored[-1].turn if stored else 0, position=len(stored))
        for message in stored:
            original = (message.metadata or {}).get("openai") or {}
            for call_id, name, arguments in openai_calls(original):
                found.calls[call_id] = (name, arguments)
            if original.get("role") == "tool" and isinstance(original.get("tool_call_id"), str):
                call_id = original["tool_call_id"]
                found.results[call_id] = found.results.get(call_id, 0) + 1
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

    A string that is not valid JSON is used as it is. Arguments too long for a
    key (`model.MAX_IDENTIFIER_BYTES`) are replaced by their SHA-256, which
    keeps equal calls equal.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return _bounded(name, arguments)
    return _bounded(name, json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def _bounded(name: str, arguments: str) -> str:
    key = f"{name}:{arguments}"
    if len(key.encode("utf-8", "surrogatepass")) <= MAX_IDENTIFIER_BYTES:
        return key
    digest = hashlib.sha256(arguments.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{name[:200]}:sha256:{digest}"  # 200 characters are at most 800 bytes


@dataclass
class Importer:
    """What both importers share: turns, tool options, and how a tool result becomes a Message."""

    document_tools: Collection[str]
    keep_tools: Collection[str]
    ttl: Mapping[str, int]
    keys_of: KeysHook | None
    turns: Sequence[int] | None
    turn: int = 0
    calls: dict[Any, tuple[Any, Any]] = field(default_factory=dict)  # call id -> (name, arguments)
    results: dict[str, int] = field(default_factory=dict)  # call id -> how many results of it came so far

    def result_id(self, call_id: str) -> str:
        """A transcript's tool result's id: its call id, and ``<call id>#<n>`` for the n-th result of a call
        id that the provider used again (some number every turn's calls from ``call_0``)."""
        count = self.results[call_id] = self.results.get(call_id, 0) + 1
        return call_id if count == 1 else f"{call_id}#{count}"

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
        role: Role = "tool_output"
        key, expires = None, None
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
                    found_defines, found_refs = found
                    defines, refs = tuple(found_defines), tuple(found_refs)
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


def check_list(name: str, value: object) -> list:
    if not isinstance(value, list):
        raise InvalidMessageError(f"{name}={shorten(value)}: expected a list of provider messages")
    return value


def check_dict(name: str, value: object) -> dict:
    if not isinstance(value, dict):
        raise InvalidMessageError(f"{name}={shorten(value)}: expected a JSON object")
    return value
