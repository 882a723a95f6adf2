"""The store's settings: its policy, the tokenizer that counted its tokens, and their generation.

Every store object works under the settings recorded in the database. A
change (`PruneStore.rebuild(policy=..., tokenizer=...)`) rebuilds every
session in one transaction and numbers the new settings with the next
generation, and each session row records the generation its state was
computed under. So a store object opened before a change learns of it from
the first session row it reads, and takes up the new settings before it
writes (see docs/api.md, "Changing the policy").

A tokenizer is recorded by its import path (``module:qualified.name``), so
another process can load the same function.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

from sqlalchemy.engine import Engine

from ..errors import InvalidPolicyError, PolicyMismatchError, TokenizerMismatchError, shorten
from ..policy import Policy
from ..text import count_tokens
from . import db
from .driver import Driver, Statement

_READ = "SELECT name, value FROM prunestore_settings WHERE name IN ('policy', 'tokenizer', 'generation')"
_SELECT = Statement(_READ)
# A writer creating a session holds the settings rows until it commits, so that a change waits for it
# and then rebuilds that session too (PostgreSQL; SQLite writers hold the whole database).
_SELECT_SHARED = Statement(_READ + " FOR SHARE")
_INSERT = "INSERT INTO prunestore_settings (name, value) VALUES (:name, :value) ON CONFLICT (name) DO "
_PUT = Statement(_INSERT + "UPDATE SET value = excluded.value")
_PUT_NEW = Statement(_INSERT + "NOTHING")


@dataclass(frozen=True)
class Settings:
    """What the store records: the policy, the tokenizer's import path (None before it was recorded), the generation."""

    policy: Policy
    tokenizer: str | None
    generation: int = 0


def read_settings(driver: Driver, *, share: bool = False) -> Settings | None:
    """The recorded settings, or None in a store that records none yet; `share` holds them until commit."""
    rows = dict(driver.all(_SELECT_SHARED if share and driver.postgres else _SELECT, {}))
    if "policy" not in rows:
        return None
    return Settings(Policy.from_json(rows["policy"]), rows.get("tokenizer"), int(rows.get("generation", 0)))


def write_settings(driver: Driver, settings: Settings, *, overwrite: bool = True) -> None:
    """Record `settings`: every row, so that writers holding them shared are waited for.

    Without `overwrite`, only the rows not recorded yet (two stores opened at once record one policy).
    """
    policy = settings.policy.to_json()
    values = {"policy": policy, "generation": str(settings.generation), f"policy.{settings.generation}": policy}
    if settings.tokenizer is not None:
        values["tokenizer"] = settings.tokenizer
    driver.run_many(_PUT if overwrite else _PUT_NEW, [{"name": name, "value": value} for name, value in values.items()])


_POLICIES = Statement("SELECT name, value FROM prunestore_settings WHERE name LIKE 'policy.%'")


def recorded_policies(driver: Driver) -> dict[int, Policy]:
    """The policy of each generation of the settings that recorded one (from revision 0010 on)."""
    return {int(name.split(".", 1)[1]): Policy.from_json(value) for name, value in driver.all(_POLICIES, {})}


def tokenizer_name(tokenizer: Callable[[str], int]) -> str:
    """The import path a tokenizer is recorded by: ``module:qualified.name``."""
    module = getattr(tokenizer, "__module__", None) or type(tokenizer).__module__
    qualname = getattr(tokenizer, "__qualname__", None) or type(tokenizer).__qualname__
    return f"{module}:{qualname}"


DEFAULT_TOKENIZER = tokenizer_name(count_tokens)


BUILT_IN = {
    "word_pieces": DEFAULT_TOKENIZER,
    "o200k_base": "prunestore.tokens:o200k_base",
    "cl100k_base": "prunestore.tokens:cl100k_base",
}
"""The counters named by short names: ``PruneStore(tokenizer="o200k_base")``, ``--tokenizer o200k_base``."""


def load_tokenizer(name: str) -> Callable[[str], int]:
    """The function recorded as `name` (or a built-in's short name); `TokenizerMismatchError` when this process
    cannot import it, or a built-in cannot load what it needs."""
    found, failure = _imported(name)
    if found is None:
        raise TokenizerMismatchError(
            f"tokenizer={name!r}: the store's tokens were counted by this function, which {failure}; "
            "pass it as PruneStore(tokenizer=...)"
        )
    return require(found)


def _imported(name: str) -> tuple[Callable[[str], int] | None, str | None]:
    """The function named `name` (an import path or a built-in's short name), or why there is none."""
    module_name, _, qualname = BUILT_IN.get(name, name).partition(":")
    try:
        found: object = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as exc:
        return None, f"cannot be imported here ({exc})"
    if not callable(found):
        return None, "is not a function"
    return cast(Callable[[str], int], found), None


def chosen_tokenizer(tokenizer: Callable[[str], int] | str | None) -> Callable[[str], int] | None:
    """The counter a caller chose: a function of a text, an import path or a built-in's short name, or None."""
    if tokenizer is None:
        return None
    if isinstance(tokenizer, str):
        named = tokenizer in BUILT_IN or ":" in tokenizer
        found, failure = _imported(tokenizer) if named else (None, "not a counter")
        if found is None:
            raise InvalidPolicyError(
                f"tokenizer={shorten(tokenizer)}: {failure}; give one of {', '.join(BUILT_IN)}, "
                "a function's import path (module:name) or the function"
            )
        return require(found)
    if not callable(tokenizer):
        raise InvalidPolicyError(f"tokenizer={shorten(tokenizer)}: expected a function of a text, or its name")
    return require(tokenizer)


def require(tokenizer: Callable[[str], int]) -> Callable[[str], int]:
    """`tokenizer`, with what it needs loaded now (a built-in encoding's package): a missing one is refused
    when the store opens, not at its first append."""
    load = getattr(tokenizer, "require", None)
    if load is not None:
        load()
    return tokenizer


def recorded_settings(engine: Engine, policy: Policy | None, tokenizer: Callable[[str], int] | None) -> Settings:
    """The settings the store records, recorded now if it has none; a different explicit policy or tokenizer is refused.

    A store from before tokenizers were recorded records the one it is opened with.
    """
    with db.transaction(engine, "read the store's settings") as driver:  # a read: the store may be read-only
        recorded = read_settings(driver)
    if recorded is None or recorded.tokenizer is None:
        with db.transaction(engine, "record the store's settings", write=True) as driver:
            chosen = tokenizer_name(tokenizer) if tokenizer is not None else DEFAULT_TOKENIZER
            first = recorded or Settings(policy or Policy(), chosen)
            write_settings(driver, replace(first, tokenizer=chosen), overwrite=False)  # another store may be first
            recorded = read_settings(driver)
            assert recorded is not None
    if policy is not None and policy != recorded.policy:
        raise PolicyMismatchError(
            f"policy={policy!r}: the store at {engine.url!r} was created with {recorded.policy!r}; "
            "open it with policy=None, or change it with rebuild(policy=...)"
        )
    if tokenizer is not None and tokenizer_name(tokenizer) != recorded.tokenizer:
        raise TokenizerMismatchError(
            f"tokenizer={tokenizer_name(tokenizer)!r}: the store's tokens were counted by {recorded.tokenizer!r}; "
            "open it with tokenizer=None to use that one, or change it with rebuild(tokenizer=...)"
        )
    return recorded
