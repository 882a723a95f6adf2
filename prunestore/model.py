"""The values prunestore works on: messages, stored messages and their verdicts.

Validation happens when a value is built, so a bad message is refused before
it gets near a store, and the error names the field and the value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sized
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Final, Literal, TypeVar, get_args

from .errors import InvalidMessageError, shorten
from .text import KEY_PATTERN, marker_defines, marker_refs

__all__ = [  # the values users meet; the helpers below serve the package
    "Message",
    "StoredMessage",
    "Role",
    "Verdict",
    "ROLES",
    "VERDICTS",
    "KEPT",
    "RESTORED",
    "SUPERSEDED",
    "EXPIRED",
    "DUPLICATE",
    "EVICTED",
    "PENDING",
    "ERASED",
    "UNNEEDED",
    "LIVE_VERDICTS",
    "SURVIVING_VERDICTS",
    "BUDGET_VERDICTS",
    "PASS_1_SURVIVORS",
    "REFERRING_VERDICTS",
    "MAX_IDENTIFIER_BYTES",
    "MAX_SESSION_NAME",
    "MAX_KEYS",
]

Role = Literal["system", "user", "assistant", "tool_output", "retrieved_doc", "erased"]
Verdict = Literal["kept", "restored", "superseded", "expired", "duplicate", "evicted", "pending", "erased", "unneeded"]

ROLES: frozenset[str] = frozenset(get_args(Role))

KEPT: Final = "kept"
RESTORED: Final = "restored"
SUPERSEDED: Final = "superseded"
EXPIRED: Final = "expired"
DUPLICATE: Final = "duplicate"
EVICTED: Final = "evicted"  # kept by the passes, taken out of the prompt to stay under the budget
PENDING: Final = "pending"  # dropped by the passes, still in the prompt until the next removal event
ERASED: Final = "erased"  # the role and the verdict of a message whose content `PruneStore.erase` removed
UNNEEDED: Final = "unneeded"  # a summary none of whose covered messages the budget evicted
VERDICTS = (KEPT, RESTORED, SUPERSEDED, EXPIRED, DUPLICATE, EVICTED, PENDING, ERASED, UNNEEDED)
# The verdict sets, defined here once and used by the engine, the SQL text (`sql.rows.sql_set`) and the views.
LIVE_VERDICTS = (KEPT, RESTORED, PENDING)  # live: what goes into the prompt
SURVIVING_VERDICTS = (KEPT, RESTORED)  # in the prompt because the passes keep it (not pending)
BUDGET_VERDICTS = (EVICTED, PENDING)  # the verdicts only a budget or removal events give
# Bases neither superseded nor expired: what pass 2 groups by content, and what a turn may still expire.
PASS_1_SURVIVORS = (KEPT, DUPLICATE)
# Messages whose refs may count for their definers: the passes keep them, in the prompt or evicted from it.
REFERRING_VERDICTS = (KEPT, RESTORED, EVICTED)


def was_restored(base: str, verdict: str) -> bool:
    """Whether restoration is what keeps a message, from its stored base and verdict: an evicted one
    keeps the base it had, so it was restored unless its base is kept."""
    return verdict == RESTORED or (verdict == EVICTED and base != KEPT)


def _fail(field_name: str, value: object, why: str) -> InvalidMessageError:
    return InvalidMessageError(f"{field_name}={shorten(value)}: {why}")


def _check_keys(field_name: str, keys: object) -> tuple[str, ...]:
    if isinstance(keys, str):
        raise _fail(field_name, keys, "must be a list of keys, not a single string")
    if not isinstance(keys, Iterable) or isinstance(keys, Mapping):
        raise _fail(field_name, keys, "must be a list of keys")
    result = tuple(keys)
    check_key_count(field_name, result)
    for key in result:
        if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
            raise _fail(field_name, key, "a key must match [A-Za-z0-9_-]+")
        if len(key) > MAX_IDENTIFIER_BYTES:
            raise _fail(field_name, key, f"a key must be at most {MAX_IDENTIFIER_BYTES} characters")
    return result


def check_key_count(field_name: str, keys: Sized) -> None:
    if len(keys) > MAX_KEYS:
        raise _fail(field_name, keys, f"{len(keys)} keys, over the limit of {MAX_KEYS}")


def encode_metadata(metadata: Mapping[str, Any] | None) -> str | None:
    """Metadata as JSON text; refuses what would not come back exactly as given."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise _fail("metadata", metadata, "must be a JSON object (dict) or None")
    try:
        text = json.dumps(metadata, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
        same = json.loads(text) == metadata
    except (TypeError, ValueError, RecursionError) as exc:
        raise _fail("metadata", metadata, f"not JSON-serializable ({exc})") from None
    if not same:
        raise _fail("metadata", metadata, "does not survive a JSON round trip (tuples or non-str keys?)")
    return text


@dataclass(frozen=True)
class Message:
    """One chat message, as the caller hands it to `prune` or `PruneStore.append`.

    `tokens`, when given (say, from the provider's reported usage), is the
    message's token count: the store keeps it instead of counting, and keeps
    it through a change of counter (docs/tokens.md). `at`, a timezone-aware
    time, is when the message was said; a policy's `cache_ttl` reads it
    (docs/semantics.md, "Cache expiry"). `summarizes`, the ids of earlier
    messages, makes it a summary of them: in the prompt while the budget
    keeps any of them out of it (docs/semantics.md, "Summaries").
    """

    id: str
    role: Role
    content: str
    turn: int
    tool_key: str | None = None
    expires_after_turn: int | None = None
    defines: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()
    metadata: dict[str, Any] | None = field(default=None, hash=False)
    tokens: int | None = None
    at: datetime | None = None
    summarizes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_identifier("id", self.id)
        if not isinstance(self.role, str) or self.role not in ROLES:
            raise _fail("role", self.role, f"must be one of {', '.join(sorted(ROLES))}")
        if not isinstance(self.content, str):
            raise _fail("content", self.content, "must be a string")
        _check_utf8("content", self.content)
        _check_turn("turn", self.turn, 0)
        if self.tool_key is not None:
            check_identifier("tool_key", self.tool_key)
        if self.expires_after_turn is not None:
            _check_turn("expires_after_turn", self.expires_after_turn, self.turn)
        object.__setattr__(self, "defines", _check_keys("defines", self.defines))
        object.__setattr__(self, "refs", _check_keys("refs", self.refs))
        encode_metadata(self.metadata)
        if self.tokens is not None:
            if isinstance(self.tokens, bool) or not isinstance(self.tokens, int):
                raise _fail("tokens", self.tokens, "must be an int or None")
            if not 0 <= self.tokens <= MAX_TOKENS:
                raise _fail("tokens", self.tokens, f"must be between 0 and {MAX_TOKENS}")
        if self.at is not None:
            if not isinstance(self.at, datetime) or self.at.utcoffset() is None:
                raise _fail("at", self.at, "must be a timezone-aware datetime (datetime.now(timezone.utc)) or None")
        if self.summarizes != ():
            object.__setattr__(self, "summarizes", _check_summarized(self))
        if self.role == ERASED:
            _check_erased(self)
            object.__setattr__(self, "tokens", 0)

    def given_tokens(self) -> int | None:
        """The token count the caller gave, or None: the store's counter counts the message."""
        return self.tokens


def _check_summarized(message: Message) -> tuple[str, ...]:
    """A summary names the earlier messages it stands for, and says nothing the passes read
    (docs/semantics.md, "Summaries"): its own keys would bring back what it stands for."""
    ids = message.summarizes
    if isinstance(ids, str) or not isinstance(ids, Iterable) or isinstance(ids, Mapping):
        raise _fail("summarizes", ids, "must be a list of message ids")
    result = tuple(ids)
    if not result:
        return result
    if len(result) > MAX_SUMMARIZED:
        raise _fail("summarizes", result, f"{len(result)} ids, over the limit of {MAX_SUMMARIZED}")
    for covered in result:
        check_identifier("summarizes", covered)
    if message.id in result:
        raise _fail("summarizes", message.id, "a summary cannot summarize itself")
    seen: set[str] = set()
    for covered in result:
        if covered in seen:
            raise _fail("summarizes", covered, "names the same message twice")
        seen.add(covered)
    said = {
        "tool_key": message.tool_key,
        "expires_after_turn": message.expires_after_turn,
        "defines": message.defines,
        "refs": message.refs,
    }
    for name, value in said.items():
        if value not in (None, ()):
            raise _fail(name, value, "a summary holds none: it stands for its messages, and the passes do not read it")
    return result


def _check_erased(message: Message) -> None:
    """An erased message keeps its id, turn and time, and nothing it said (docs/semantics.md, "Erasure")."""
    said = {
        "content": message.content,
        "tool_key": message.tool_key,
        "expires_after_turn": message.expires_after_turn,
        "defines": message.defines,
        "refs": message.refs,
        "metadata": message.metadata,
        "tokens": message.tokens,
        "summarizes": message.summarizes,
    }
    for name, value in said.items():
        if value not in (None, "", (), 0):
            raise _fail(name, value, "an erased message holds none (role='erased' keeps only id, turn and at)")


MAX_TOKENS = 2**31 - 1  # a message's tokens are stored as a 32-bit integer

MAX_TURN = 2**63 - 1  # turns are stored as 64-bit integers


def _check_turn(field_name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field_name, value, "must be an int")
    if value < minimum:
        raise _fail(field_name, value, f"must be >= {minimum}" + (" (the turn)" if field_name != "turn" else ""))
    if value > MAX_TURN:
        raise _fail(field_name, value, f"must be <= {MAX_TURN}")


MAX_SESSION_NAME = 512  # characters of a session name
MAX_IDENTIFIER_BYTES = 1024  # an id, tool key or key, UTF-8 encoded: PostgreSQL indexes hold up to 2,704 bytes
MAX_KEYS = 10_000  # keys a message defines or refers to, in a field or by content markers
MAX_SUMMARIZED = 100_000  # messages one summary stands for


def check_identifier(field_name: str, value: object) -> None:
    """Identifiers (id, tool_key): non-empty strings, UTF-8, no NUL, at most `MAX_IDENTIFIER_BYTES`."""
    if not isinstance(value, str) or not value:
        raise _fail(field_name, value, "must be a non-empty string")
    if "\x00" in value:
        raise _fail(field_name, value, "must not contain NUL")
    _check_utf8(field_name, value)
    if len(value) * 4 > MAX_IDENTIFIER_BYTES and len(value.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
        raise _fail(field_name, value, f"longer than {MAX_IDENTIFIER_BYTES} bytes as UTF-8")


def storable_text_problem(value: str) -> str | None:
    """Why a database column cannot hold `value` as text (a NUL, a lone surrogate), or None."""
    if "\x00" in value:
        return "must not contain NUL"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "cannot be encoded as UTF-8"
    return None


def _check_utf8(field_name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _fail(field_name, value, f"cannot be encoded as UTF-8 ({exc.reason})") from None


MESSAGE_FIELDS = tuple(f.name for f in fields(Message))
M = TypeVar("M", bound=Message)


def unchecked(cls: type[M], values: dict[str, Any]) -> M:
    """A Message (or StoredMessage) from values validated before, skipping the checks.

    For rows read back and lines a worker validated: construction is the hot
    part of reading thousands of them. `values` becomes the instance's
    attribute dict; it must hold every field.
    """
    message = object.__new__(cls)
    object.__setattr__(message, "__dict__", values)
    return message


def effective_defines(message: Message) -> frozenset[str]:
    """The `defines` field plus every ``DEFINE:<key>`` marker in the content (none in a summary's)."""
    if message.summarizes:
        return frozenset()
    return frozenset(message.defines).union(marker_defines(message.content))


def effective_refs(message: Message) -> frozenset[str]:
    """The `refs` field plus every ``REF:<key>`` marker in the content (none in a summary's)."""
    if message.summarizes:
        return frozenset()
    return frozenset(message.refs).union(marker_refs(message.content))


@dataclass(frozen=True, kw_only=True)
class StoredMessage(Message):
    """A `Message` as the store holds it: its position, verdict and token count.

    `base` is the verdict before restoration (kept, superseded, expired or
    duplicate); it differs from `verdict` only for a restored message, where
    it says why the message would otherwise be gone.
    """

    seq: int
    verdict: Verdict
    tokens: int  # as stored: counted by the store's counter, or given
    base: Verdict  # the verdict of passes 1-2 alone: kept, superseded, expired or duplicate
    tokens_given: bool = False  # `tokens` came with the message (`Message.tokens`), not from the counter
    place: int | None = None  # a summary's place in the prompt: the seq where its span began; None for others

    def __post_init__(self) -> None:
        """Rows read back were validated on the way in; skip the checks."""

    def given_tokens(self) -> int | None:
        return self.tokens if self.tokens_given else None

    @property
    def live(self) -> bool:
        return self.verdict in LIVE_VERDICTS

    def prompt_order(self) -> tuple[int, bool, int]:
        """Its sort key in the prompt: by place (a summary stands where its span began, before the message
        there), then seq (docs/semantics.md, "Summaries")."""
        return (self.seq if self.place is None else self.place, self.place is None, self.seq)

    def to_message(self) -> Message:
        """The plain `Message`, as it was appended."""
        return Message(
            id=self.id,
            role=self.role,
            content=self.content,
            turn=self.turn,
            tool_key=self.tool_key,
            expires_after_turn=self.expires_after_turn,
            defines=self.defines,
            refs=self.refs,
            metadata=self.metadata,
            tokens=self.given_tokens(),
            at=self.at,
            summarizes=self.summarizes,
        )


def supports(base: str, restored: bool, transitive: bool) -> bool:
    """Whether a message's refs count as support for their definers: kept ones, and restored ones in transitive mode.

    The one definition used by the maintainer, the audit and `explain` (docs/semantics.md, pass 5).
    """
    return base == KEPT or (transitive and restored)
