"""Values as the tables hold them: message content (NUL-escaped on PostgreSQL) and lists of keys."""

from __future__ import annotations

import re
from collections.abc import Iterable

_ESCAPED = re.compile(r"\\([\\0])")


def encode_content(content: str, escape_nul: bool) -> tuple[str, int]:
    """PostgreSQL text cannot hold NUL: there, such content is stored backslash-escaped."""
    if escape_nul and "\x00" in content:
        return content.replace("\\", "\\\\").replace("\x00", "\\0"), 1
    return content, 0


def decode_content(stored: str, escaped: int) -> str:
    if not escaped:
        return stored
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else "\\", stored)


def join_keys(keys: Iterable[str]) -> str:
    return " ".join(keys)


def split_keys(text: str) -> tuple[str, ...]:
    return tuple(text.split()) if text else ()
