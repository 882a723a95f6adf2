"""The append path: what a store checks before writing, and one session's append under its lock.

`append_locked` runs inside the caller's write transaction: it locks the
session, skips messages already stored with equal fields (a retry), checks
turn order, runs the maintainer (or, for a first append without a budget,
the batch `FirstAppend`), and writes back the rows it changed with the undo
journal of the append.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from .clock import micros
from .engine.first import FirstAppend
from .engine.ledger import Pricing
from .engine.maintainer import Maintainer
from .engine.state import MsgState, NoRows, new_state
from .errors import DuplicateMessageError, InvalidMessageError, PruneStoreError, TurnOrderError, shorten
from .model import (
    MAX_IDENTIFIER_BYTES,
    MAX_SESSION_NAME,
    MAX_TOKENS,
    MESSAGE_FIELDS,
    Message,
    check_identifier,
    check_key_count,
    storable_text_problem,
)
from .policy import Policy
from .results import Delta
from .sql.driver import Driver
from .sql.locked_rows import AheadRows, LockedRows, read_ahead
from .sql.rows import MESSAGES_BY_ID, stored_message
from .sql.session_row import SessionRow
from .sql.sessions import lock_session_for_append, new_stamp
from .sql.undo import journal_entry
from .text import count_tokens
from .tokens import Countable, message_tokens
from .whatif import stored_ledger

DEFAULT_MAX_CONTENT_BYTES = 16 * 2**20  # a message's content, UTF-8 encoded
DEFAULT_MAX_METADATA_BYTES = 2**20  # a message's metadata, as JSON

# A committed write for the live cache: session name, key, stamp before and after, the seqs it wrote,
# (a cut) the seq after which it took every message back first, or None, and the session's last seq after it.
Write = tuple[str, int, int | None, int, list[int], int | None, int]


def check_session_name(session: object) -> str:
    if not isinstance(session, str) or not session:
        raise InvalidMessageError(f"session={shorten(session)}: must be a non-empty string")
    if len(session) > MAX_SESSION_NAME:
        raise InvalidMessageError(f"session={shorten(session)}: longer than {MAX_SESSION_NAME} characters")
    problem = storable_text_problem(session)
    if problem:
        raise InvalidMessageError(f"session={shorten(session)}: {problem}")
    return session


def as_batch(messages: Message | Iterable[Message]) -> list[Message]:
    if isinstance(messages, Message):
        return [messages]
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Iterable):
        raise InvalidMessageError(f"messages={shorten(messages)}: expected a Message or an iterable of them")
    batch = list(messages)
    for m in batch:
        if not isinstance(m, Message):
            raise InvalidMessageError(f"messages: expected Message, got {type(m).__name__} {shorten(m)}")
    return batch


def check_ids(ids: object) -> list[str]:
    """Message ids as a list without repeats; a lone string is refused (it would be read as its characters)."""
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InvalidMessageError(f"ids={shorten(ids)}: must be an iterable of message ids, not a single string")
    wanted = list(ids)
    for message_id in wanted:
        check_identifier("ids", message_id)
    return list(dict.fromkeys(wanted))


def differing_fields(earlier: Message, retry: Message) -> list[str]:
    """The fields in which a retry of a message differs from its earlier append.

    A stored message's tokens count only if they were given; its time only if the retry gives one (the
    store may have recorded the append's time, `stamp_times`).
    """
    return [
        name
        for name in MESSAGE_FIELDS
        if (
            earlier.given_tokens() != retry.given_tokens()
            if name == "tokens"
            else retry.at is not None and earlier.at != retry.at
            if name == "at"
            else getattr(earlier, name) != getattr(retry, name)
        )
    ]


def stamp_times(states: list[MsgState], policy: Policy) -> None:
    """Under a `cache_ttl`, a message that brings no time (`Message.at`) is stored with the append's."""
    if policy.cache_ttl is None:
        return
    now = micros(datetime.now(timezone.utc))
    for state in states:
        if state.at is None:
            state.at = now


@dataclass(frozen=True)
class Options:
    """How a store prepares what it appends: the tokenizer and the size limits. One value for both store classes."""

    tokenizer: Callable[[str], int] | None = count_tokens  # None: the one the store records
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES

    def tokens(self, message: Countable) -> int:
        """The tokens of `message`, by the tokenizer; a failing or misbehaving tokenizer is a clear error."""
        assert self.tokenizer is not None, "the store loads its tokenizer before it counts"
        try:
            tokens = message_tokens(self.tokenizer, message)
        except PruneStoreError:
            raise
        except Exception as exc:
            raise InvalidMessageError(f"content={shorten(message.content)}: the tokenizer failed ({exc!r})") from exc
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_TOKENS:
            raise InvalidMessageError(f"tokens={shorten(tokens)}: the tokenizer must return a non-negative int")
        return tokens

    def check(self, state: MsgState) -> None:
        """Refuse a message larger than the store's limits (set when it is opened), or with marker keys
        past the limits every key has."""
        content = state.message.content if state.message is not None else ""
        for field, keys in (("DEFINE: markers", state.defines), ("REF: markers", state.refs)):
            check_key_count(f"content ({field})", keys)
            long = next((key for key in keys if len(key) > MAX_IDENTIFIER_BYTES), None)
            if long is not None:
                raise InvalidMessageError(
                    f"content={shorten(content)}: the key {shorten(long)} of a marker is over "
                    f"{MAX_IDENTIFIER_BYTES} characters"
                )
        if len(content) * 4 > self.max_content_bytes:  # cheap bound first: at most 4 bytes a character
            size = len(content.encode("utf-8"))
            if size > self.max_content_bytes:
                raise InvalidMessageError(
                    f"content={shorten(content)}: {size} bytes, over the limit of {self.max_content_bytes} "
                    "(max_content_bytes=...)"
                )
        metadata = state.metadata_json
        if metadata is not None and len(metadata) * 4 > self.max_metadata_bytes:
            size = len(metadata.encode("utf-8"))
            if size > self.max_metadata_bytes:
                raise InvalidMessageError(
                    f"metadata={shorten(metadata)}: {size} bytes as JSON, over the limit of "
                    f"{self.max_metadata_bytes} (max_metadata_bytes=...)"
                )

    def prepare(self, messages: Message | Iterable[Message]) -> list[MsgState]:
        """The messages as states to append, their tokens counted and their sizes checked."""
        return self.checked([new_state(m, self.tokens(m)) for m in as_batch(messages)])

    def checked(self, states: list[MsgState]) -> list[MsgState]:
        """The states, once each is within the limits."""
        for state in states:
            self.check(state)
        return states


