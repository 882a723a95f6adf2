"""The values prunestore works on: messages, stored messages and the policy.

Validation happens when a value is built, so a bad message is refused before
it gets near a store, and the error names the field and the value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sized
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, Final, Literal, TypeVar, get_args

from .errors import InvalidMessageError, InvalidPolicyError, shorten
from .prices import PRICES, Prices
from .text import KEY_PATTERN, marker_defines, marker_refs

__all__ = [  # the values users meet; the helpers below serve the package
    "Message",
    "StoredMessage",
    "Policy",
    "Role",
    "Verdict",
    "RestoreMode",
    "EvictOrder",
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
    "LIVE_VERDICTS",
    "SURVIVING_VERDICTS",
    "BUDGET_VERDICTS",
    "PASS_1_SURVIVORS",
    "REFERRING_VERDICTS",
    "RESTORE_MODES",
    "EVICT_ORDERS",
    "MAX_IDENTIFIER_BYTES",
    "MAX_SESSION_NAME",
    "MAX_KEYS",
]

Role = Literal["system", "user", "assistant", "tool_output", "retrieved_doc", "erased"]
Verdict = Literal["kept", "restored", "superseded", "expired", "duplicate", "evicted", "pending", "erased"]
RestoreMode = Literal["transitive", "direct"]
EvictOrder = Literal["oldest", "definers_last"]

ROLES: frozenset[str] = frozenset(get_args(Role))

KEPT: Final = "kept"
RESTORED: Final = "restored"
SUPERSEDED: Final = "superseded"
EXPIRED: Final = "expired"
DUPLICATE: Final = "duplicate"
EVICTED: Final = "evicted"  # kept by the passes, taken out of the prompt to stay under the budget
PENDING: Final = "pending"  # dropped by the passes, still in the prompt until the next removal event
ERASED: Final = "erased"  # the role and the verdict of a message whose content `PruneStore.erase` removed
VERDICTS = (KEPT, RESTORED, SUPERSEDED, EXPIRED, DUPLICATE, EVICTED, PENDING, ERASED)
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
    (docs/semantics.md, "Cache expiry").
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
        if self.role == ERASED:
            _check_erased(self)
            object.__setattr__(self, "tokens", 0)

    def given_tokens(self) -> int | None:
        """The token count the caller gave, or None: the store's counter counts the message."""
        return self.tokens


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
    """The `defines` field plus every ``DEFINE:<key>`` marker in the content."""
    return frozenset(message.defines).union(marker_defines(message.content))


def effective_refs(message: Message) -> frozenset[str]:
    """The `refs` field plus every ``REF:<key>`` marker in the content."""
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

    def __post_init__(self) -> None:
        """Rows read back were validated on the way in; skip the checks."""

    def given_tokens(self) -> int | None:
        return self.tokens if self.tokens_given else None

    @property
    def live(self) -> bool:
        return self.verdict in LIVE_VERDICTS

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
        )


def supports(base: str, restored: bool, transitive: bool) -> bool:
    """Whether a message's refs count as support for their definers: kept ones, and restored ones in transitive mode.

    The one definition used by the maintainer, the audit and `explain` (docs/semantics.md, pass 5).
    """
    return base == KEPT or (transitive and restored)


RESTORE_MODES = ("transitive", "direct")
EVICT_ORDERS = ("oldest", "definers_last")


