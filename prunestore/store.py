"""`PruneStore`: sessions on disk whose live set is kept up to date on every append."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from . import catalog, queries
from .appending import (
    DEFAULT_MAX_CONTENT_BYTES,
    DEFAULT_MAX_METADATA_BYTES,
    MAX_SESSION_NAME,
    Options,
    Write,
    append_locked,
    as_batch,
    check_ids,
    check_session_name,
)
from .engine.state import MsgState
from .errors import (
    DatabaseError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPolicyError,
    PolicyMismatchError,
    SessionNotFoundError,
    TokenizerMismatchError,
    no_such_message,
    shorten,
)
from .formats import Rendered, render
from .lifecycle import MESSAGE_AT, cut, delete_rows, fork_into, lock_existing, rebuild_session, recount, seq_of
from .livecache import DEFAULT_LIVE_CACHE_BYTES, LiveCache, check_cache_bytes, read_live, read_view
from .model import (
    ROLES,
    VERDICTS,
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
from .sql import db
from .sql.driver import Driver
from .sql.rows import ALL_MESSAGES, MESSAGES_BY_ID, SessionRow, stored_message
from .sql.sessions import UNSETTLED, SessionState, find_session, lock_session, lock_session_for_append
from .sql.settings import (
    DEFAULT_TOKENIZER,
    Settings,
    load_tokenizer,
    read_settings,
    recorded_policies,
    tokenizer_name,
    write_settings,
)
from .views import Form

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


class PruneStore:
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
        tokenizer: Callable[[str], int] | None = None,
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
        options = Options(tokenizer, max_content_bytes, max_metadata_bytes)
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
            self._settings = _recorded_settings(self.engine, policy, options.tokenizer)
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
            recount(driver, row.session_id, self.options.count)
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
                deltas[name] = append_locked(driver, name, states, self._settled, writes)
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
            policy = self._settled(driver, row)
            states = self.options.prepare(build(SessionState(driver, row)))
            return append_locked(driver, name, states, policy, writes, locked=row) if states else Delta()

        return self._writing(f"append to session {name!r}", run, restarts=True)

    def _writing(self, action: str, run: Callable[[Driver, list[Write]], _T], restarts: bool = False) -> _T:
        """Run `run` in a write transaction, again where PostgreSQL asks for it; then move the live cache on.

        With `restarts`, `run` counts its messages itself, and runs again after a tokenizer change.
        """
        for attempt in range(_ATTEMPTS):
            writes: list[Write] = []
            try:
                with db.transaction(self.engine, action, write=True) as driver:
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
        tokenizer: Callable[[str], int] | None = None,
    ) -> None:
        """Recompute the stored state from the messages (to repair it, or to change the policy or tokenizer).

        A new `policy` or `tokenizer` applies to the whole store, so it needs
        ``session=None``; a new tokenizer counts every message again. It is
        recorded with the policy, by its import path (``module:name``), so
        other processes must be able to import it. Every store object open on
        the store takes the change up before its next write.
        """
        if policy is not None or tokenizer is not None:
            if session is not None:
                field = "policy" if policy is not None else "tokenizer"
                raise InvalidPolicyError(f"{field}: a change of it rebuilds every session; pass session=None")
            if policy is not None and not isinstance(policy, Policy):
                raise InvalidPolicyError(f"policy={shorten(policy)}: expected a prunestore.Policy")
            if tokenizer is not None and not callable(tokenizer):
                raise InvalidPolicyError(f"tokenizer={shorten(tokenizer)}: expected a function of a text")
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
                    recount(driver, row.session_id, counter.count)
                row.generation = current.generation
                rebuild_session(driver, row, current.policy)
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
            raise no_such_message("ids", first, session)
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
        after: str | SessionSummary | None = None,
        order: str = "name",
    ) -> list[SessionSummary]:
        """`sessions`, with each session's counts: read from the session rows alone, at any session length.

        `order` is "name", or "messages", "tokens", "live_tokens" or
        "updated_at" (the largest or latest first, ties by name); in those,
        the next page starts `after` the last row of the previous one (its
        `SessionSummary`), and a page sorts every session the prefix matches.
        """
        if order != "name" and order not in catalog.ORDERS:
            known = ", ".join(["name", *catalog.ORDERS])
            raise InvalidArgumentError(f"order={shorten(order)}: must be one of {known}")
        if order != "name" and idle_for is not None:
            raise InvalidArgumentError("idle_for: pages in another order than by name take no idle_for")
        last = after if isinstance(after, SessionSummary) else None
        if order != "name" and after is not None and last is None:
            raise InvalidArgumentError(
                f"after={shorten(after)}: with order={order!r}, pass the previous page's last SessionSummary"
            )
        page = catalog.page_params(prefix, idle_for, limit, last.name if last is not None else after)
        if last is not None and order != "name":
            page["after_value"] = getattr(last, order)  # the orders are named as the summary's fields
        with db.transaction(self.engine, "list sessions") as driver:
            return catalog.list_summaries(driver, page, order)

    def session_count(self, prefix: str | None = None) -> int:
        """How many sessions the store holds (whose names start with `prefix`)."""
        page = catalog.page_params(prefix, None, None, None)
        with db.transaction(self.engine, "count sessions") as driver:
            return catalog.count_sessions(driver, page)

    def summary(self, session: str) -> SessionSummary:
        """One session's counts, from its row alone."""
        with db.transaction(self.engine, f"read session {session!r}") as driver:
            return queries.summary(driver, self._session(driver, session).session_id)

    def window(
        self,
        session: str,
        *,
        after: int = 0,
        limit: int = 100,
        text_chars: int | None = None,
        verdicts: Iterable[str] | None = None,
        roles: Iterable[str] | None = None,
        contains: str | None = None,
        from_turn: int | None = None,
    ) -> Window:
        """The messages after seq `after` (at most `limit`), each with why it has its verdict, and the session's counts.

        One snapshot; it reads those rows (and a lookup per pruned or restored
        one), so a page of a long session costs what the page holds. With
        `text_chars`, each message holds only the first characters of its
        content (`Entry.content_chars` is the whole length), and only those are read.

        With `verdicts`, `roles`, `contains` (a text the content holds, case
        as given) or `from_turn`, the window holds the next `limit` messages
        after seq `after` that match them all; the next page starts after the
        last one's seq. A filtered page reads the session's rows up to the
        last match, so a rare match costs up to the session's length.
        """
        catalog.check_whole("after", after, 0)
        catalog.check_whole("limit", limit, 1)
        if text_chars is not None:
            catalog.check_whole("text_chars", text_chars, 0)
        only = _window_filter(verdicts, roles, contains, from_turn)
        with db.transaction(self.engine, f"read session {session!r}", snapshot=True) as driver:
            row = self._session(driver, session)
            policy = self._refreshed(driver, row)
            return queries.window(driver, session, row, after, limit, policy, text_chars, only)

    def entry(self, session: str, message_id: str) -> Entry:
        """One message and why it has its verdict (`explain`), read in one snapshot."""
        with db.transaction(self.engine, f"explain in session {session!r}", snapshot=True) as driver:
            row = self._session(driver, session)
            return queries.entry(driver, session, row, message_id, self._refreshed(driver, row))

    def history(self, session: str) -> list[HistoryPoint]:
        """The session's tokens, in all and in the prompt, and its removal events, as each append left them.

        One point per append (an import of many turns in one append is one
        point); appends from before this was recorded are not in it.
        """
        with db.transaction(self.engine, f"read session {session!r}") as driver:
            row = self._session(driver, session)
            self._refreshed(driver, row)  # a chart of it draws the store's budget
            return queries.history(driver, row.session_id)

    def policies(self) -> dict[int, Policy]:
        """The store's policy by settings generation (`HistoryPoint.generation`): each one it has had, as far
        as recorded, and the current one."""
        with db.transaction(self.engine, "read the store's policies") as driver:
            current = self._refreshed(driver)
            return {**recorded_policies(driver), self._settings.generation: current}

    def stats(self, session: str | None = None) -> Stats:
        """Messages and tokens, total and live, per verdict, of one session or of all."""
        with db.transaction(self.engine, "stats", snapshot=True) as driver:
            if session is None:
                return queries.stats(driver, None, len(self._names(driver, None)), self._refreshed(driver))
            row = self._session(driver, session)
            return queries.stats(driver, row.session_id, 1, self._refreshed(driver, row))

    def verify(self, session: str | None = None) -> VerifyReport:
        """Rerun `prune` over the stored messages and report every difference from the stored state.

        Each message's tokens are counted again by the store's tokenizer and compared too.
        """
        with db.transaction(self.engine, "verify", snapshot=True) as driver:
            policy = self._refreshed(driver)
            rows = ((name, self._session(driver, name)) for name in self._names(driver, session))
            return queries.verify_sessions(driver, rows, policy, self.options.count)


