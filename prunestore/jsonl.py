"""The JSON Lines message format of the command line.

One JSON object per line with the `Message` fields (``id``, ``role``,
``content``, ``turn``; optional ``tool_key``, ``expires_after_turn``,
``defines``, ``refs``, ``metadata``, ``tokens``, ``summarizes``, and ``at`` as an ISO 8601
time with its offset) and, for ``prunestore import``, the
``session`` it belongs to. Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from .errors import InvalidMessageError, shorten
from .model import MESSAGE_FIELDS, Message

__all__ = ["parse_line", "read_numbered_lines", "to_json"]

_REQUIRED_IN_ORDER = ("id", "role", "content", "turn")
_REQUIRED = frozenset(_REQUIRED_IN_ORDER)
_KNOWN = frozenset(MESSAGE_FIELDS)
_LISTS = frozenset({"defines", "refs", "summarizes"})


def parse_line(line: str, number: int, *, session_field: bool) -> tuple[str | None, Message]:
    """One line as ``(session, Message)``; errors name the line and the field."""
    try:
        data = json.loads(line.rstrip("\r\n"))  # so that a position in the line is a column of this line
    except json.JSONDecodeError as exc:
        raise InvalidMessageError(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:
        raise InvalidMessageError(f"line {number}: not valid JSON ({exc})") from None
    except RecursionError:
        raise InvalidMessageError(f"line {number}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise InvalidMessageError(f"line {number}: expected a JSON object, got {shorten(data)}")
    session = data.pop("session", None)
    if session_field and session is None:
        raise InvalidMessageError(
            f'line {number}: no session: give each line a "session" field, or name one (prunestore append SESSION)'
        )
    if session_field and (not isinstance(session, str) or not session):
        raise InvalidMessageError(f"line {number}: session={shorten(session)}: a non-empty string is required")
    unknown = data.keys() - _KNOWN
    if unknown:
        raise InvalidMessageError(f"line {number}: unknown field {sorted(unknown)[0]!r}")
    if not _REQUIRED <= data.keys():
        missing = next(f for f in _REQUIRED_IN_ORDER if f not in data)
        raise InvalidMessageError(f"line {number}: missing field {missing!r}")
    for name in _LISTS.intersection(data):
        if isinstance(data[name], list):
            data[name] = tuple(data[name])
    if isinstance(data.get("at"), str):
        try:
            data["at"] = datetime.fromisoformat(data["at"])
        except ValueError:
            raise InvalidMessageError(f"line {number}: at={shorten(data['at'])}: not an ISO 8601 time") from None
    try:
        return session, Message(**data)
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"line {number}: {exc}") from None


def read_numbered_lines(lines: Iterable[str], *, session_field: bool) -> Iterator[tuple[int, str | None, Message]]:
    """Each non-blank line as ``(line number, session, Message)``."""
    for number, line in enumerate(lines, 1):
        if line.strip():
            yield number, *parse_line(line, number, session_field=session_field)


def to_json(message: Message, **extra: Any) -> dict[str, Any]:
    """A message as a JSON-ready dict (the Message fields, then `extra`), omitting unset optional fields."""
    out: dict[str, Any] = {}
    for name in MESSAGE_FIELDS:
        value = getattr(message, name)
        if value is None or value == ():
            continue
        out[name] = list(value) if isinstance(value, tuple) else value.isoformat() if name == "at" else value
    out.update(extra)
    return out
