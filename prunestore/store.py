"""`PruneStore`: sessions on disk whose live set is kept up to date on every append."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from sqlalchemy.engine import Engine

from .appending import (
    DEFAULT_MAX_CONTENT_BYTES,
    DEFAULT_MAX_METADATA_BYTES,
    MAX_SESSION_NAME,
    Options,
    Write,
    append_locked,
    as_batch,
    check_session_name,
)
from .engine.state import MsgState
from .erasure import empty_write_ahead_log, erase_locked, message_ids
from .errors import (
    DatabaseError,
    InvalidMessageError,
    InvalidPolicyError,
    TokenizerMismatchError,
    shorten,
)
from .lifecycle import MESSAGE_AT, cut, fork_into, lock_existing, rebuild_session, recount, seq_of
from .livecache import DEFAULT_LIVE_CACHE_BYTES, LiveCache, check_cache_bytes
from .model import Message, Role, StoredMessage
from .policy import Policy
from .results import Delta, Erasure, Summarized
from .sql import db
from .sql.driver import Driver
from .sql.rows import stored_message
from .sql.session_row import SessionRow
from .sql.sessions import UNSETTLED, SessionState, delete_rows, lock_session, lock_session_for_append
from .sql.settings import (
    Settings,
    chosen_tokenizer,
    load_tokenizer,
    read_settings,
    recorded_settings,
    tokenizer_name,
    write_settings,
)
from .store_reads import StoreReads
from .summarizing import Summarizer, Summarizing, summarize

__all__ = ["PruneStore", "MAX_SESSION_NAME"]

# PostgreSQL errors after which an append is simply run again: a unique violation
# (a concurrent retry of the same message committed while this one waited for the
# session lock, so its retry check read a snapshot from before), a serialization
# failure, a deadlock.
_RETRY_SQLSTATES = {"23505", "40001", "40P01"}
_ATTEMPTS = 3

_T = TypeVar("_T")


class _Restart(Exception):
    """The store's tokenizer changed since the messages were counted: count them again, then write."""