@dataclass(frozen=True)
class Policy:
    """What the passes drop, how restoration follows dependencies, and the token budget.

    `dedupe_roles` are the roles whose repeated contents are duplicates;
    `restore` is ``"transitive"`` (refs of restored messages restore more) or
    ``"direct"`` (only refs of kept messages count, as the reference article).
    `budget` caps the prompt's tokens by evicting the oldest messages no live
    message needs; `clear_at_least` gathers removals into events of at least
    that many tokens, so the prompt stays a growing prefix between them (and
    the provider's prompt cache warm); `pinned_roles` are never evicted.
    `evict` orders eviction: ``"oldest"`` first, or ``"definers_last"``: the
    oldest message that is no key's current definer first, definers only
    when none is left, so fewer facts leave and come back (a comeback
    rewrites the cached prompt after it). `cache_ttl` (seconds) is how long
    the provider keeps a cached prompt: a message said more than that after
    the one before it (`Message.at`) finds the cache cold, so it holds an
    event for whatever is pending, which then costs nothing extra.
    `prices` (a `prunestore.Prices` or a preset's name) keeps a ledger: each
    append records what the session's prompts cost so far, and what sending
    everything would have cost (docs/cost.md, "The ledger").
    See docs/semantics.md, "Budget and removal events" and "Cache expiry".
    """

    dedupe_roles: AbstractSet[str] = frozenset({"retrieved_doc"})  # stored as a frozenset
    restore: RestoreMode = "transitive"
    budget: int | None = None
    clear_at_least: int = 0
    pinned_roles: AbstractSet[str] = frozenset({"system"})
    evict: EvictOrder = "oldest"
    cache_ttl: int | None = None
    prices: Prices | None = None

    def __post_init__(self) -> None:
        if self.prices is not None:
            if isinstance(self.prices, str) and self.prices in PRICES:
                object.__setattr__(self, "prices", PRICES[self.prices])
            elif not isinstance(self.prices, Prices):
                raise InvalidPolicyError(
                    f"prices={shorten(self.prices)}: must be None, a prunestore.Prices or one of {', '.join(PRICES)}"
                )
        object.__setattr__(self, "dedupe_roles", _roles("dedupe_roles", self.dedupe_roles))
        object.__setattr__(self, "pinned_roles", _roles("pinned_roles", self.pinned_roles))
        if not isinstance(self.restore, str) or self.restore not in RESTORE_MODES:
            raise InvalidPolicyError(f"restore={shorten(self.restore)}: must be 'transitive' or 'direct'")
        if not isinstance(self.evict, str) or self.evict not in EVICT_ORDERS:
            raise InvalidPolicyError(f"evict={shorten(self.evict)}: must be 'oldest' or 'definers_last'")
        if self.budget is not None and not _count(self.budget, 1):
            raise InvalidPolicyError(f"budget={shorten(self.budget)}: must be None or an int >= 1 (tokens)")
        if not _count(self.clear_at_least, 0):
            raise InvalidPolicyError(f"clear_at_least={shorten(self.clear_at_least)}: must be an int >= 0 (tokens)")
        if self.cache_ttl is not None:
            if not _count(self.cache_ttl, 1):
                raise InvalidPolicyError(f"cache_ttl={shorten(self.cache_ttl)}: must be None or an int >= 1 (seconds)")
            if self.clear_at_least == 0:
                raise InvalidPolicyError(
                    f"cache_ttl={self.cache_ttl}: needs clear_at_least >= 1; without it removals never wait, "
                    "so an idle gap has nothing to clear"
                )

    @property
    def transitive(self) -> bool:
        return self.restore == "transitive"

    @property
    def gathers(self) -> bool:
        """Whether a budget or `clear_at_least` is set: removals then wait for events (else prompt = live)."""
        return self.budget is not None or self.clear_at_least > 0

    def to_json(self) -> str:
        values: dict[str, Any] = {
            "dedupe_roles": sorted(self.dedupe_roles),
            "restore": self.restore,
            "budget": self.budget,
            "clear_at_least": self.clear_at_least,
            "pinned_roles": sorted(self.pinned_roles),
            "evict": self.evict,
        }
        if self.cache_ttl is not None:  # written only when set: the policies stored before it read the same
            values["cache_ttl"] = self.cache_ttl
        if self.prices is not None:
            values["prices"] = asdict(self.prices)
        return json.dumps(values, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Policy:
        data = json.loads(text)
        return cls(
            dedupe_roles=frozenset(data["dedupe_roles"]),
            restore=data["restore"],
            budget=data.get("budget"),
            clear_at_least=data.get("clear_at_least", 0),
            pinned_roles=frozenset(data.get("pinned_roles", ["system"])),
            evict=data.get("evict", "oldest"),
            cache_ttl=data.get("cache_ttl"),
            prices=Prices(**data["prices"]) if data.get("prices") else None,
        )


def _roles(field_name: str, roles: object) -> frozenset[str]:
    if isinstance(roles, str) or not isinstance(roles, Iterable):
        raise InvalidPolicyError(f"{field_name}={shorten(roles)}: must be a set of roles")
    roles = list(roles)
    unknown = [r for r in roles if not isinstance(r, str) or r not in ROLES]
    if unknown:
        raise InvalidPolicyError(f"{field_name}={shorten(unknown)}: unknown role")
    if ERASED in roles:
        raise InvalidPolicyError(f"{field_name}={shorten(sorted(roles))}: an erased message is never in the prompt")
    return frozenset(roles)


def _count(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value < 2**63
