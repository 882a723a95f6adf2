"""A provider message's content read as plain text (for a message's content, and for plain renderings)."""

from __future__ import annotations

import json

from ..errors import InvalidMessageError, shorten
from ..model import Role

OPENAI_ROLES: dict[str, Role] = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


_OPENAI_PARTS = frozenset({"text", "image_url", "input_audio", "file", "refusal"})


def openai_text(content: object, where: str | None = None) -> str:
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


def anthropic_text(content: object) -> str:
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
            lines.append(anthropic_text(block.get("content", "")))
        else:
            lines.append(f"[{kind}]")
    return "\n".join(lines)
