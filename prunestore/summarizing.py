"""Summaries the store has written for it: the evicted spans nothing stands for, and one summary per span.

The store never calls a model on its own. `PruneStore.summarize` hands each
span to the caller's function and appends what it returns as a summary of
the span (docs/semantics.md, "Summaries"); a span whose function fails stays
evicted and unsummarized, and the next call offers it again.
"""

from __future__ import annotations

import inspect
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Protocol
from uuid import uuid4

from .errors import InvalidArgumentError, InvalidMessageError, shorten
from .model import EVICTED, Message, Role, StoredMessage
from .results import Summarized
from .sql.driver import Driver, Statement
from .sql.rows import FULL_COLUMNS, stored_message
from .sql.sessions import SessionState

Span = list[StoredMessage]
Summarizer = Callable[[Span], object]  # returns the summary's text (AsyncPruneStore: or an awaitable of it)

# The evicted messages no summary covers (a summary's covers rows go with it when it is erased or cut).
_UNSUMMARIZED = Statement(
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages m WHERE session_id = :sid AND verdict = '{EVICTED}' "
    "AND NOT EXISTS (SELECT 1 FROM prunestore_covers c WHERE c.session_id = :sid AND c.seq = m.seq) ORDER BY seq"
)


def unsummarized(driver: Driver, sid: int, prompt: Sequence[StoredMessage]) -> list[Span]:
    """The session's evicted messages that no summary stands for, in runs that no message of `prompt`
    (the session's prompt) interrupts: what `PruneResult.unsummarized` gives for the same messages."""
    shown = sorted(m.seq for m in prompt)
    spans: list[Span] = []
    for message in map(stored_message, driver.all(_UNSUMMARIZED, {"sid": sid})):
        if spans and bisect_left(shown, spans[-1][-1].seq) == bisect_left(shown, message.seq):
            spans[-1].append(message)
        else:
            spans.append([message])
    return spans


def check_summarizer(summarizer: object, role: object) -> None:
    if not callable(summarizer):
        raise InvalidArgumentError(
            f"summarizer={shorten(summarizer)}: expected a function of a span's messages that returns the summary"
        )
    Message("summary", role, "", 0)  # type: ignore[arg-type]  # a role a message may have, or the error naming it


class Summarizing:
    """One call of `summarize`: what became of each span. The stores call the summarizer and append."""

    # A summary the store does not take (not text, too large, or its span erased meanwhile) fails its span alone.
    REFUSED = (InvalidArgumentError, InvalidMessageError)

    def __init__(self, session: str, role: Role, summarizer: Summarizer) -> None:
        check_summarizer(summarizer, role)
        self.session = session
        self.role = role
        self.summarizer = summarizer
        self.written: list[str] = []
        self.failed: list[tuple[tuple[str, ...], str]] = []

    def fail(self, span: Span, exc: BaseException) -> None:
        self.failed.append((tuple(m.id for m in span), f"{type(exc).__name__}: {exc}"))

    def text(self, span: Span) -> object:
        """What the summarizer returns for `span`; `FAILED` where it raised (the failure is noted)."""
        try:
            return self.summarizer(list(span))
        except Exception as exc:  # the caller's function: its failure leaves the span as it is
            self.fail(span, exc)
            return FAILED

    def summary(self, span: Span, text: object) -> Summary | None:
        """The summary of `span` written as `text`, for `append_with` (None where it is no text: noted)."""
        if text is FAILED:
            return None
        if not isinstance(text, str) or not text.strip():
            self.fail(span, InvalidArgumentError(f"summarizer: returned {shorten(text)}, not the summary's text"))
            return None
        return Summary(f"summary-{uuid4().hex}", self.role, text, tuple(m.id for m in span))

    def appended(self, span: Span, summary: Summary, exc: BaseException | None) -> None:
        """The summary of `span` was appended, or refused with `exc` (one of `REFUSED`)."""
        if exc is None:
            if not summary.forestalled:
                self.written.append(summary.id)
        else:
            self.fail(span, exc)

    def result(self) -> Summarized:
        return Summarized(self.session, tuple(self.written), tuple(self.failed))


FAILED = object()


class Summary:
    """A summary to append with `append_with`: said in the session's current turn as its lock shows it,
    since another writer may have moved the session on while the summarizer ran.

    Another call of `summarize` may have summarized some of the span meanwhile: then nothing is appended
    (`forestalled`), so that each message has one summary whoever calls.
    """

    def __init__(self, summary_id: str, role: Role, text: str, ids: tuple[str, ...]) -> None:
        self.id, self.role, self.text, self.ids = summary_id, role, text, ids
        self.forestalled = False

    def __call__(self, state: SessionState) -> list[Message]:
        self.forestalled = bool(state.summarized(self.ids))
        if self.forestalled:
            return []
        return [Message(self.id, self.role, self.text, state.current_turn, summarizes=self.ids)]


class _Store(Protocol):
    def unsummarized(self, session: str) -> list[Span]: ...

    def append_with(self, session: str, build: Callable[[SessionState], list[Message]]) -> object: ...


def summarize(store: _Store, session: str, job: Summarizing) -> Summarized:
    """`PruneStore.summarize`: one summary per span, each appended in a transaction of its own."""
    for span in store.unsummarized(session):
        text = job.text(span)
        if inspect.isawaitable(text):  # a sync store cannot wait for it: say so, and let it go quietly
            if inspect.iscoroutine(text):
                text.close()
            raise InvalidArgumentError(
                "summarizer: it returned an awaitable; PruneStore calls a plain function, AsyncPruneStore awaits one"
            )
        summary = job.summary(span, text)
        if summary is not None:
            try:
                store.append_with(session, summary)
            except Summarizing.REFUSED as exc:
                job.appended(span, summary, exc)
            else:
                job.appended(span, summary, None)
    return job.result()
