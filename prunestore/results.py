"""The values the store's calls return."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .model import LIVE_VERDICTS, StoredMessage
from .prices import LedgerTotals

__all__ = [
    "Delta",
    "Erasure",
    "Explanation",
    "Cause",
    "Mismatch",
    "VerifyReport",
    "VerdictStats",
    "Stats",
    "GcReport",
    "SessionSummary",
    "Entry",
    "Window",
    "PromptSource",
    "HistoryPoint",
]


@dataclass(frozen=True)
class Delta:
    """How one append changed the live set.

    `live_added` holds the ids that became live (new live messages included),
    `live_removed` the ids that stopped being live, each in append order. A
    new message that is dead on arrival is in neither. `appended` counts the
    messages this call stored: a message already stored with the same
    fields (a retry) is skipped and not counted. With a budget or
    `clear_at_least`, "live" means in the prompt, and `events` counts the
    removal events this append held (their removals are in `live_removed`).
    `evicted` holds the ids the budget evicted anew (verdict `evicted`: kept
    by the passes, out of the prompt for its size), in append order: those
    of `live_removed` it took, and new messages it took in the same append,
    which never reached the prompt (an import of a long conversation). They
    are what the model no longer sees that a summary would cover.
    """

    live_added: tuple[str, ...] = ()
    live_removed: tuple[str, ...] = ()
    appended: int = 0
    events: int = 0
    evicted: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.live_added or self.live_removed)


@dataclass(frozen=True)
class Erasure:
    """The receipt of `PruneStore.erase`: what it erased and what that changed.

    `erased` holds the ids whose content it removed, in append order (an id
    erased before is not repeated); `changed` the other messages whose
    verdict moved, as ``id: (before, after)``; `live_added` and
    `live_removed` how the prompt moved (an erased message that was in it is
    in `live_removed`); `at` when it was made (None when it erased nothing,
    and then it is not kept); `invalidated` the summaries erased with them,
    since each stood for an erased message (docs/semantics.md, "Erasure").
    `PruneStore.erasures` gives the kept ones back.

    `log_kept` is True where, on SQLite, another connection was reading
    through the erasure, so its write-ahead log (the ``-wal`` file) could not
    be emptied: the erased bytes stay in that file until those readers finish
    and a later checkpoint empties it (the next erasure's, or SQLite's own as
    writes go on). It says what `erase` saw, so kept receipts have it False.
    """

    session: str
    erased: tuple[str, ...] = ()
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)
    live_added: tuple[str, ...] = ()
    live_removed: tuple[str, ...] = ()
    at: datetime | None = None
    invalidated: tuple[str, ...] = ()
    log_kept: bool = False


@dataclass(frozen=True)
class Summarized:
    """What `PruneStore.summarize` did: the summaries it appended, one per span, in append order; and the
    spans it could not summarize, each as its ids with what went wrong. Those stay evicted and unsummarized,
    and the next call offers them again. A span that another call summarized meanwhile is in neither."""

    session: str
    written: tuple[str, ...] = ()
    failed: tuple[tuple[tuple[str, ...], str], ...] = ()


@dataclass(frozen=True)
class Explanation:
    """Why a message has its verdict.

    `base` is the verdict before restoration; for a restored message it says
    why the message would otherwise be gone. The cause fields are set when
    they apply: `superseded_by` (the next message with the same tool key),
    `expires_after_turn` with the session's `current_turn`, `duplicate_of`
    (the surviving earlier copy), and for a restored message `needed_for`
    (the keys it is the last definer of that live messages refer to) and
    `needed_by` (those messages). Under a budget, an ``evicted`` message is
    live by the passes but out of the prompt, and a ``pending`` one is
    dropped by the passes (`base` says why) but still in the prompt until the
    next removal event.
    """

    session: str
    message_id: str
    seq: int
    verdict: str
    base: str
    current_turn: int
    superseded_by: str | None = None
    expires_after_turn: int | None = None
    duplicate_of: str | None = None
    needed_for: tuple[str, ...] = ()
    needed_by: tuple[str, ...] = ()
    budget: int | None = None
    clear_at_least: int = 0
    pending_tokens: int = 0  # the session's, waiting for the next removal event
    evicted_at_turn: int | None = None  # an evicted message: the turn of the append whose removal event evicted it
    evicted_by: str | None = None  # ... and that append's last message (None: not recorded, as in a window)
    summarizes: tuple[str, ...] = ()  # a summary: the messages it stands for

    @property
    def live(self) -> bool:
        """In the prompt."""
        return self.verdict in LIVE_VERDICTS

    @property
    def causes(self) -> tuple[Cause, ...]:
        """Why, as causes in parts: `reason` joins their text, the web view links their ids."""
        causes = []
        if self.verdict == "evicted":  # first: that it is out of the prompt is the point
            when = (
                ("text", f"at the removal event of turn {self.evicted_at_turn}")
                if self.evicted_at_turn is not None
                else ("text", "at a removal event")
            )
            causes.append(
                Cause(
                    "evicted",
                    (("text", "evicted to stay under the budget of "), ("number", self.budget), ("text", " tokens: "))
                    + (when,)
                    + (
                        (
                            "text",
                            " the prompt was over it, and this was among the oldest messages nothing in the "
                            "prompt needed",
                        ),
                    ),
                )
            )
        if self.summarizes and self.verdict != "evicted":
            plural = "s" if len(self.summarizes) > 1 else ""
            what = (("text", "a summary of "), ("number", len(self.summarizes)), ("text", f" message{plural}"))
            if self.base == "kept":
                why = ", some of it evicted: it stands where its span began"
                causes.append(Cause("summary", (("text", "kept: "), *what, ("text", why))))
            else:
                why = ", none of it evicted: the prompt has what it stands for"
                causes.append(Cause("unneeded", (("text", "unneeded: "), *what, ("text", why))))
        elif self.base == "kept" and self.verdict != "evicted":
            causes.append(Cause("kept", (("text", "kept: nothing supersedes, expires or duplicates it"),)))
        if self.base == "superseded":
            causes.append(
                Cause(
                    "superseded", (("text", "superseded by "), ("id", self.superseded_by), ("text", " (same tool key)"))
                )
            )
        if self.base == "expired":
            causes.append(
                Cause(
                    "expired",
                    (
                        ("text", "expired after turn "),
                        ("number", self.expires_after_turn),
                        ("text", " (the session is at turn "),
                        ("number", self.current_turn),
                        ("text", ")"),
                    ),
                )
            )
        if self.base == "duplicate":
            causes.append(Cause("duplicate", (("text", "duplicate of "), ("id", self.duplicate_of))))
        if self.base == "erased":
            causes.append(Cause("erased", (("text", "erased: what it said was removed for good"),)))
        if self.needed_for:
            users = ("ids", self.needed_by) if self.needed_by else ("referrers", self.message_id)
            verb = "refers" if len(self.needed_by) == 1 else "refer"
            causes.append(
                Cause(
                    "restored",
                    (("text", "restored: it defines "), ("keys", self.needed_for), ("text", ", which "), users)
                    + (("text", f" {verb} to"),),
                )
            )
        if self.verdict == "pending":
            causes.append(
                Cause(
                    "pending",
                    (
                        ("text", "still in the prompt until the next removal event ("),
                        ("number", self.pending_tokens),
                        ("text", " tokens pending, an event at "),
                        ("number", self.clear_at_least),
                        ("text", " or over the budget)"),
                    ),
                )
            )
        return tuple(causes)

    @property
    def reason(self) -> str:
        """One line for people."""
        return "; ".join(cause.text for cause in self.causes)


@dataclass(frozen=True)
class Cause:
    """One reason in an `Explanation`: its kind, and its words in parts a view renders as it likes.

    A part is ``(kind, value)``: ``text``, ``number``, ``id`` (a message id),
    ``ids`` and ``keys`` (tuples of them), ``referrers`` (the live messages
    that refer to the explained message, whose id is the value).
    """

    kind: str  # "evicted", "kept", "superseded", "expired", "duplicate", "erased", "restored", "pending"
    parts: tuple[tuple[str, object], ...]

    @property
    def text(self) -> str:
        return "".join(_as_text(kind, value) for kind, value in self.parts)


def _as_text(kind: str, value: object) -> str:
    if kind == "id":
        return repr(value)
    if kind in ("ids", "keys"):
        assert isinstance(value, tuple)
        return ", ".join(repr(v) if kind == "ids" else str(v) for v in value)
    if kind == "referrers":
        return "live messages"
    return str(value)


@dataclass(frozen=True)
class Mismatch:
    """One difference between the stored state and a batch rerun."""

    session: str
    what: str  # "verdict", "tokens", "key", "hash_holder", "session", ...
    subject: str  # the message id, key or field concerned
    stored: object
    expected: object

    def __str__(self) -> str:
        return f"{self.session}: {self.what} {self.subject}: stored {self.stored!r}, expected {self.expected!r}"


@dataclass(frozen=True)
class VerifyReport:
    """What `verify` compared and every difference it found."""

    sessions: int
    messages: int
    mismatches: tuple[Mismatch, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class VerdictStats:
    messages: int = 0
    tokens: int = 0


@dataclass(frozen=True)
class Stats:
    """Messages and tokens of one session (or all), total, live (in the prompt) and per verdict.

    Under a budget or `clear_at_least`, also the pending tokens, the removal
    events so far and how many sessions are over the budget, and the other
    two causes of a break in the provider's prompt cache: `comebacks` (steps
    in which an evicted message came back) and `late_joins` (steps in which
    a message the passes had dropped, or a new surviving copy, joined before
    the prompt's end). They are None where a session was stored before they
    were counted, until `rebuild` replays it.
    """

    sessions: int
    messages: int
    tokens: int
    live_messages: int
    live_tokens: int
    by_verdict: dict[str, VerdictStats] = field(default_factory=dict)
    budget: int | None = None
    pending_tokens: int = 0  # in the prompt, waiting for the next removal event
    events: int = 0  # removal events so far
    over_budget: int = 0  # sessions whose prompt is over the budget (what may not be evicted exceeds it)
    over_budget_names: tuple[str, ...] = ()  # the first of them by name (up to 20)
    comebacks: int | None = 0  # steps that brought an evicted message back
    late_joins: int | None = 0  # steps in which a message other than the new one joined without coming back
    # Under a policy with prices: the ledger summed over the sessions, and its cost and that of sending everything.
    ledger: LedgerTotals | None = None
    cost: float | None = None
    cost_everything: float | None = None

    @property
    def reduction(self) -> float:
        """Fraction of tokens pruned away."""
        return 1 - self.live_tokens / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class GcReport:
    """What `PruneStore.gc` removed (or, with ``dry_run``, would remove): the sessions by name, and their messages."""

    sessions: tuple[str, ...]
    messages: int
    dry_run: bool = False


@dataclass(frozen=True)
class SessionSummary:
    """One session at a glance, read from its own row: no message is read.

    `tokens` counts every stored message, `live_tokens` those in the prompt;
    `created_at` and `updated_at` are Unix seconds; `events` counts removal
    events under a budget or `clear_at_least` (0 otherwise), `comebacks` and
    `late_joins` the prompt cache's other breaks (see `Stats`).
    """

    name: str
    messages: int
    tokens: int
    live_tokens: int
    current_turn: int
    events: int
    created_at: int
    updated_at: int
    comebacks: int | None = 0
    late_joins: int | None = 0
    ledger: LedgerTotals | None = None  # what its prompts cost so far, under a policy with prices

    @property
    def reduction(self) -> float:
        """Fraction of tokens pruned away."""
        return 1 - self.live_tokens / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class Entry:
    """A message of a window of the session, with why it has its verdict.

    The explanation's `needed_by` is left empty: finding the referrers is a
    read of the index of who refers to each key, which `PruneStore.explain`
    does for one message.
    `content_chars` is the length of the whole content: a window read with
    `text_chars` holds only the first characters of each message.
    """

    message: StoredMessage
    explanation: Explanation
    content_chars: int = -1  # -1: the message's own content is whole

    def __post_init__(self) -> None:
        if self.content_chars < 0:
            object.__setattr__(self, "content_chars", len(self.message.content))


@dataclass(frozen=True)
class Window:
    """Some of a session's messages in order, with the session's counts, all read in one snapshot."""

    session: SessionSummary
    after: int  # the seq before the first entry
    entries: tuple[Entry, ...]
    erasures: int = 0  # receipts kept of the session's erasures (`PruneStore.erasures`)


@dataclass(frozen=True)
class PromptSource:
    """The stored messages that decide a session's prompt, in append order, and the session's size, all read
    in one snapshot: what `render` reads (`PruneStore.prompt_messages`).

    `formats.render` of the messages is the session's prompt; its report counts those messages as
    stored, where the session holds `stored` messages of `tokens` tokens.
    """

    messages: tuple[StoredMessage, ...]
    stored: int  # the session's messages
    tokens: int  # and their tokens


@dataclass(frozen=True)
class HistoryPoint:
    """The session as one append left it: its last message's seq and turn, tokens in all and in the prompt, events."""

    seq: int
    turn: int
    tokens: int
    live_tokens: int
    events: int
    generation: int = 0  # of the store's settings the append was written under (`PruneStore.policies`)
    # Under a policy with prices: the ledger's cost and the cost of sending everything, summed over the
    # turns so far (docs/cost.md); None without prices.
    cost: float | None = None
    cost_everything: float | None = None
