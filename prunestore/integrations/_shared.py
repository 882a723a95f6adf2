"""What the framework adapters share: call keys, and reading the calls a stored message made.

A message that makes tool calls defines one dependency key per call, and
each result refers to the key of the call it answers. The store's key index
then says, for any call id, which message made the latest call with it (the
adapter reads the call's tool name and arguments from there, under the
session's lock, to key the result), and restoration keeps a call's message
alive while its result is live.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from ..aio import AsyncPruneStore
from ..errors import InvalidArgumentError, SessionNotFoundError, shorten
from ..formats.transcripts import Importer
from ..model import Message, StoredMessage
from ..sql.db import in_memory
from ..sql.sessions import SessionState
from ..store import PruneStore
from ..text import KEY_PATTERN

_MAX_PLAIN_ID = 100

# `on_store` asks on every call of every adapter: parsing the URL each time costs more than the call.
_in_memory = functools.lru_cache(maxsize=64)(in_memory)


def call_key(call_id: str) -> str:
    """The dependency key of a tool call: ``call-<id>``, or a hash of the id where the id is not a key."""
    if len(call_id) <= _MAX_PLAIN_ID and KEY_PATTERN.fullmatch(call_id):
        return f"call-{call_id}"
    return "call-" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def importer_after(
    state: SessionState,
    answered: Iterable[str],
    calls_of: Any,
    options: dict[str, Any],
) -> Importer:
    """An importer at the session's turn that knows the stored calls these results answer.

    `calls_of(stored)` gives ``(call id, tool name, arguments)`` for each call
    a stored message made.
    """
    importer = Importer(
        options.get("document_tools", ()),
        options.get("keep_tools", ()),
        options.get("ttl") or {},
        options.get("keys_of"),
        None,
        turn=state.current_turn,
    )
    wanted = set(answered)
    for stored in state.definers(call_key(c) for c in wanted).values():
        for call_id, name, arguments in calls_of(stored):
            if call_id in wanted:
                importer.calls[call_id] = (name, arguments)
    return importer


def unstored(state: SessionState, count: int, id_at: Callable[[int], str], last: str | None) -> list[int]:
    """The places, among `count` messages whose ids `id_at` gives, of those the session does not hold.

    The messages are the session's, in order, plus new ones: its last message (`last`, one indexed
    read) is found from the end, and what follows it is new. Where it is not among them (the list was
    rewritten, or another writer appended), each id is looked up.
    """
    start = next((p + 1 for p in range(count - 1, -1, -1) if id_at(p) == last), None) if last else 0
    if start is None:
        stored = state.stored(map(id_at, range(count)))
        return [p for p in range(count) if id_at(p) not in stored]
    return list(range(start, count))


# The keyword options of the adapters: how tool results are pruned (as for `from_openai`), and where a
# response's usage is at hand, whether its output tokens are its count.
PRUNING_OPTIONS = ("document_tools", "keep_tools", "ttl", "keys_of")
USAGE_OPTIONS = (*PRUNING_OPTIONS, "tokens_from_usage")


def checked_options(options: dict[str, Any], known: Sequence[str] = USAGE_OPTIONS) -> dict[str, Any]:
    """`options`, or `InvalidArgumentError` naming the first that is not among `known` (a typo is not ignored)."""
    unknown = [name for name in options if name not in known]
    if unknown:
        raise InvalidArgumentError(
            f"{unknown[0]}={shorten(options[unknown[0]])}: not an option here; the options are {', '.join(known)}"
        )
    return options


def reported_tokens(options: dict[str, Any], output_tokens: Any) -> int | None:
    """A response's tokens as its provider reported them, for `Message.tokens`, with ``tokens_from_usage=True``.

    The output tokens of the response that made the message: what the
    provider counted generating it. None without the option, or where no
    count came (a framework's usage of 0 is one it did not fill).
    """
    if not options.get("tokens_from_usage") or isinstance(output_tokens, bool) or not isinstance(output_tokens, int):
        return None
    return output_tokens if output_tokens > 0 else None


def with_call_keys(message: Message, *, makes: Sequence[str] = (), answers: str | None = None) -> Message:
    """`message` defining the keys of the calls it makes, or referring to the key of the call it answers."""
    defines = message.defines + tuple(call_key(c) for c in makes)
    refs = message.refs + ((call_key(answers),) if answers is not None else ())
    return replace(message, defines=defines, refs=refs)


async def on_store(store: PruneStore | AsyncPruneStore, name: str, *args: Any, **kwargs: Any) -> Any:
    """`store.<name>(*args, **kwargs)`: awaited on an `AsyncPruneStore`, run in a worker thread on a `PruneStore`.

    A `PruneStore` on an in-memory SQLite database is called in place: such a database is one
    connection's, and SQLAlchemy gives each thread a connection of its own (a worker thread would
    find an empty database); its calls do no I/O to wait for.
    """
    method = getattr(store, name)
    if isinstance(store, AsyncPruneStore):
        return await method(*args, **kwargs)
    if _in_memory(store.url):
        return method(*args, **kwargs)
    return await asyncio.to_thread(method, *args, **kwargs)


def blocking(store: PruneStore | AsyncPruneStore, instead: str) -> PruneStore:
    """The store, for an adapter's blocking methods; an `AsyncPruneStore` there is a mistake that names `instead`."""
    if not isinstance(store, PruneStore):
        raise TypeError(f"this history wraps an AsyncPruneStore: use {instead}")
    return store


