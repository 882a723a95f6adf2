"""The questions a `PruneStore` answers: the prompt, the messages, why each has its verdict, the counts.

Every read runs in one transaction (a snapshot where it reads more than one
statement's worth) and writes nothing, so a read-only store answers them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from . import catalog, queries, recall, summarizing, whatif
from .appending import Options, check_ids, check_session_name
from .erasure import receipts
from .errors import InvalidArgumentError, InvalidPolicyError, SessionNotFoundError, no_such_message, shorten
from .formats import Dropped, Format, Rendered, RenderLinks, render_prompt
from .lifecycle import seq_of
from .livecache import LiveCache, read_live, read_view
from .model import ROLES, VERDICTS, StoredMessage
from .policy import Policy
from .prices import Prices, chosen_prices
from .results import (
    Entry,
    Erasure,
    Explanation,
    GcReport,
    HistoryPoint,
    PromptSource,
    SessionSummary,
    Stats,
    VerifyReport,
    Window,
)
from .sql import db
from .sql.calls import prompt_rows
from .sql.driver import Driver
from .sql.rows import ALL_MESSAGES, MESSAGES_BY_ID, stored_message
from .sql.session_row import SessionRow
from .sql.sessions import find_session
from .sql.settings import Settings, recorded_policies
from .views import Form, Prompt
from .whatif import WhatIf

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


class StoreReads:
    """The read half of `PruneStore`."""

    if TYPE_CHECKING:  # what the store itself holds
        engine: Engine
        live_cache: LiveCache
        _settings: Settings

        @property
        def options(self) -> Options: ...

        def _refreshed(self, driver: Driver, row: SessionRow | None = None) -> Policy: ...

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
        """The live messages, in the prompt's order: what goes into the prompt.

        That is append order, but for each summary, which stands where its span began
        (docs/semantics.md, "Summaries").

        Their metadata is read-only (`prunestore.frozen`): the messages are
        shared between calls. The list is kept in memory (`PruneStore(live_cache_bytes=...)`, see
        `prunestore.livecache`): a call after this store's own append reads
        the session's row and the rows that append changed, not the session.
        """
        # One snapshot, so that the rows read belong to the stamp read.
        with db.transaction(self.engine, f"read session {session!r}", snapshot=self.live_cache.max_bytes > 0) as d:
            return read_live(self.live_cache, d, session, self._session(d, session))

    def view(self, session: str, form: Form) -> Prompt:
        """The session's prompt as a framework's objects (see `prunestore.views`), in append order.

        Kept in memory beside the live list, and patched the same way: a call
        after this store's own append reads the session's row and the rows
        that append changed. The list is new on every call; the objects in it
        are shared between calls and must not be changed. Its `stable`
        attribute counts the first items that stay as they are through the
        next removal event (all of them when nothing is pending): where a
        prompt cache breakpoint keeps its worth across the event.
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

    def render(self, session: str, format: Format = "openai", *, dropped: Dropped = "omit") -> Rendered:
        """The session's live history as a prompt the provider accepts: see `prunestore.formats.render`.

        `format` is "openai", "anthropic" or "text"; `dropped` is "omit" or
        "placeholder" (a pruned tool result keeps its call and says why it is gone).
        """
        links = RenderLinks()
        source = self._prompt_source(session, links)
        return render_prompt(source.messages, format, dropped, (source.stored, source.tokens), links.items)

    def prompt_messages(self, session: str) -> PromptSource:
        """The stored messages that decide the session's prompt, with the session's size: what `render` reads.

        The live messages, the session's last ones back to one that is not a
        tool result, and every message that makes or answers a call those
        name, in append order; `render` of them is the session's prompt. For
        a view of the prompt and of the calls it leaves out, at the cost of
        the prompt rather than of the session.
        """
        return self._prompt_source(session, RenderLinks())

    def _prompt_source(self, session: str, links: RenderLinks) -> PromptSource:
        with db.transaction(self.engine, f"read session {session!r}") as driver:
            row = self._session(driver, session)
            read = prompt_rows(driver, row, links)
            if read is None:  # a call with no id: the index cannot find what answers it
                messages = [stored_message(r) for r in driver.all(ALL_MESSAGES, {"sid": row.session_id})]
            else:
                messages = [message for _, message in read]
            return PromptSource(tuple(messages), row.last_seq, row.totals.tokens)

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

    def recall(
        self,
        session: str,
        *,
        key: str | None = None,
        text: str | None = None,
        first: str | None = None,
        last: str | None = None,
        limit: int = 10,
    ) -> list[StoredMessage]:
        """Messages out of the prompt (pruned or evicted) that an agent asks for again, in append order.

        Those that define `key` (as a field or a ``DEFINE:`` marker), hold every
        word of `text` (case aside), and stand between the messages `first`
        and `last` (ids, both included), as far as given; the latest `limit`
        of them. It reads back from the newest message until it has `limit`,
        so a rare match costs up to the session's length, unless the store
        has the recall index (docs/operations.md). Nothing changes:
        what it returns goes back to the model as the result of the call that
        asked, a new message of the session.
        """
        catalog.check_whole("limit", limit, 1)
        with db.transaction(self.engine, f"recall in session {session!r}", snapshot=True) as driver:
            row = self._session(driver, session)
            low = 1 if first is None else seq_of(driver, session, row, "first", first)
            high = row.last_seq if last is None else seq_of(driver, session, row, "last", last)
            query = recall.Query.of(key, text, low, high)
            return recall.recall(driver, row.session_id, query, limit)

    def unsummarized(self, session: str) -> list[list[StoredMessage]]:
        """The evicted messages that no summary stands for, in spans: what to summarize next.

        A span is a run of them in append order that no message in the prompt interrupts, as
        `PruneResult.unsummarized` gives it (docs/semantics.md, "Summaries"). It reads the session's
        evicted messages that nothing covers, and its prompt.
        """
        with db.transaction(self.engine, f"read session {session!r}", snapshot=True) as driver:
            row = self._session(driver, session)
            prompt = read_live(self.live_cache, driver, session, row)
            return summarizing.unsummarized(driver, row.session_id, prompt)

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

    def erasures(self, session: str) -> list[Erasure]:
        """The receipts of the session's erasures, oldest first, each as `erase` returned it, with its time.

        Ids and verdicts only: what was erased is in none of them.
        """
        with db.transaction(self.engine, f"read session {session!r}") as driver:
            return receipts(driver, session, self._session(driver, session).session_id)

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

    def what_if(self, session: str, policy: Policy | None = None, prices: Prices | str | None = None) -> WhatIf:
        """Replay the session under `policy` (default: the store's) without writing, and price its prompts.

        One prompt per turn, priced with `prices` (a `prunestore.prices.Prices`
        or a preset's name; default the policy's `prices`, else Anthropic's
        5-minute cache) against sending everything; see docs/cost.md.
        """
        if prices is not None:
            chosen_prices(prices)  # refused before the store is read
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidPolicyError(f"policy={shorten(policy)}: must be a Policy")
        with db.transaction(self.engine, f"replay session {session!r}", snapshot=True) as driver:
            current = self._refreshed(driver)
            row = self._session(driver, session)
            replayed = policy or current
            chosen = chosen_prices(prices if prices is not None else replayed.prices)
            return whatif.what_if(driver, session, row, replayed, chosen)

    def verify(self, session: str | None = None) -> VerifyReport:
        """Rerun `prune` over the stored messages and report every difference from the stored state.

        Each message's tokens are counted again by the store's tokenizer and compared too.
        """
        with db.transaction(self.engine, "verify", snapshot=True) as driver:
            policy = self._refreshed(driver)
            rows = ((name, self._session(driver, name)) for name in self._names(driver, session))
            return queries.verify_sessions(driver, rows, policy, self.options.tokens)


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
