"""The index of tool calls: which messages make or answer each call id, so a prompt is read without the session.

A prompt sends a tool call only with its result, so whether a message goes
out can depend on other messages than the live ones: a pruned call whose
result is live goes out with that call, a live call whose result was pruned
goes out without it, and a call with no result waits only while nothing but
results follows it. `prompt_rows` reads what decides all of that: the live
messages, the last messages of the session back to one that answers no call,
and every message that makes or answers a call any of those name, found
through this index. Whatever reads those rows (rendering, a framework's view)
decides as it would from the whole session.

The index holds, for each message, the call ids its provider metadata names
(`call_ids`), a few more rather than one fewer: a row that names an id the
reader does not link only costs its read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..model import StoredMessage
from .driver import Driver, Statement
from .rows import FULL_COLUMNS, LIVE_MESSAGES, message_columns, seq_column, stored_message
from .session_row import SessionRow, live_params

INSERT_CALL = Statement("INSERT INTO prunestore_calls (session_id, call_id, seq) VALUES (:sid, :call_id, :seq)")
_BY_CALL = Statement(
    f"SELECT {message_columns('m')} FROM prunestore_calls c CROSS JOIN prunestore_messages m "
    "WHERE m.session_id = c.session_id AND m.seq = c.seq AND c.session_id = :sid AND c.call_id IN :ids"
)
_BEFORE = Statement(
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq <= :seq ORDER BY seq DESC LIMIT 20"
)
CALL_ROWS = Statement("SELECT call_id, seq FROM prunestore_calls WHERE session_id = :sid")

_ID_KEYS = ("tool_call_id", "tool_use_id", "call_id")  # a result's reference to its call, in any provider's shape
# Types whose ``id`` is a call id: calls, and the Responses API's local shell output, which names its call so.
_CALL_TYPES = (
    "tool_use",
    "server_tool_use",
    "mcp_tool_use",
    "tool_call",
    "function_call",
    "function",
    "local_shell_call_output",
)


def call_ids(metadata: Any) -> set[str]:
    """The call ids a message's metadata names: made (``tool_calls`` entries, ``tool_use`` blocks) or
    answered (``tool_call_id``, ``tool_use_id``, ``call_id``), in the shapes of every built-in format."""
    found: set[str] = set()
    todo = [(metadata, False)]
    while todo:
        value, in_calls = todo.pop()
        if isinstance(value, Mapping):
            for key in _ID_KEYS:
                if isinstance(value.get(key), str):
                    found.add(value[key])
            if isinstance(value.get("id"), str) and (in_calls or value.get("type") in _CALL_TYPES):
                found.add(value["id"])
            todo.extend((v, k == "tool_calls") for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            todo.extend((v, in_calls) for v in value)
    return found


def write_calls(driver: Driver, sid: int, messages: Iterable[tuple[int, Any]]) -> None:
    """The index's rows for messages given as (seq, metadata)."""
    rows = [
        {"sid": sid, "call_id": call, "seq": seq}
        for seq, metadata in messages
        if metadata
        for call in sorted(call_ids(metadata))
    ]
    if rows:
        driver.run_many(INSERT_CALL, rows)


Links = Callable[[StoredMessage], tuple[list[str | None], bool]]  # (call ids it names, whether it continues a step)


def prompt_rows(driver: Driver, row: SessionRow, links: Links) -> list[tuple[tuple, StoredMessage]] | None:
    """The rows that decide the session's prompt (see the module docstring), in seq order, each with its
    message (decoded once, for the caller too).

    `links` is the reader's own reading of a message: the call ids it makes
    or answers, and whether it continues the conversation's last step (a
    result, or a call that joins the calls before it: `views.Unit.joins`)
    rather than starting one; it is asked once a message. None when a call
    the rows name has no id (the index cannot find it): the caller reads the
    session.
    """
    sid, seq = row.session_id, row.last_seq
    read: dict[int, tuple[tuple, StoredMessage]] = {}
    linked: dict[int, tuple[list[str | None], bool]] = {}

    def take(r: tuple) -> StoredMessage:
        entry = read.get(seq_column(r))
        if entry is None:
            entry = read[seq_column(r)] = (r, stored_message(r))
        return entry[1]

    def link(message: StoredMessage) -> tuple[list[str | None], bool]:
        found = linked.get(message.seq)
        if found is None:
            found = linked[message.seq] = links(message)
        return found

    for r in driver.all(LIVE_MESSAGES, live_params(row)):
        take(r)
    while seq > 0:  # back to the message that began the conversation's last step
        before = driver.all(_BEFORE, {"sid": sid, "seq": seq})
        if not before or any(not link(take(r))[1] for r in before):
            break
        seq = seq_column(before[-1]) - 1
    asked: set[str | None] = set()
    todo = [message for _, message in read.values()]
    while todo:  # every message naming a call that the rows read name, until no new call comes up
        wanted = {call for message in todo for call in link(message)[0]} - asked
        if not all(isinstance(call, str) for call in wanted):
            return None
        asked |= wanted
        todo = []
        for r in driver.chunks(_BY_CALL, {"sid": sid}, "ids", sorted(wanted)) if wanted else ():
            if seq_column(r) not in read:
                todo.append(take(r))
    return [read[seq] for seq in sorted(read)]
