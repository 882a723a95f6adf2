"""The policy: what the passes drop, how restoration follows dependencies, and the budget.

Validation happens when a policy is built, and the error names the field and the value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .errors import InvalidPolicyError, shorten
from .model import ERASED, ROLES
from .prices import PRICES, Prices

__all__ = ["Policy", "RestoreMode", "EvictOrder", "RESTORE_MODES", "EVICT_ORDERS"]

RestoreMode = Literal["transitive", "direct"]
EvictOrder = Literal["oldest", "definers_last"]

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
