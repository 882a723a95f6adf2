"""`PruneStore`: sessions on disk whose live set is kept up to date on every append."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from . import db, queries
from .audit import FirstAppend, expected_state
from .driver import Driver, Statement
from .errors import (
    DatabaseError,
    DuplicateMessageError,
    InvalidMessageError,
    InvalidPolicyError,
    MessageNotFoundError,
    PolicyMismatchError,
    SessionExistsError,
    SessionNotFoundError,
    TurnOrderError,
    shorten,
)
from .formats import Rendered, render
from .incremental import Maintainer, MsgState, NoRows, new_state
from .livecache import DEFAULT_LIVE_CACHE_BYTES, Entry, LiveCache, check_cache_bytes
from .model import (
    LIVE_VERDICTS,
    MESSAGE_FIELDS,
    Message,
    Policy,
    StoredMessage,
    check_identifier,
)
from .results import Delta, Explanation, Mismatch, Stats, VerifyReport
from .schema import MESSAGES
from .storage import (
    DELETE_HOLDER,
    FULL_COLUMNS,
    IN_PROMPT,
    MESSAGE_WIDTH,
    MESSAGES_BY_ID,
    VERDICT_COLUMN,
    SessionRow,
    SessionRows,
    SessionState,
    create_session,
    find_session,
    join_keys,
    lock_session,
    lock_session_for_append,
    stored_message,
    update_session,
)
from .text import count_tokens
from .undo import CLEAR_JOURNAL, apply_undo, journal_entry, last_append_at_or_before, read_undo
from .views import Form, View, ViewEntry

__all__ = ["PruneStore", "MAX_SESSION_NAME"]

MAX_SESSION_NAME = 512
DEFAULT_MAX_CONTENT_BYTES = 16 * 2**20  # a message's content, UTF-8 encoded
DEFAULT_MAX_METADATA_BYTES = 2**20  # a message's metadata, as JSON
# PostgreSQL errors after which an append is simply run again: a unique violation
# (a concurrent retry of the same message committed while this one waited for the
# session lock, so its retry check read a snapshot from before), a serialization
# failure, a deadlock.
_RETRY_SQLSTATES = {"23505", "40001", "40P01"}
_ATTEMPTS = 3

_LIVE = Statement(
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND {IN_PROMPT} ORDER BY seq"
)
_LIVE_BY_SEQ = Statement(
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq IN :seqs AND {IN_PROMPT}"
)
_ALL = Statement(f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid ORDER BY seq")
_ANY_BY_SEQ = Statement(f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq IN :seqs")
_AUDIT = Statement(
    f"SELECT {FULL_COLUMNS}, content_hash, eff_defines, eff_refs FROM prunestore_messages "
    "WHERE session_id = :sid ORDER BY seq"
)
_SESSION_NAMES = Statement("SELECT name FROM prunestore_sessions ORDER BY name")
_GET_SETTING = Statement("SELECT value FROM prunestore_settings WHERE name = :name")
_PUT_SETTING = Statement(
    "INSERT INTO prunestore_settings (name, value) VALUES (:name, :value) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)
_DELETE_DERIVED = [
    Statement(f"DELETE FROM {table} WHERE session_id = :sid")
    for table in ("prunestore_keys", "prunestore_hash_holders")
]
_UPDATE_KEYS_AND_HASH = Statement(
    "UPDATE prunestore_messages SET content_hash = :content_hash, eff_defines = :eff_defines, eff_refs = :eff_refs "
    "WHERE session_id = :sid AND seq = :seq"
)
_SEQ_OF = Statement("SELECT seq FROM prunestore_messages WHERE session_id = :sid AND id = :id")
_VERDICTS_FROM = Statement(
    "SELECT seq, id, verdict FROM prunestore_messages WHERE session_id = :sid AND seq >= :since ORDER BY seq"
)
_VERDICTS_OF = Statement("SELECT seq, id, verdict FROM prunestore_messages WHERE session_id = :sid AND seq IN :seqs")
_TAIL = Statement(
    f"SELECT {FULL_COLUMNS}, content_hash FROM prunestore_messages WHERE session_id = :sid AND seq >= :since "
    "ORDER BY seq"
)
_DELETE_FROM = Statement("DELETE FROM prunestore_messages WHERE session_id = :sid AND seq >= :since")
_MESSAGE_AT = Statement(f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq = :seq")
_COPIED_COLUMNS = ", ".join(c.name for c in MESSAGES.columns if c.name not in ("session_id", "undo"))
_COPY_PREFIX = Statement(
    f"INSERT INTO prunestore_messages (session_id, {_COPIED_COLUMNS}) "
    f"SELECT :new_sid, {_COPIED_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq <= :cut"
)
_DELETE_SESSION = _DELETE_DERIVED + [
    Statement(f"DELETE FROM {table} WHERE session_id = :sid")
    for table in ("prunestore_messages", "prunestore_sessions")
]


_T = TypeVar("_T")

# A committed write for the live cache: session name, key, stamp before and after, the seqs it wrote.
_Write = tuple[str, int, int | None, int, list[int]]


def _check_session_name(session: object) -> str:
    if not isinstance(session, str) or not session:
        raise InvalidMessageError(f"session={shorten(session)}: must be a non-empty string")
    if len(session) > MAX_SESSION_NAME:
        raise InvalidMessageError(f"session={shorten(session)}: longer than {MAX_SESSION_NAME} characters")
    if "\x00" in session:
        raise InvalidMessageError(f"session={shorten(session)}: must not contain NUL")
    try:
        session.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessageError(f"session={shorten(session)}: cannot be encoded as UTF-8") from None
    return session


def _as_batch(messages: Message | Iterable[Message]) -> list[Message]:
    if isinstance(messages, Message):
        return [messages]
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Iterable):
        raise InvalidMessageError(f"messages={shorten(messages)}: expected a Message or an iterable of them")
    batch = list(messages)
    for m in batch:
        if not isinstance(m, Message):
            raise InvalidMessageError(f"messages: expected Message, got {type(m).__name__} {shorten(m)}")
    return batch


def _check_ids(ids: object) -> list[str]:
    """Message ids as a list without repeats; a lone string is refused (it would be read as its characters)."""
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InvalidMessageError(f"ids={shorten(ids)}: must be an iterable of message ids, not a single string")
    wanted = list(ids)
    for message_id in wanted:
        check_identifier("ids", message_id)
    return list(dict.fromkeys(wanted))


def _differing_fields(a: Message, b: Message) -> list[str]:
    return [name for name in MESSAGE_FIELDS if getattr(a, name) != getattr(b, name)]


class PruneStore:
    """A persistent, incrementally pruned message store (SQLite or PostgreSQL).

    The policy is fixed when the store is created and recorded in it; open an
    existing store with ``policy=None`` to use the recorded one.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        policy: Policy | None = None,
        tokenizer: Callable[[str], int] = count_tokens,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        live_cache_bytes: int = DEFAULT_LIVE_CACHE_BYTES,
    ) -> None:
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidPolicyError(f"policy={shorten(policy)}: expected a prunestore.Policy")
        check_cache_bytes(live_cache_bytes)
        self.url = db.resolve_url(url)
        engine = db.make_engine(self.url)
        self._open(engine, policy, tokenizer, max_content_bytes, max_metadata_bytes, LiveCache(live_cache_bytes))

    @classmethod
    def _over(
        cls,
        engine: Engine,
        url: str,
        policy: Policy | None,
        tokenizer: Callable[[str], int],
        max_content_bytes: int,
        max_metadata_bytes: int,
        *,
        live_cache: LiveCache,
    ) -> PruneStore:
        """A store over an engine made elsewhere: `AsyncPruneStore` runs this class on its engines."""
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidPolicyError(f"policy={shorten(policy)}: expected a prunestore.Policy")
        store = cls.__new__(cls)
        store.url = url
        store._open(engine, policy, tokenizer, max_content_bytes, max_metadata_bytes, live_cache)
        return store

    def _open(
        self,
        engine: Engine,
        policy: Policy | None,
        tokenizer: Callable[[str], int],
        max_content_bytes: int,
        max_metadata_bytes: int,
        live_cache: LiveCache,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.max_content_bytes = max_content_bytes
        self.max_metadata_bytes = max_metadata_bytes
        self.live_cache = live_cache
        try:
            db.ensure_schema(self.engine)
            self.policy = self._settle_policy(policy)
        except BaseException:
            self.engine.dispose()
            raise

    def _settle_policy(self, policy: Policy | None) -> Policy:
        with db.transaction(self.engine, "read the store's policy") as driver:  # a read: the store may be read-only
            recorded = driver.scalar(_GET_SETTING, {"name": "policy"})
        if recorded is None:
            with db.transaction(self.engine, "record the store's policy", write=True) as driver:
                recorded = driver.scalar(_GET_SETTING, {"name": "policy"})  # another store may have been first
                if recorded is None:
                    policy = policy or Policy()
                    driver.run(_PUT_SETTING, {"name": "policy", "value": policy.to_json()})
                    return policy
        stored = Policy.from_json(recorded)
        if policy is not None and policy != stored:
            raise PolicyMismatchError(
                f"policy={policy!r}: the store at {self.engine.url!r} was created with {stored!r}; "
                "open it with policy=None, or change it with rebuild(policy=...)"
            )
        return stored

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> PruneStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PruneStore({self.engine.url.render_as_string(hide_password=True)!r}, policy={self.policy!r})"

    # -- writes -------------------------------------------------------------

    def append(self, session: str, messages: Message | Iterable[Message]) -> Delta:
        """Append messages in order, in one transaction, and return how the live set moved.

        A message whose id is already stored with equal fields is skipped (a
        safe retry); with different fields it raises `DuplicateMessageError`.
        """
        name = _check_session_name(session)
        return self.append_many({name: messages})[name]

    def append_many(self, batches: Mapping[str, Message | Iterable[Message]]) -> dict[str, Delta]:
        """Append to several sessions in one transaction: all of it is stored, or none.

        Sessions are locked in name order, so concurrent callers cannot deadlock.
        """
        if not isinstance(batches, Mapping):
            raise InvalidMessageError(f"batches={shorten(batches)}: expected a mapping of session names to messages")
        prepared = []
        for session, messages in batches.items():
            name, batch = _check_session_name(session), _as_batch(messages)
            prepared.append((name, [new_state(m, self._tokens(m)) for m in batch]))
        return self._append_states(prepared)

    def _append_states(self, prepared: Iterable[tuple[str, list[MsgState]]]) -> dict[str, Delta]:
        """`append_many` for messages whose derived columns are computed already (the importer does it)."""
        deltas: dict[str, Delta] = {}
        work = []
        for name, states in prepared:
            deltas[name] = Delta()
            if states:
                for state in states:
                    self._check_limits(state)
                work.append((_check_session_name(name), states))
        work.sort(key=lambda item: item[0])
        if not work:
            return deltas
        action = f"append to session {work[0][0]!r}" + (f" and {len(work) - 1} more" if len(work) > 1 else "")

        def run(driver: Driver, writes: list[_Write]) -> dict[str, Delta]:
            for name, states in work:
                deltas[name] = self._append_locked(driver, name, states, writes)
            return deltas

        return self._writing(action, run)

    def append_with(self, session: str, build: Callable[[SessionState], Message | Iterable[Message]]) -> Delta:
        """Append what `build` makes of the session's state, read under the session's write lock.

        For writers that derive a message from what the session holds (its
        current turn, the message that defines a key: the call a tool result
        answers) and must not race another writer doing the same: `build` runs
        inside the transaction, after the lock, and may run again if the
        database asks for a retry, so it should only compute.
        """
        name = _check_session_name(session)

        def run(driver: Driver, writes: list[_Write]) -> Delta:
            row, _ = lock_session_for_append(driver, name, [])
            states = [new_state(m, self._tokens(m)) for m in _as_batch(build(SessionState(driver, row)))]
            for state in states:
                self._check_limits(state)
            return self._append_locked(driver, name, states, writes, locked=row) if states else Delta()

        return self._writing(f"append to session {name!r}", run)

    def _writing(self, action: str, run: Callable[[Driver, list[_Write]], _T]) -> _T:
        """Run `run` in a write transaction, again where PostgreSQL asks for it; then move the live cache on."""
        for attempt in range(_ATTEMPTS):
            writes: list[_Write] = []
            try:
                with db.transaction(self.engine, action, write=True) as driver:
                    result = run(driver, writes)
            except DatabaseError as exc:
                if attempt + 1 == _ATTEMPTS or getattr(exc.__cause__, "sqlstate", None) not in _RETRY_SQLSTATES:
                    raise
                continue
            for write in writes:  # committed: move this store's cached live lists forward
                self.live_cache.advance(*write)
            return result
        raise AssertionError("unreachable")

    def _append_locked(
        self,
        driver: Driver,
        name: str,
        states: list[MsgState],
        writes: list[_Write] | None = None,
        locked: SessionRow | None = None,
    ) -> Delta:
        """Lock one session (unless `locked` is its row), skip retries, check turns, run the maintainer, write back.

        What it wrote is added to `writes`, for the live cache once the transaction commits.
        """
        batch = [s.message for s in states if s.message is not None]
        ids = list({s.id: None for s in states})
        if locked is None:
            row, stored = lock_session_for_append(driver, name, ids)
        else:
            row = locked
            found = driver.chunks(MESSAGES_BY_ID, {"sid": row.session_id}, "ids", ids) if row.last_seq else []
            stored = {m.id: m for m in map(stored_message, found)}
        before = row.stamp
        rows = SessionRows(driver, row)
        fresh: list[MsgState] = []
        seen: dict[str, Message] = {}
        turn = row.current_turn
        for message, state in zip(batch, states, strict=True):
            earlier = stored.get(message.id) or seen.get(message.id)
            if earlier is not None:
                differing = _differing_fields(earlier, message)
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
        maintainer: Maintainer | FirstAppend
        prompt_before = replace(row.prompt)
        if row.last_seq == 0 and not self.policy.gathers:
            maintainer = FirstAppend(fresh, self.policy, row.current_turn)
        else:
            source = rows if row.last_seq else NoRows()
            maintainer = Maintainer(source, self.policy, row.current_turn, row.last_seq, replace(row.prompt))
            for state in fresh:
                maintainer.append(state)
        prompt = maintainer.prompt.counters if isinstance(maintainer, Maintainer) and maintainer.prompt else None
        changed, keys = maintainer.changed_messages(), maintainer.changed_keys()
        holders_added, holders_removed = maintainer.hash_holder_changes()
        rows.write_back(
            maintainer.new,
            changed,
            keys,
            holders_added,
            holders_removed,
            current_turn=maintainer.current_turn,
            last_seq=maintainer.last_seq,
            journal=journal_entry(row.current_turn, changed, keys, holders_removed, prompt_before),
            prompt=prompt,
        )
        if writes is not None and self.live_cache.max_bytes:
            seqs = [s.seq for s in maintainer.new] + [s.seq for s in changed]
            assert row.stamp is not None  # write_back set it
            writes.append((name, row.session_id, before, row.stamp, seqs))
        added, removed = maintainer.delta()
        events = prompt.events - prompt_before.events if prompt else 0
        return Delta(tuple(added), tuple(removed), len(fresh), events)

    def _check_limits(self, state: MsgState) -> None:
        """Refuse a message larger than the store's limits (set when it is opened)."""
        content = state.message.content if state.message is not None else ""
        if len(content) * 4 > self.max_content_bytes:  # cheap bound first: at most 4 bytes a character
            size = len(content.encode("utf-8"))
            if size > self.max_content_bytes:
                raise InvalidMessageError(
                    f"content={shorten(content)}: {size} bytes, over the limit of {self.max_content_bytes} "
                    "(PruneStore(max_content_bytes=...))"
                )
        metadata = state.metadata_json
        if metadata is not None and len(metadata) * 4 > self.max_metadata_bytes:
            size = len(metadata.encode("utf-8"))
            if size > self.max_metadata_bytes:
                raise InvalidMessageError(
                    f"metadata={shorten(metadata)}: {size} bytes as JSON, over the limit of "
                    f"{self.max_metadata_bytes} (PruneStore(max_metadata_bytes=...))"
                )

    def _tokens(self, message: Message) -> int:
        try:
            tokens = self.tokenizer(message.content)
        except Exception as exc:
            raise InvalidMessageError(f"content={shorten(message.content)}: the tokenizer failed ({exc!r})") from exc
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens < 2**31:
            raise InvalidMessageError(f"tokens={shorten(tokens)}: the tokenizer must return a non-negative int")
        return tokens

    def rebuild(self, session: str | None = None, *, policy: Policy | None = None) -> None:
        """Recompute the stored state from the messages (to repair it, or to change the policy).

        A new `policy` applies to the whole store, so it needs ``session=None``.
        """
        if policy is not None:
            if session is not None:
                raise InvalidPolicyError("policy: a policy change rebuilds every session; pass session=None")
            if not isinstance(policy, Policy):
                raise InvalidPolicyError(f"policy={shorten(policy)}: expected a prunestore.Policy")
        with db.transaction(self.engine, "rebuild", write=True) as driver:
            if policy is not None:
                driver.run(_PUT_SETTING, {"name": "policy", "value": policy.to_json()})
            use = policy or self.policy
            for name in self._names(driver, session):
                row = lock_session(driver, name)
                assert row is not None
                self._rebuild_session(driver, row, use)
        if policy is not None:
            self.policy = policy
        self.live_cache.forget(session)  # their stamps changed: free the memory now

    def _rebuild_session(self, driver: Driver, row: SessionRow, policy: Policy) -> None:
        """Rewrite every derived row and column of the session from its messages."""
        rows = driver.all(_AUDIT, {"sid": row.session_id})
        stored = [stored_message(r[:MESSAGE_WIDTH]) for r in rows]
        expected = expected_state(stored, policy)
        for statement in _DELETE_DERIVED:
            driver.run(statement, {"sid": row.session_id})
        driver.run(CLEAR_JOURNAL, {"sid": row.session_id})  # what it recorded no longer matches the state
        keys_and_hash = [
            {
                "sid": row.session_id,
                "seq": s.seq,
                "content_hash": s.content_hash,
                "eff_defines": join_keys(s.defines),
                "eff_refs": join_keys(s.refs),
            }
            for s, r in zip(expected.states, rows, strict=True)
            if (bytes(r[MESSAGE_WIDTH]), r[MESSAGE_WIDTH + 1], r[MESSAGE_WIDTH + 2])
            != (s.content_hash, join_keys(s.defines), join_keys(s.refs))
        ]
        driver.run_many(_UPDATE_KEYS_AND_HASH, keys_and_hash)
        changed = [
            s for s, m in zip(expected.states, stored, strict=True) if (s.base, s.verdict) != (m.base, m.verdict)
        ]
        SessionRows(driver, row).write_back(
            new=[],
            changed=changed,
            keys=list(expected.keys.values()),
            holders_added=sorted(expected.hash_holders),
            holders_removed=[],
            current_turn=expected.current_turn,
            last_seq=stored[-1].seq if stored else 0,
            prompt=expected.prompt,
        )

    def delete_session(self, session: str) -> None:
        """Remove the session and every row that belongs to it."""
        name = _check_session_name(session)
        with db.transaction(self.engine, f"delete session {name!r}", write=True) as driver:
            row = lock_session(driver, name)
            if row is None:
                raise SessionNotFoundError(f"session={shorten(name)}: no such session")
            for statement in _DELETE_SESSION:
                driver.run(statement, {"sid": row.session_id})
        self.live_cache.forget(name)

    def truncate(self, session: str, after_message_id: str) -> Delta:
        """Drop every message after `after_message_id` and give the session back the state it had then.

        For regenerate and undo. The appends after the cut are taken back from
        the undo journal, so the cost follows what is cut, not the session's
        length; a cut into history written before the last `rebuild` or `fork`
        of the session is recomputed as a batch over what remains instead.
        The returned `Delta` moves a client's live set to the new one.
        """
        name = _check_session_name(session)
        self.live_cache.forget(name)  # its stamp is about to change: free the memory
        with db.transaction(self.engine, f"truncate session {name!r}", write=True) as driver:
            row = lock_session(driver, name)
            if row is None:
                raise SessionNotFoundError(f"session={shorten(name)}: no such session")
            cut = self._seq_of(driver, row, "after_message_id", after_message_id)
            return self._cut(driver, name, row, cut)

    def _cut(self, driver: Driver, name: str, row: SessionRow, cut: int) -> Delta:
        """Drop the locked session's messages after seq `cut` (0: all of them), restoring the state it had then."""
        if cut == row.last_seq:
            return Delta()
        sid = row.session_id
        journaled = last_append_at_or_before(driver, sid, cut + 1)
        if journaled is None:
            before = driver.all(_VERDICTS_FROM, {"sid": sid, "since": 1})
            driver.run(_DELETE_FROM, {"sid": sid, "since": cut + 1})
            self._rebuild_session(driver, row, self.policy)
            return _delta(before, driver.all(_VERDICTS_FROM, {"sid": sid, "since": 1}))

        undo = read_undo(driver, sid, *journaled)
        tail = driver.all(_TAIL, {"sid": sid, "since": undo.since})
        touched = list(undo.verdicts)
        before = driver.chunks(_VERDICTS_OF, {"sid": sid}, "seqs", touched) + [
            (r[0], r[1], r[VERDICT_COLUMN]) for r in tail
        ]
        apply_undo(driver, sid, undo)
        driver.run_many(DELETE_HOLDER, [{"sid": sid, "content_hash": bytes(r[-1]), "seq": r[0]} for r in tail])
        driver.run(_DELETE_FROM, {"sid": sid, "since": undo.since})
        update_session(driver, row, undo.turn, undo.since - 1, undo.prompt)
        kept = [stored_message(r[:MESSAGE_WIDTH]) for r in tail if r[0] <= cut]
        if kept:
            self._append_locked(driver, name, [new_state(m.to_message(), m.tokens) for m in kept])
        after = driver.chunks(_VERDICTS_OF, {"sid": sid}, "seqs", touched + [m.seq for m in kept])
        return _delta(before, after)

    def pop(self, session: str) -> StoredMessage | None:
        """Remove the session's last message and return it (None for an empty or unknown session).

        One transaction under the session's lock, so concurrent pops each take
        a different message and a message appended meanwhile is never lost;
        the state goes back to what it was before that message, as `truncate`
        gives it.
        """
        name = _check_session_name(session)
        self.live_cache.forget(name)
        with db.transaction(self.engine, f"pop from session {name!r}", write=True) as driver:
            row = lock_session(driver, name)
            if row is None or row.last_seq == 0:
                return None
            last = driver.first(_MESSAGE_AT, {"sid": row.session_id, "seq": row.last_seq})
            self._cut(driver, name, row, row.last_seq - 1)
            return stored_message(last)

    def fork(self, session: str, at_message_id: str, new_session: str) -> None:
        """Start `new_session` with the messages of `session` up to and including `at_message_id`.

        For branching and edit-and-regenerate. The new session's state is a
        batch over that prefix; `session` is left as it is.
        """
        name, new = _check_session_name(session), _check_session_name(new_session)
        with db.transaction(self.engine, f"fork session {name!r} into {new!r}", write=True) as driver:
            row = lock_session(driver, name)
            if row is None:
                raise SessionNotFoundError(f"session={shorten(name)}: no such session")
            cut = self._seq_of(driver, row, "at_message_id", at_message_id)
            if find_session(driver, new) is not None:
                raise SessionExistsError(f"new_session={shorten(new)}: the store already holds this session")
            create_session(driver, new)
            new_row = lock_session(driver, new)
            assert new_row is not None
            driver.run(_COPY_PREFIX, {"new_sid": new_row.session_id, "sid": row.session_id, "cut": cut})
            self._rebuild_session(driver, new_row, self.policy)

    def _seq_of(self, driver: Driver, row: SessionRow, field: str, message_id: str) -> int:
        check_identifier(field, message_id)
        seq = driver.scalar(_SEQ_OF, {"sid": row.session_id, "id": message_id})
        if seq is None:
            raise MessageNotFoundError(f"{field}={shorten(message_id)}: not in this session")
        return seq

    # -- reads --------------------------------------------------------------

    def _session(self, driver: Driver, session: str) -> SessionRow:
        row = find_session(driver, _check_session_name(session))
        if row is None:
            raise SessionNotFoundError(f"session={shorten(session)}: no such session")
        return row

    def _names(self, driver: Driver, session: str | None) -> list[str]:
        if session is None:
            return [name for (name,) in driver.all(_SESSION_NAMES, {})]
        self._session(driver, session)
        return [session]

    def live(self, session: str) -> list[StoredMessage]:
        """The live messages, in append order: what goes into the prompt.

        Their metadata is read-only (`prunestore.frozen`): the messages are
        shared between calls. The list is kept in memory (`PruneStore(live_cache_bytes=...)`, see
        `prunestore.livecache`): a call after this store's own append reads
        the session's row and the rows that append changed, not the session.
        """
        cached = self.live_cache.max_bytes > 0
        # One snapshot, so that the rows read belong to the stamp read.
        with db.transaction(self.engine, f"read session {session!r}", snapshot=cached) as driver:
            row = self._session(driver, session)
            if not cached or row.stamp is None:  # no stamp: not written since revision 0003
                return [stored_message(r, frozen=True) for r in driver.all(_LIVE, {"sid": row.session_id})]
            entry = self.live_cache.get(session, row)
            if entry is None:
                entry = Entry.read(row.session_id, row.stamp, driver.all(_LIVE, {"sid": row.session_id}))
                self.live_cache.put(session, entry)
                return entry.messages()
            if entry.pending:
                fresh = driver.chunks(_LIVE_BY_SEQ, {"sid": row.session_id}, "seqs", sorted(entry.pending))
                entry = entry.patched(fresh)
                self.live_cache.put(session, entry)
        return entry.messages()

    def view(self, session: str, form: Form) -> list[Any]:
        """The session's prompt as a framework's objects (see `prunestore.views`), in append order.

        Kept in memory beside the live list, and patched the same way: a call
        after this store's own append reads the session's row and the rows
        that append changed. The list is new on every call; the objects in it
        are shared between calls and must not be changed.
        """
        cached = self.live_cache.max_bytes > 0
        with db.transaction(self.engine, f"read session {session!r}", snapshot=cached) as driver:
            row = self._session(driver, session)
            entry = self.live_cache.get(session, row, form.name) if cached and row.stamp is not None else None
            if entry is None:
                view = View(form)
                view.apply(driver.all(_ALL, {"sid": row.session_id}))
                if cached and row.stamp is not None:
                    self.live_cache.put(session, ViewEntry(row.session_id, row.stamp, view, view.size), form.name)
                return view.prompt()
            if entry.pending:
                entry.view.apply(driver.chunks(_ANY_BY_SEQ, {"sid": row.session_id}, "seqs", sorted(entry.pending)))
                self.live_cache.put(session, ViewEntry(entry.sid, entry.stamp, entry.view, entry.view.size), form.name)
        return entry.view.prompt()

    def messages(self, session: str, ids: Iterable[str] | None = None) -> list[StoredMessage]:
        """Every message of the session with its verdict, in append order; with `ids`, only those.

        `messages(session, ids=delta.live_added)` is what a client that keeps
        its prompt up to date from each append's `Delta` lacks: the new live
        messages, and old ones brought back (it may have dropped them). It
        reads those rows only, so the turn costs the same at any length.
        """
        wanted = None if ids is None else _check_ids(ids)
        with db.transaction(self.engine, f"read session {session!r}") as driver:
            sid = self._session(driver, session).session_id
            if wanted is None:
                return [stored_message(r) for r in driver.all(_ALL, {"sid": sid})]
            found = [stored_message(r) for r in driver.chunks(MESSAGES_BY_ID, {"sid": sid}, "ids", wanted)]
        missing = set(wanted).difference(m.id for m in found)
        if missing:
            first = next(i for i in wanted if i in missing)
            raise MessageNotFoundError(f"ids: message id={shorten(first)} is not in session {session!r}")
        return sorted(found, key=lambda m: m.seq)

    def render(self, session: str, format: str = "openai", *, dropped: str = "omit") -> Rendered:
        """The session's live history as a prompt the provider accepts: see `prunestore.formats.render`.

        `format` is "openai", "anthropic" or "text"; `dropped` is "omit" or
        "placeholder" (a pruned tool result keeps its call and says why it is gone).
        """
        return render(self.messages(session), format, dropped)

    def sessions(self) -> list[str]:
        """Every session name, sorted."""
        with db.transaction(self.engine, "list sessions") as driver:
            return [name for (name,) in driver.all(_SESSION_NAMES, {})]

    def explain(self, session: str, message_id: str) -> Explanation:
        """The verdict of one message and what caused it."""
        with db.transaction(self.engine, f"explain in session {session!r}", snapshot=True) as driver:
            return queries.explain(driver, session, self._session(driver, session), message_id, self.policy)

    def stats(self, session: str | None = None) -> Stats:
        """Messages and tokens, total and live, per verdict, of one session or of all."""
        with db.transaction(self.engine, "stats", snapshot=True) as driver:
            if session is None:
                return queries.stats(driver, None, len(self._names(driver, None)), self.policy)
            return queries.stats(driver, self._session(driver, session).session_id, 1, self.policy)

    def verify(self, session: str | None = None) -> VerifyReport:
        """Rerun `prune` over the stored messages and report every difference from the stored state."""
        sessions = messages = 0
        mismatches: list[Mismatch] = []
        with db.transaction(self.engine, "verify", snapshot=True) as driver:
            for name in self._names(driver, session):
                checked, found = queries.verify(driver, name, self._session(driver, name), self.policy)
                sessions, messages = sessions + 1, messages + checked
                mismatches.extend(found)
        return VerifyReport(sessions=sessions, messages=messages, mismatches=tuple(mismatches))


def _delta(before: Iterable[tuple[int, str, str]], after: Iterable[tuple[int, str, str]]) -> Delta:
    """The Delta between two readings of (seq, id, verdict) rows; a row missing after is gone."""
    was = {seq: (id_, verdict in LIVE_VERDICTS) for seq, id_, verdict in before}
    now = {seq: (id_, verdict in LIVE_VERDICTS) for seq, id_, verdict in after}
    added, removed = [], []
    for seq in sorted(was.keys() | now.keys()):
        old, new = was.get(seq, ("", False)), now.get(seq, ("", False))
        if new[1] and not (old[1] and old[0] == new[0]):
            added.append(new[0])
        if old[1] and not (new[1] and old[0] == new[0]):
            removed.append(old[0])
    return Delta(tuple(added), tuple(removed))
