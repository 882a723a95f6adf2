"""The state the passes keep per message and per dependency key, and what they read storage through.

`MsgState` and `KeyState` are the engine's rows; `Rows` is the storage a
maintainer reads (one locked session), `Index` the maintainer's identity map
over it as the prompt keeper and the hash groups see it. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from ..clock import micros
from ..model import (
    EVICTED,
    KEPT,
    LIVE_VERDICTS,
    PENDING,
    RESTORED,
    Message,
    effective_defines,
    effective_refs,
    encode_metadata,
)
from ..text import content_hash


@dataclass(eq=False)
class MsgState:
    """The part of a message row the passes read and write."""

    seq: int
    id: str
    role: str
    tool_key: str | None
    expires_after_turn: int | None
    defines: tuple[str, ...]
    refs: tuple[str, ...]
    content_hash: bytes
    base: str
    restored: bool
    turn: int = 0
    tokens: int = 0
    # In the prompt: None while removals are not gathered into events (the prompt is then
    # the live set); otherwise kept apart, with `evicted` (see `prompt.PromptKeeper`).
    visible: bool | None = None
    evicted: bool = False
    was_in_prompt: bool = False
    dirty: bool = False
    message: Message | None = None  # set for messages appended in this transaction
    metadata_json: str | None = None  # the metadata as stored, encoded once
    original: tuple[str, str] | None = None  # (base, verdict) as loaded, for the undo journal
    at: int | None = None  # when it was said, in microseconds since 1970 (`model.micros`), or None
    # A summary's count of the messages it covers (`Message.summarizes`) that are evicted: while above 0 its
    # base is kept, else unneeded (docs/semantics.md, "Summaries"). None for a message that is no summary.
    gaps: int | None = None
    place: int | None = None  # a summary's place in the prompt: where its span began (`Maintainer._cover`)
    covered: tuple[int, ...] = ()  # a summary appended in this transaction: the seqs it covers, to store
    summarizes: tuple[str, ...] = ()  # a summary's `Message.summarizes`: what an append or a replay resolves

    @property
    def survives(self) -> bool:
        """Kept by the passes (kept or restored), whether or not the prompt holds it now.

        Not "live": live means in the prompt (`in_prompt`), which a budget and
        removal events make differ from this.
        """
        return self.base == KEPT or self.restored

    @property
    def in_prompt(self) -> bool:
        return self.survives if self.visible is None else self.visible

    @property
    def verdict(self) -> str:
        if self.visible is None or self.visible == self.survives:
            return RESTORED if self.restored else self.base
        return PENDING if self.visible else EVICTED


def new_state(message: Message, tokens: int) -> MsgState:
    """The derived columns of a message about to be stored: effective keys, hash, tokens."""
    return MsgState(
        seq=0,
        id=message.id,
        role=message.role,
        tool_key=message.tool_key,
        expires_after_turn=message.expires_after_turn,
        defines=tuple(sorted(effective_defines(message))),
        refs=tuple(sorted(effective_refs(message))),
        content_hash=content_hash(message.content),
        base=KEPT,
        restored=False,
        turn=message.turn,
        message=message,
        tokens=tokens,
        metadata_json=encode_metadata(message.metadata),
        at=None if message.at is None else micros(message.at),
        gaps=0 if message.summarizes else None,
        summarizes=message.summarizes,
    )


@dataclass(eq=False)
class KeyState:
    """One dependency key: its last definer and how many messages refer to it."""

    key: str
    definer: int | None = None
    support: int = 0
    kept_refs: int = 0
    evicted_refs: int = 0  # referrers counted in `support` that the budget evicted from the prompt
    dirty: bool = False
    original: tuple[int | None, int, int, int] | None = None  # as loaded; None for a key new in this transaction

    @property
    def shown_support(self) -> int:
        """Counting referrers still in the prompt: while above 0, the definer may not be evicted."""
        return self.support - self.evicted_refs


class Rows(Protocol):
    """What the maintainer needs from storage, for one locked session."""

    def messages_by_seq(self, seqs: Iterable[int]) -> list[MsgState]: ...

    def last_tool_holder(self, tool_key: str) -> MsgState | None: ...

    def expiring(self, from_turn: int, to_turn: int) -> list[MsgState]:
        """Messages not yet superseded or expired with from_turn <= expiry < to_turn."""
        ...

    def keys(self, keys: Iterable[str]) -> list[KeyState]: ...

    def first_holder_after(self, content_hash: bytes, after_seq: int) -> int | None:
        """The smallest stored surviving holder of a hash with seq > after_seq."""
        ...

    def pending(self) -> list[MsgState]:
        """Stored messages the passes dropped that are still in the prompt, waiting for an event."""
        ...

    def in_prompt_after(self, after_seq: int, limit: int, cursor: int) -> list[MsgState]:
        """Up to `limit` stored messages in the prompt with seq > after_seq, in seq order.

        Below `cursor` (see `prompt.PromptKeeper`) only the held ones: those are all the prompt holds there.
        """
        ...

    def time_of(self, seq: int) -> int | None:
        """The stored message's `MsgState.at`."""
        ...

    def in_prompt_between(self, lo: int, hi: int) -> tuple[int, int]:
        """How many stored messages with lo <= seq < hi are in the prompt, and their tokens (as stored)."""
        ...

    def seqs_of(self, ids: Iterable[str]) -> dict[str, int]:
        """The seqs of the stored messages with these ids (those that exist)."""
        ...

    def summaries_covering(self, seq: int) -> list[MsgState]:
        """The stored summaries that cover the stored message at `seq`."""
        ...