class PruneStore(StoreReads):
    """A persistent, incrementally pruned message store (SQLite or PostgreSQL).

    The policy and the tokenizer are recorded in the store when it is created;
    open an existing store with ``policy=None`` and ``tokenizer=None`` to use
    the recorded ones. `rebuild` changes them, and every store object, in
    this process or another, takes the change up before its next write.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        policy: Policy | None = None,
        tokenizer: Callable[[str], int] | str | None = None,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        live_cache_bytes: int = DEFAULT_LIVE_CACHE_BYTES,
        create: bool = True,
    ) -> None:
        """Open the store at `url`, creating it (or bringing an older one up to date) unless `create` is
        False: then a database without a store raises `StoreNotFoundError` and is left untouched."""
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidPolicyError(f"policy={shorten(policy)}: expected a prunestore.Policy")
        check_cache_bytes(live_cache_bytes)
        self.url = db.resolve_url(url)
        options = Options(chosen_tokenizer(tokenizer), max_content_bytes, max_metadata_bytes)
        self._open(db.make_engine(self.url), policy, options, LiveCache(live_cache_bytes), create)

    @classmethod
    def _over(
        cls,
        engine: Engine,
        url: str,
        policy: Policy | None,
        options: Options,
        live_cache: LiveCache,
    ) -> PruneStore:
        """A store over an engine made elsewhere: `AsyncPruneStore` runs this class on its engines."""
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidPolicyError(f"policy={shorten(policy)}: expected a prunestore.Policy")
        store = cls.__new__(cls)
        store.url = url
        store._open(engine, policy, options, live_cache)
        return store

    def _open(
        self, engine: Engine, policy: Policy | None, options: Options, live_cache: LiveCache, create: bool = True
    ) -> None:
        self.engine = engine
        self._options = options
        self._follows = options.tokenizer is None  # counts with whatever the store records
        self.live_cache = live_cache
        try:
            db.ensure_schema(self.engine, create=create)
            self._settings = recorded_settings(self.engine, policy, options.tokenizer)
        except BaseException:
            self.engine.dispose()
            raise

    # -- settings -------------------------------------------------------------

    @property
    def policy(self) -> Policy:
        """The store's policy, as of this object's last read or write (a change elsewhere shows on the next)."""
        return self._settings.policy

    @property
    def tokenizer(self) -> Callable[[str], int]:
        """The function that counts a message's tokens: the one the store records."""
        return self.options.tokenizer  # type: ignore[return-value]

    @property
    def tokenizer_name(self) -> str:
        """The tokenizer's import path, as the store records it."""
        assert self._settings.tokenizer is not None
        return self._settings.tokenizer

    @property
    def options(self) -> Options:
        if self._options.tokenizer is None:  # the store's, loaded when first needed: reads never need it
            assert self._settings.tokenizer is not None
            self._options = replace(self._options, tokenizer=load_tokenizer(self._settings.tokenizer))
        return self._options

    def _adopt(self, current: Settings) -> bool:
        """Work under `current` from now on; whether its tokenizer differs from the one used so far."""
        changed = current.tokenizer != self._settings.tokenizer
        if changed and self._follows:
            self._options = replace(self._options, tokenizer=None)
        self._settings = current
        return changed

    def _refreshed(self, driver: Driver, row: SessionRow | None = None) -> Policy:
        """The policy for a read: this object's, or, when `row` (or any session) was computed under newer
        settings, those."""
        if row is None or row.generation != self._settings.generation:
            current = read_settings(driver)
            if current is not None:
                self._adopt(current)
        return self.policy

    def _settled(self, driver: Driver, row: SessionRow) -> Policy:
        """The policy to write the locked session under, once this object and the row use the store's settings.

        Raises `_Restart` when the tokenizer changed (the messages were
        counted by the old one), and `TokenizerMismatchError` when this object
        was opened with a tokenizer the store no longer records.
        """
        if row.generation == self._settings.generation:
            return self.policy
        current = read_settings(driver, share=row.generation == UNSETTLED)
        assert current is not None, "a store records its settings when it is opened"
        if self._adopt(current):
            if not self._follows:
                raise TokenizerMismatchError(
                    f"tokenizer={tokenizer_name(self._options.tokenizer)!r}: the store's tokens are now counted by "  # type: ignore[arg-type]
                    f"{current.tokenizer!r}; open it with tokenizer=None to use that one"
                )
            raise _Restart
        stale = row.generation not in (UNSETTLED, current.generation)
        row.generation = current.generation  # written with the session row, by this write
        if stale:  # computed under other settings: recompute it first
            recount(driver, row.session_id, self.options.tokens)
            rebuild_session(driver, row, current.policy)
        return current.policy

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
        name = check_session_name(session)
        return self.append_many({name: messages})[name]

    def append_many(self, batches: Mapping[str, Message | Iterable[Message]]) -> dict[str, Delta]:
        """Append to several sessions in one transaction: all of it is stored, or none.

        Sessions are locked in name order, so concurrent callers cannot deadlock.
        """
        if not isinstance(batches, Mapping):
            raise InvalidMessageError(f"batches={shorten(batches)}: expected a mapping of session names to messages")
        given = [(check_session_name(session), as_batch(messages)) for session, messages in batches.items()]

        def prepare() -> list[tuple[str, list[MsgState]]]:
            return [(name, self.options.prepare(batch)) for name, batch in given]

        return self._append_states(prepare(), again=prepare)

    def _append_states(
        self,
        prepared: Iterable[tuple[str, list[MsgState]]],
        again: Callable[[], list[tuple[str, list[MsgState]]]] | None = None,
    ) -> dict[str, Delta]:
        """`append_many` for messages whose derived columns are computed already (the importer does it).

        `again` counts the messages anew, for when the store's tokenizer changed meanwhile.
        """
        prepared = list(prepared)
        for _ in range(_ATTEMPTS):
            try:
                return self._append_prepared(prepared)
            except _Restart:
                if again is None:
                    raise TokenizerMismatchError(
                        f"tokenizer={self._settings.tokenizer!r}: the store's tokenizer changed while these "
                        "messages were counted; nothing of them was written, run the same again"
                    ) from None
                prepared = again()
        raise TokenizerMismatchError("tokenizer: the store's tokenizer kept changing; nothing was written")

    def _append_prepared(self, prepared: list[tuple[str, list[MsgState]]]) -> dict[str, Delta]:
        deltas = {name: Delta() for name, _ in prepared}
        work = [(check_session_name(name), self.options.checked(states)) for name, states in prepared if states]
        work.sort(key=lambda item: item[0])
        if not work:
            return deltas
        action = f"append to session {work[0][0]!r}" + (f" and {len(work) - 1} more" if len(work) > 1 else "")

        def run(driver: Driver, writes: list[Write]) -> dict[str, Delta]:
            for name, states in work:
                deltas[name] = append_locked(driver, name, states, self._settled, writes, expected=self.policy)
            return deltas

        return self._writing(action, run, pipelined=True)

    def append_with(self, session: str, build: Callable[[SessionState], Message | Iterable[Message]]) -> Delta:
        """Append what `build` makes of the session's state, read under the session's write lock.

        For writers that derive a message from what the session holds (its
        current turn, the message that defines a key: the call a tool result
        answers) and must not race another writer doing the same: `build` runs
        inside the transaction, after the lock, and may run again if the
        database asks for a retry, so it should only compute.
        """
        name = check_session_name(session)

        def run(driver: Driver, writes: list[Write]) -> Delta:
            row, _, _ = lock_session_for_append(driver, name, [])
            policy = self._settled(driver, row)
            states = self.options.prepare(build(SessionState(driver, row)))
            return append_locked(driver, name, states, policy, writes, locked=row) if states else Delta()

        return self._writing(f"append to session {name!r}", run, restarts=True, pipelined=True)

    def _writing(
        self, action: str, run: Callable[[Driver, list[Write]], _T], restarts: bool = False, pipelined: bool = False
    ) -> _T:
        """Run `run` in a write transaction, again where PostgreSQL asks for it; then move the live cache on.

        With `restarts`, `run` counts its messages itself, and runs again after a tokenizer change.
        `pipelined`: see `db.transaction`.
        """
        for attempt in range(_ATTEMPTS):
            writes: list[Write] = []
            try:
                with db.transaction(self.engine, action, write=True, pipelined=pipelined) as driver:
                    result = run(driver, writes)
            except _Restart:
                if restarts and attempt + 1 < _ATTEMPTS:
                    continue
                raise
            except DatabaseError as exc:
                if attempt + 1 == _ATTEMPTS or getattr(exc.__cause__, "sqlstate", None) not in _RETRY_SQLSTATES:
                    raise
                continue
            for write in writes if self.live_cache.max_bytes else ():  # committed: move cached live lists forward
                self.live_cache.advance(*write)
            return result
        raise AssertionError("unreachable")

    def rebuild(
        self,
        session: str | None = None,
        *,
        policy: Policy | None = None,
        tokenizer: Callable[[str], int] | str | None = None,
    ) -> None:
        """Recompute the stored state from the messages (to repair it, or to change the policy or tokenizer).

        A new `policy` or `tokenizer` applies to the whole store, so it needs
        ``session=None``; a new tokenizer counts every message again. It is
        recorded with the policy, by its import path (``module:name``), so
        other processes must be able to import it; a built-in counter may be
        given by its short name (``"o200k_base"``). Every store object open on
        the store takes the change up before its next write.
        """
        if policy is not None or tokenizer is not None:
            if session is not None:
                field = "policy" if policy is not None else "tokenizer"
                raise InvalidPolicyError(f"{field}: a change of it rebuilds every session; pass session=None")
            if policy is not None and not isinstance(policy, Policy):
                raise InvalidPolicyError(f"policy={shorten(policy)}: expected a prunestore.Policy")
        tokenizer = chosen_tokenizer(tokenizer)
        counter = None if tokenizer is None else replace(self._options, tokenizer=tokenizer)

        def run(driver: Driver, _: list[Write]) -> Settings:
            current = read_settings(driver)
            assert current is not None, "a store records its settings when it is opened"
            if policy is not None or tokenizer is not None:
                current = Settings(
                    policy or current.policy,
                    current.tokenizer if tokenizer is None else tokenizer_name(tokenizer),
                    current.generation + 1,
                )
                write_settings(driver, current)  # first: it waits for writers creating a session
            for name in self._names(driver, session):
                row = lock_session(driver, name)
                if row is None:  # deleted meanwhile
                    continue
                if counter is not None:
                    recount(driver, row.session_id, counter.tokens)
                row.generation = current.generation
                rebuild_session(driver, row, current.policy, reindex=True)
            return current

        settled = self._writing("rebuild", run)
        self._adopt(settled)
        if counter is not None:
            self._options = counter
        self.live_cache.forget(session)  # their stamps changed: free the memory now

    def delete_session(self, session: str) -> None:
        """Remove the session and every row that belongs to it."""
        name = check_session_name(session)
        with db.transaction(self.engine, f"delete session {name!r}", write=True) as driver:
            delete_rows(driver, lock_existing(driver, name).session_id)
        self.live_cache.forget(name)

    def truncate(self, session: str, after_message_id: str) -> Delta:
        """Drop every message after `after_message_id` and give the session back the state it had then.

        For regenerate and undo. The appends after the cut are taken back from
        the undo journal, so the cost follows what is cut, not the session's
        length; a cut into history written before the last `rebuild` or `fork`
        of the session is recomputed as a batch over what remains instead.
        The returned `Delta` moves a client's live set to the new one.
        """
        name = check_session_name(session)

        def run(driver: Driver, writes: list[Write]) -> Delta:
            row = lock_existing(driver, name)
            at = seq_of(driver, name, row, "after_message_id", after_message_id)
            return cut(driver, name, row, at, self._settled(driver, row), writes)

        return self._writing(f"truncate session {name!r}", run, restarts=True)

    def pop(self, session: str) -> StoredMessage | None:
        """Remove the session's last message and return it (None for an empty or unknown session).

        One transaction under the session's lock, so concurrent pops each take
        a different message and a message appended meanwhile is never lost;
        the state goes back to what it was before that message, as `truncate`
        gives it.
        """
        name = check_session_name(session)

        def run(driver: Driver, writes: list[Write]) -> StoredMessage | None:
            row = lock_session(driver, name)
            if row is None or row.last_seq == 0:
                return None
            last = driver.first(MESSAGE_AT, {"sid": row.session_id, "seq": row.last_seq})
            cut(driver, name, row, row.last_seq - 1, self._settled(driver, row), writes)
            return stored_message(last)

        return self._writing(f"pop from session {name!r}", run, restarts=True)

    def erase(self, session: str, ids: str | Iterable[str]) -> Erasure:
        """Remove what messages said, for good, and recompute the session without it (docs/semantics.md,
        "Erasure"); the receipt lists what was erased and what moved.

        Their content, keys and metadata leave every row, the undo journal and
        the live cache; the session is rebuilt, so an erasure costs the
        session's length. Unknown ids raise and change nothing.
        """
        name, wanted = check_session_name(session), message_ids(ids)

        def run(driver: Driver, _: list[Write]) -> Erasure:
            row = lock_existing(driver, name)
            return erase_locked(driver, name, row, wanted, self._settled(driver, row))

        receipt = self._writing(f"erase from session {name!r}", run, restarts=True)
        self.live_cache.forget(name)
        if receipt.erased and not empty_write_ahead_log(self.engine):
            receipt = replace(receipt, log_kept=True)
        return receipt

    def summarize(self, session: str, summarizer: Summarizer, *, role: Role = "user") -> Summarized:
        """Append a summary of each span `unsummarized` gives, as `summarizer(span)` writes it
        (docs/semantics.md, "Summaries"); a span whose summarizer fails stays as it was."""
        return summarize(self, session, Summarizing(session, role, summarizer))

    def fork(self, session: str, at_message_id: str, new_session: str) -> None:
        """Start `new_session` with the messages of `session` up to and including `at_message_id`.

        For branching and edit-and-regenerate. The new session's state is a
        batch over that prefix; `session` is left as it is.
        """
        name, new = check_session_name(session), check_session_name(new_session)

        def run(driver: Driver, _: list[Write]) -> None:
            row = lock_existing(driver, name)
            at = seq_of(driver, name, row, "at_message_id", at_message_id)
            fork_into(driver, row, at, new, self._settled(driver, row))

        self._writing(f"fork session {name!r} into {new!r}", run, restarts=True)
