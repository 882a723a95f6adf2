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


def folded(content: str) -> str:
    """Content as the recall index holds it: casefolded (what a recall compares), NUL (in no word looked up) a space."""
    return content.casefold().replace("\x00", " ")


def folded_stored(stored: str, escaped: int) -> str:
    """`folded` of content as a table holds it (what the recall index's triggers call on SQLite)."""
    return folded(decode_content(stored, escaped))


def join_keys(keys: Iterable[str]) -> str:
    return " ".join(keys)


def split_keys(text: str) -> tuple[str, ...]:
    return tuple(text.split()) if text else ()
