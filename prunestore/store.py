"""`PruneStore`: sessions on disk whose live set is kept up to date on every append."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from . import catalog, db, queries
from .appending import (
    DEFAULT_MAX_CONTENT_BYTES,
    DEFAULT_MAX_METADATA_BYTES,
    MAX_SESSION_NAME,
    Options,
    Write,
    append_locked,
    check_ids,
    check_session_name,
)
from .driver import Driver, Statement
from .errors import (
    DatabaseError,
    InvalidMessageError,
    InvalidPolicyError,
    MessageNotFoundError,
    PolicyMismatchError,
    SessionNotFoundError,
    shorten,
)
from .formats import Rendered, render
from .incremental import MsgState
from .lifecycle import MESSAGE_AT, cut, delete_rows, fork_into, lock_existing, rebuild_session, seq_of
from .livecache import DEFAULT_LIVE_CACHE_BYTES, LiveCache, check_cache_bytes, read_live, read_view
from .model import (
    Message,
    Policy,
    StoredMessage,
)
from .results import (
    Delta,
    Entry,
    Explanation,
    GcReport,
    HistoryPoint,
    SessionSummary,
    Stats,
    VerifyReport,
    Window,
)
from .storage import (
    ALL_MESSAGES,
    MESSAGES_BY_ID,
    SessionRow,
    SessionState,
    find_session,
    lock_session,
    lock_session_for_append,
    stored_message,
)
from .text import count_tokens
from .views import Form

__all__ = ["PruneStore", "MAX_SESSION_NAME"]

# PostgreSQL errors after which an append is simply run again: a unique violation
# (a concurrent retry of the same message committed while this one waited for the
# session lock, so its retry check read a snapshot from before), a serialization
# failure, a deadlock.
_RETRY_SQLSTATES = {"23505", "40001", "40P01"}
_ATTEMPTS = 3

_GET_SETTING = Statement("SELECT value FROM prunestore_settings WHERE name = :name")
_PUT_SETTING = Statement(
    "INSERT INTO prunestore_settings (name, value) VALUES (:name, :value) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)
_T = TypeVar("_T")


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
        options = Options(tokenizer, max_content_bytes, max_metadata_bytes)
        self._open(db.make_engine(self.url), policy, options, LiveCache(live_cache_bytes))

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

    def _open(self, engine: Engine, policy: Policy | None, options: Options, live_cache: LiveCache) -> None:
        self.engine = engine
        self.options = options
        self.tokenizer = options.tokenizer
        self.live_cache = live_cache
        try:
            db.ensure_schema(self.engine)
            self.policy = _recorded_policy(self.engine, policy)
        except BaseException:
            self.engine.dispose()
            raise

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
        prepared = []
        for session, messages in batches.items():
            prepared.append((check_session_name(session), self.options.prepare(messages)))
        return self._append_states(prepared)

    def _append_states(self, prepared: Iterable[tuple[str, list[MsgState]]]) -> dict[str, Delta]:
        """`append_many` for messages whose derived columns are computed already (the importer does it)."""
        prepared = list(prepared)
        deltas = {name: Delta() for name, _ in prepared}
        work = [(check_session_name(name), self.options.checked(states)) for name, states in prepared if states]
        work.sort(key=lambda item: item[0])
        if not work:
            return deltas
        action = f"append to session {work[0][0]!r}" + (f" and {len(work) - 1} more" if len(work) > 1 else "")

        def run(driver: Driver, writes: list[Write]) -> dict[str, Delta]:
            for name, states in work:
                deltas[name] = append_locked(driver, name, states, self.policy, writes)
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
        name = check_session_name(session)

        def run(driver: Driver, writes: list[Write]) -> Delta:
            row, _ = lock_session_for_append(driver, name, [])
            states = self.options.prepare(build(SessionState(driver, row)))
            return append_locked(driver, name, states, self.policy, writes, locked=row) if states else Delta()

        return self._writing(f"append to session {name!r}", run)

    def _writing(self, action: str, run: Callable[[Driver, list[Write]], _T]) -> _T:
        """Run `run` in a write transaction, again where PostgreSQL asks for it; then move the live cache on."""
        for attempt in range(_ATTEMPTS):
            writes: list[Write] = []
            try:
                with db.transaction(self.engine, action, write=True) as driver:
                    result = run(driver, writes)
            except DatabaseError as exc:
                if attempt + 1 == _ATTEMPTS or getattr(exc.__cause__, "sqlstate", None) not in _RETRY_SQLSTATES:
                    raise
                continue
            for write in writes if self.live_cache.max_bytes else ():  # committed: move cached live lists forward
                self.live_cache.advance(*write)
            return result
        raise AssertionError("unreachable")

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
                _record_policy(driver, policy)
            use = policy or self.policy
            for name in self._names(driver, session):
                row = lock_session(driver, name)
                assert row is not None
                rebuild_session(driver, row, use)
        if policy is not None:
            self.policy = policy
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
        self.live_cache.forget(name)  # its stamp is about to change: free the memory
        with db.transaction(self.engine, f"truncate session {name!r}", write=True) as driver:
            row = lock_existing(driver, name)
            return cut(driver, name, row, seq_of(driver, row, "after_message_id", after_message_id), self.policy)

    def pop(self, session: str) -> StoredMessage | None:
        """Remove the session's last message and return it (None for an empty or unknown session).

        One transaction under the session's lock, so concurrent pops each take
        a different message and a message appended meanwhile is never lost;
        the state goes back to what it was before that message, as `truncate`
        gives it.
        """
        name = check_session_name(session)
        self.live_cache.forget(name)
        with db.transaction(self.engine, f"pop from session {name!r}", write=True) as driver:
            row = lock_session(driver, name)
            if row is None or row.last_seq == 0:
                return None
            last = driver.first(MESSAGE_AT, {"sid": row.session_id, "seq": row.last_seq})
            cut(driver, name, row, row.last_seq - 1, self.policy)
            return stored_message(last)

    def fork(self, session: str, at_message_id: str, new_session: str) -> None:
        """Start `new_session` with the messages of `session` up to and including `at_message_id`.

        For branching and edit-and-regenerate. The new session's state is a
        batch over that prefix; `session` is left as it is.
        """
        name, new = check_session_name(session), check_session_name(new_session)
        with db.transaction(self.engine, f"fork session {name!r} into {new!r}", write=True) as driver:
            row = lock_existing(driver, name)
            fork_into(driver, row, seq_of(driver, row, "at_message_id", at_message_id), new, self.policy)

    # -- reads --------------------------------------------------------------

    def _session(self, driver: Driver, session: str) -> SessionRow:
        row = find_session(driver, check_session_name(session))
        if row is None:
            raise SessionNotFoundError(f"session={shorten(session)}: no such session")
        return row

    def _names(self, driver: Driver, session: str | None) -> list[str]:
        if session is None:
            return catalog.list_names(driver, catalog.page_params(None, None, None, None))
        self._session(driver, session)
        return [session]

    def live(self, session: str) -> list[StoredMessage]:
        """The live messages, in append order: what goes into the prompt.

        Their metadata is read-only (`prunestore.frozen`): the messages are
        shared between calls. The list is kept in memory (`PruneStore(live_cache_bytes=...)`, see
        `prunestore.livecache`): a call after this store's own append reads
        the session's row and the rows that append changed, not the session.
        """
        # One snapshot, so that the rows read belong to the stamp read.
        with db.transaction(self.engine, f"read session {session!r}", snapshot=self.live_cache.max_bytes > 0) as d:
            return read_live(self.live_cache, d, session, self._session(d, session))

    def view(self, session: str, form: Form) -> list[Any]:
        """The session's prompt as a framework's objects (see `prunestore.views`), in append order.

        Kept in memory beside the live list, and patched the same way: a call
        after this store's own append reads the session's row and the rows
        that append changed. The list is new on every call; the objects in it
        are shared between calls and must not be changed.
        """
        with db.transaction(self.engine, f"read session {session!r}", snapshot=self.live_cache.max_bytes > 0) as d:
            return read_view(self.live_cache, d, session, self._session(d, session), form)

    def messages(self, session: str, ids: Iterable[str] | None = None) -> list[StoredMessage]:
        """Every message of the session with its verdict, in append order; with `ids`, only those.

        `messages(session, ids=delta.live_added)` is what a client that keeps
        its prompt up to date from each append's `Delta` lacks: the new live
        messages, and old ones brought back (it may have dropped them). It
        reads those rows only, so the turn costs the same at any length.
        """
        wanted = None if ids is None else check_ids(ids)
        with db.transaction(self.engine, f"read session {session!r}") as driver:
            sid = self._session(driver, session).session_id
            if wanted is None:
                return [stored_message(r) for r in driver.all(ALL_MESSAGES, {"sid": sid})]
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

    def sessions(
        self,
        prefix: str | None = None,
        *,
        idle_for: timedelta | float | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[str]:
        """Session names in order: those starting with `prefix`, last written at least `idle_for` ago.

        Pass `limit` for a page and the page's last name as `after` for the
        next one; each page costs the same however deep it lies. `idle_for`
        is a timedelta or seconds, to the second.
        """
        page = catalog.page_params(prefix, idle_for, limit, after)
        with db.transaction(self.engine, "list sessions") as driver:
            return catalog.list_names(driver, page)

    def gc(self, idle_for: timedelta | float, *, dry_run: bool = False, batch_size: int = 100) -> GcReport:
        """Delete every session last written at least `idle_for` ago, `batch_size` sessions a transaction.

        A transaction also ends after 2,000 messages, so writers to other
        sessions wait briefly however long the idle sessions are.

        A session written while this runs is kept. With `dry_run`, nothing is
        deleted and the report says what would be.
        """
        page = catalog.page_params(None, idle_for, batch_size, None, limit_field="batch_size")
        removed: list[str] = []
        messages = 0
        while True:
            with db.transaction(self.engine, "remove idle sessions", write=not dry_run) as driver:
                batch, last = catalog.remove_idle(driver, page, dry_run)
            for name, count in batch:
                removed.append(name)
                messages += count
                if not dry_run:
                    self.live_cache.forget(name)
            if last is None:
                return GcReport(tuple(removed), messages, dry_run)
            page["after"] = last

    def explain(self, session: str, message_id: str) -> Explanation:
        """The verdict of one message and what caused it."""
        return self.entry(session, message_id).explanation

    def summaries(
        self,
        prefix: str | None = None,
        *,
        idle_for: timedelta | float | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[SessionSummary]:
        """`sessions`, with each session's counts: read from the session rows alone, at any session length."""
        page = catalog.page_params(prefix, idle_for, limit, after)
        with db.transaction(self.engine, "list sessions") as driver:
            return catalog.list_summaries(driver, page)

    def summary(self, session: str) -> SessionSummary:
        """One session's counts, from its row alone."""
        with db.transaction(self.engine, f"read session {session!r}") as driver:
            return queries.summary(driver, self._session(driver, session).session_id)

    def window(self, session: str, *, after: int = 0, limit: int = 100) -> Window:
        """The messages after seq `after` (at most `limit`), each with why it has its verdict, and the session's counts.

        One snapshot; it reads those rows (and a lookup per pruned or restored
        one), so a page of a long session costs what the page holds.
        """
        catalog.check_whole("after", after, 0)
        catalog.check_whole("limit", limit, 1)
        with db.transaction(self.engine, f"read session {session!r}", snapshot=True) as driver:
            row = self._session(driver, session)
            return queries.window(driver, session, row, after, limit, self.policy)

    def entry(self, session: str, message_id: str) -> Entry:
        """One message and why it has its verdict (`explain`), read in one snapshot."""
        with db.transaction(self.engine, f"explain in session {session!r}", snapshot=True) as driver:
            return queries.entry(driver, session, self._session(driver, session), message_id, self.policy)

    def history(self, session: str) -> list[HistoryPoint]:
        """The session's tokens, in all and in the prompt, and its removal events, as each append left them.

        One point per append (an import of many turns in one append is one
        point); appends from before this was recorded are not in it.
        """
        with db.transaction(self.engine, f"read session {session!r}") as driver:
            return queries.history(driver, self._session(driver, session).session_id)

    def stats(self, session: str | None = None) -> Stats:
        """Messages and tokens, total and live, per verdict, of one session or of all."""
        with db.transaction(self.engine, "stats", snapshot=True) as driver:
            if session is None:
                return queries.stats(driver, None, len(self._names(driver, None)), self.policy)
            return queries.stats(driver, self._session(driver, session).session_id, 1, self.policy)

    def verify(self, session: str | None = None) -> VerifyReport:
        """Rerun `prune` over the stored messages and report every difference from the stored state."""
        with db.transaction(self.engine, "verify", snapshot=True) as driver:
            rows = ((name, self._session(driver, name)) for name in self._names(driver, session))
            return queries.verify_sessions(driver, rows, self.policy)


def _recorded_policy(engine: Engine, policy: Policy | None) -> Policy:
    """The policy the store records, recorded now if it has none; a different explicit one is refused."""
    with db.transaction(engine, "read the store's policy") as driver:  # a read: the store may be read-only
        recorded = driver.scalar(_GET_SETTING, {"name": "policy"})
    if recorded is None:
        with db.transaction(engine, "record the store's policy", write=True) as driver:
            recorded = driver.scalar(_GET_SETTING, {"name": "policy"})  # another store may have been first
            if recorded is None:
                policy = policy or Policy()
                _record_policy(driver, policy)
                return policy
    stored = Policy.from_json(recorded)
    if policy is not None and policy != stored:
        raise PolicyMismatchError(
            f"policy={policy!r}: the store at {engine.url!r} was created with {stored!r}; "
            "open it with policy=None, or change it with rebuild(policy=...)"
        )
    return stored


def _record_policy(driver: Driver, policy: Policy) -> None:
    driver.run(_PUT_SETTING, {"name": "policy", "value": policy.to_json()})