RECALL_DESCRIPTION = (
    "Look up earlier messages of this conversation that are no longer in view (older tool results, "
    "passages, turns): give words they held. Returns the latest matches, oldest first."
)


# The recall tool's one argument, as JSON Schema: what every provider's tool definition takes, strict mode included.
RECALL_PARAMETERS = {
    "type": "object",
    "properties": {"words": {"type": "string", "description": "Words the earlier message held."}},
    "required": ["words"],
    "additionalProperties": False,
}


NO_WORDS = "No words to look for: call recall again with words the earlier message held."


class RecallTool:
    """The recall tool of a history for code that runs its own tool loop: `recall` / `arecall` answer a call.

    The class sets `_tool` to the tool's definition in its provider's format; `recall_tool` gives a copy.
    """

    session: str
    store: PruneStore | AsyncPruneStore
    _tool: dict[str, Any]

    def recall_tool(self) -> dict[str, Any]:
        """The definition of ``recall(words)``, for the request's ``tools``: a new dict each time."""
        return copy.deepcopy(self._tool)

    def recall(self, words: str) -> str:
        """The answer to a ``recall`` call, to send back as its result: the messages out of the prompt holding
        `words`, the latest ten (`PruneStore.recall`)."""
        return recall_answer_blocking(blocking(self.store, "arecall"), self.session, words)

    async def arecall(self, words: str) -> str:
        return await recall_answer(self.store, self.session, words)


def recall_answer_blocking(store: PruneStore, session: str, words: str) -> str:
    """What a recall tool answers, from a blocking store (`recall_answer`)."""
    if not _has_words(words):
        return NO_WORDS
    try:
        return recalled(store.recall(session, text=words))
    except SessionNotFoundError:
        return recalled([])


async def recall_answer(store: PruneStore | AsyncPruneStore, session: str, words: str) -> str:
    """What a recall tool answers: the session's messages out of the prompt holding `words` (`recalled`).

    A call with no words, or one made before the session holds a message, is answered rather than raised:
    the model is told, and the agent's loop goes on.
    """
    if not _has_words(words):
        return NO_WORDS
    try:
        return recalled(await on_store(store, "recall", session, text=words))
    except SessionNotFoundError:
        return recalled([])


def _has_words(words: object) -> bool:
    return isinstance(words, str) and bool(words.casefold().split())


def recalled(found: Sequence[StoredMessage]) -> str:
    """The text of a recall's messages: each with its role and turn, or that none was found."""
    if not found:
        return "Nothing earlier in this conversation matches."
    return "\n\n".join(f"[{m.role}, turn {m.turn}] {m.content}" for m in found)