def _window_filter(
    verdicts: Iterable[str] | None, roles: Iterable[str] | None, contains: str | None, from_turn: int | None
) -> queries.Filter | None:
    """The filter of a window, once each part is checked; None when nothing filters."""
    if verdicts is None and roles is None and contains is None and from_turn is None:
        return None
    chosen: list[tuple[str, ...] | None] = []
    for field, values, known in (("verdicts", verdicts, VERDICTS), ("roles", roles, ROLES)):
        if values is None:
            chosen.append(None)
            continue
        if isinstance(values, str):
            raise InvalidArgumentError(f"{field}={shorten(values)}: must be a list, not a single string")
        listed = tuple(dict.fromkeys(values))
        unknown = [v for v in listed if v not in known]
        if unknown or not listed:
            raise InvalidArgumentError(f"{field}={shorten(values)}: each must be one of {', '.join(sorted(known))}")
        chosen.append(listed)
    if contains is not None:
        catalog.check_text("contains", contains, "a text")
        if not contains:
            raise InvalidArgumentError("contains='': must not be empty")
    if from_turn is not None:
        catalog.check_whole("from_turn", from_turn, 0)
    return queries.Filter(chosen[0], chosen[1], contains, from_turn)


def _recorded_settings(engine: Engine, policy: Policy | None, tokenizer: Callable[[str], int] | None) -> Settings:
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