class NoRows:
    """`Rows` of a session with nothing stored: a maintainer over it is an in-memory replay."""

    def messages_by_seq(self, seqs: Iterable[int]) -> list[MsgState]:
        return []

    def last_tool_holder(self, tool_key: str) -> MsgState | None:
        return None

    def expiring(self, from_turn: int, to_turn: int) -> list[MsgState]:
        return []

    def keys(self, keys: Iterable[str]) -> list[KeyState]:
        return []

    def first_holder_after(self, content_hash: bytes, after_seq: int) -> int | None:
        return None

    def pending(self) -> list[MsgState]:
        return []

    def in_prompt_after(self, after_seq: int, limit: int, cursor: int) -> list[MsgState]:
        return []

    def time_of(self, seq: int) -> int | None:
        return None

    def in_prompt_between(self, lo: int, hi: int) -> tuple[int, int]:
        return 0, 0

    def seqs_of(self, ids: Iterable[str]) -> dict[str, int]:
        return {}

    def summaries_covering(self, seq: int) -> list[MsgState]:
        return []


class Index(Protocol):
    """The maintainer's identity map over `Rows`, as the prompt keeper reads through it.

    A row loaded twice is one object, so a change made by one step is seen by the next.
    """

    rows: Rows
    transitive: bool
    current_turn: int
    last_seq: int

    def adopt(self, state: MsgState) -> MsgState: ...

    def messages(self, seqs: Iterable[int]) -> list[MsgState]: ...

    def keys(self, keys: Iterable[str]) -> list[KeyState]: ...

    def definers(self, keys: Iterable[str], exclude: MsgState | None = None) -> list[MsgState]: ...

    def summaries_covering(self, state: MsgState) -> list[MsgState]: ...


class Totals(NamedTuple):
    """A session's tokens: of all its messages, and of those in the prompt."""

    tokens: int = 0
    live_tokens: int = 0

    def after(self, new: Iterable[MsgState], changed: Iterable[MsgState]) -> Totals:
        """The totals once `new` messages are stored and the `changed` ones (loaded with `original`) rewritten."""
        tokens, live = self.tokens, self.live_tokens
        for state in new:
            tokens += state.tokens
            live += state.tokens if state.verdict in LIVE_VERDICTS else 0
        for state in changed:
            assert state.original is not None, "a changed stored message was loaded through the identity map"
            live += state.tokens * ((state.verdict in LIVE_VERDICTS) - (state.original[1] in LIVE_VERDICTS))
        return Totals(tokens, live)

    @classmethod
    def of(cls, rows: Iterable[tuple[int, str]]) -> Totals:
        """The totals of (tokens, verdict) pairs."""
        tokens = live = 0
        for count, verdict in rows:
            tokens += count
            live += count if verdict in LIVE_VERDICTS else 0
        return cls(tokens, live)
