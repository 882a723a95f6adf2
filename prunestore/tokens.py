"""Token counters: word pieces by default, or a provider's exact encoding.

A store counts each message once, when it is appended, with the counter it
records by name (see docs/tokens.md). Any function of a text is a counter:
it counts a message's content. The built-in OpenAI encodings count more,
the message as the provider is sent it:

- 3 tokens for the message's framing (OpenAI's documented per-message
  overhead for Chat Completions),
- its role as sent (``tool`` for a tool output, ``user`` for a retrieved
  passage, or the role its provider metadata names),
- its content,
- each tool call it makes, from its provider metadata: the tool's name and
  its arguments (a Chat Completions arguments string as it is, Anthropic's
  input object as compact JSON).

A prompt also costs 3 tokens to prime the reply, once per request: that is
not a message's, so no message counts it.

The encodings come from the ``bpe-openai`` package (the ``openai-tokens``
extra), which ships OpenAI's ``o200k_base`` and ``cl100k_base`` files in
its wheel: counting works offline and needs no download at first use.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cached_property
from typing import Any, Protocol

from .errors import TokenizerMismatchError
from .formats.plan import tool_uses
from .formats.transcripts import openai_calls
from .text import count_tokens

__all__ = ["OpenAIEncoding", "o200k_base", "cl100k_base", "word_pieces", "message_tokens"]

PER_MESSAGE = 3  # OpenAI's framing of one chat message

_SENT_ROLES = {"system": "system", "user": "user", "assistant": "assistant", "tool_output": "tool"}


class Countable(Protocol):
    """What a counter reads of a message: `Message` and `StoredMessage` both are."""

    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def metadata(self) -> dict[str, Any] | None: ...
    def given_tokens(self) -> int | None: ...


class OpenAIEncoding:
    """Exact token counts by one of OpenAI's BPE encodings; its messages are counted as they are sent."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__module__ = __name__  # recorded by the store as prunestore.tokens:<name>
        self.__qualname__ = name

    def __repr__(self) -> str:
        return f"OpenAIEncoding({self.name!r})"

    @cached_property
    def _encoding(self) -> Any:
        try:
            import bpe_openai  # type: ignore[import-untyped]
        except ImportError:
            raise TokenizerMismatchError(
                f"tokenizer={self.name!r}: needs the bpe-openai package: pip install 'prunestore[openai-tokens]'"
            ) from None
        return bpe_openai.get_encoding(self.name)

    def require(self) -> None:
        """Load the encoding now: a missing package is an error when the store opens, not at the first append."""
        self._encoding  # noqa: B018 (loads and caches it)

    def __call__(self, text: str) -> int:
        """The tokens of `text`; special tokens such as ``<|endoftext|>`` count as the plain text they are."""
        return len(self._encoding.encode_ordinary(text))

    def count_message(self, message: Countable) -> int:
        """The tokens of the message as sent: framing, role, content and tool calls (see the module's notes)."""
        role, calls = sent_role_and_calls(message)
        total = PER_MESSAGE + self(role) + self(message.content)
        for name, arguments in calls:
            total += self(name) + self(arguments)
        return total


def sent_role_and_calls(message: Countable) -> tuple[str, list[tuple[str, str]]]:
    """The role a provider is sent for the message, and its tool calls as (name, arguments text)."""
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    role = _SENT_ROLES.get(message.role, "user")
    calls: list[tuple[str, str]] = []
    original = metadata.get("openai")
    if isinstance(original, dict):
        sent = original.get("role")
        role = sent if isinstance(sent, str) else role
        for _, name, arguments in openai_calls(original):
            calls.append((_text(name), _text(arguments)))
        return role, calls
    original = metadata.get("anthropic")
    if isinstance(original, dict):
        role = "system" if "system" in original else _text(original.get("role")) or role
        calls = [(_text(call.name), _text(call.arguments)) for call in tool_uses(original.get("content"))]
    return role, calls


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


o200k_base = OpenAIEncoding("o200k_base")
"""GPT-4o, GPT-4.1, GPT-5 and the o-series models."""
cl100k_base = OpenAIEncoding("cl100k_base")
"""GPT-4, GPT-3.5 Turbo and OpenAI's text-embedding-3 models."""
word_pieces = count_tokens
"""The default: the content's word pieces (`prunestore.text.count_tokens`)."""


def message_tokens(tokenizer: Callable[[str], int], message: Countable) -> int:
    """The tokens a store stores for `message`: those it was given (`Message.tokens`), or what `tokenizer` counts,
    the message as sent for a counter of whole messages, its content for any other."""
    given = message.given_tokens()
    if given is not None:
        return given
    count_message = getattr(tokenizer, "count_message", None)
    return count_message(message) if count_message is not None else tokenizer(message.content)