def append_locked(
    driver: Driver,
    name: str,
    states: list[MsgState],
    policy: Policy | Callable[[Driver, SessionRow], Policy],
    writes: list[Write] | None = None,
    locked: SessionRow | None = None,
    expected: Policy | None = None,
) -> Delta:
    """Lock one session (unless `locked` is its row), skip retries, check turns, run the maintainer, write back.

    `policy` may be a function of the locked row that returns it (the store settles its settings there);
    `expected` is then the policy it most likely returns, for what to read ahead of the lock.
    What it wrote is added to `writes` (when given), for the live cache once the transaction commits.
    """
    batch = [s.message for s in states if s.message is not None]
    ids = list({s.id: None for s in states})
    ahead = None
    if locked is None:
        expected = policy if isinstance(policy, Policy) else expected
        reads = read_ahead(
            driver,
            states,
            expected.dedupe_roles if expected is not None else None,
            times=expected is not None and expected.cache_ttl is not None,
        )
        row, stored, ahead = lock_session_for_append(driver, name, ids, reads)
    else:
        row = locked
        found = driver.chunks(MESSAGES_BY_ID, {"sid": row.session_id}, "ids", ids) if row.last_seq else []
        stored = {m.id: m for m in map(stored_message, found)}
    if not isinstance(policy, Policy):
        policy = policy(driver, row)
    before = row.stamp
    rows = AheadRows(driver, row, ahead) if ahead is not None else LockedRows(driver, row)
    fresh: list[MsgState] = []
    seen: dict[str, Message] = {}
    turn = row.current_turn
    for message, state in zip(batch, states, strict=True):
        earlier = stored.get(message.id) or seen.get(message.id)
        if earlier is not None:
            differing = differing_fields(earlier, message)
            if not differing:
                continue
            raise DuplicateMessageError(
                f"id={shorten(message.id)}: already in session {name!r} with different {', '.join(differing)}",
                session=name,
                message_id=message.id,
            )
        if message.turn < turn:
            raise TurnOrderError(
                f"turn={message.turn}: message id={shorten(message.id)} is older than "
                f"the current turn {turn} of session {name!r}",
                session=name,
                message_id=message.id,
            )
        turn = message.turn
        seen[message.id] = message
        fresh.append(state)
    if not fresh:
        return Delta()
    stamp_times(fresh, policy)
    maintainer: Maintainer | FirstAppend
    spent = None
    prompt_before = row.prompt.copy() if policy.gathers else None
    batch_of_first = row.last_seq == 0 and not policy.gathers and policy.prices is None
    if batch_of_first and not any(s.gaps is not None for s in fresh):  # the batch resolves no summary's ids
        maintainer = FirstAppend(fresh, policy, row.current_turn)
    else:
        source = rows if row.last_seq else NoRows()
        maintainer = Maintainer(source, policy, row.current_turn, row.last_seq, row.prompt.copy(), row.summaries)
        try:
            if policy.prices is None:
                row.ledger = None
                for state in fresh:
                    maintainer.append(state)
            else:
                pricing = Pricing(maintainer, stored_ledger(driver, row, policy))
                for state in fresh:
                    pricing.append(state)
                pricing.step()
                row.ledger = pricing.ledger.to_json()
                spent = pricing.ledger.spent(policy.prices)
        except InvalidMessageError as exc:  # a summary of what the session does not hold: name the session
            exc.session = name
            raise
    prompt = maintainer.prompt.counters if isinstance(maintainer, Maintainer) and maintainer.prompt else None
    changed, keys = maintainer.changed_messages(), maintainer.changed_keys()
    holders_added, holders_removed = maintainer.hash_holder_changes()
    stamp = new_stamp()
    row.summaries = maintainer.summaries
    rows.write_back(
        maintainer.new,
        changed,
        keys,
        holders_added,
        holders_removed,
        current_turn=maintainer.current_turn,
        last_seq=maintainer.last_seq,
        journal=journal_entry(row.current_turn, changed, keys, holders_removed, prompt_before, (before, stamp)),
        prompt=prompt,
        stamp=stamp,
        spent=spent,
    )
    if writes is not None:
        seqs = [s.seq for s in maintainer.new] + [s.seq for s in changed]
        assert row.stamp is not None  # write_back set it
        writes.append((name, row.session_id, before, row.stamp, seqs, None, maintainer.last_seq))
    added, removed, evicted = maintainer.delta()
    events = prompt.events - prompt_before.events if prompt and prompt_before else 0
    return Delta(tuple(added), tuple(removed), len(fresh), events, tuple(evicted))
