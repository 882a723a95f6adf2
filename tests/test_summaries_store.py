"""Summaries in the store: what it keeps equals `prune` over the same messages, through every write.

Sessions with summaries at random places (`helpers.summarized`) are appended
in batches on every backend and both APIs. After every append the stored
verdicts and bases, the prompt in its order (a summary where its span began)
and the prompt's totals equal `prune`, read by the store that wrote and by
another one (its cache follows the journal); `verify` passes. A rebuild, a
cut and the appends after it, a fork, and an erasure each leave the state
`prune` gives for what remains, an erasure taking the summaries made from
what it erased with it.
"""

from __future__ import annotations

import itertools
import json

import pytest
from helpers import summarized, weather_chat
from hypothesis import given, settings
from hypothesis import strategies as st
from providers import anthropic_from_openai, openai_transcripts, validate_anthropic, validate_openai

from prunestore import Message, Policy, PruneStore, from_anthropic, from_openai, prune
from prunestore.formats.plan import plan_prompt
from prunestore.importer import import_files
from prunestore.jsonl import to_json
from prunestore.prices import PRICES

BOTH_APIS = True

_names = itertools.count()

POLICIES = [
    pytest.param(Policy(budget=14, clear_at_least=5), id="budget-gathered"),
    pytest.param(Policy(budget=9, clear_at_least=3, restore="direct"), id="budget-direct"),
    pytest.param(Policy(budget=12, clear_at_least=4, pinned_roles={"system", "user"}), id="pinned-users"),
    pytest.param(Policy(budget=11, clear_at_least=3, evict="definers_last"), id="definers-last"),
    pytest.param(Policy(budget=13, clear_at_least=6, cache_ttl=60, evict="definers_last"), id="cache-ttl-budget"),
    pytest.param(Policy(), id="no-budget"),
]

# What a policy change moves the stores to: a budget that keeps a ledger of its prompts' cost.
PRICED = Policy(budget=10, clear_at_least=4, evict="definers_last", prices=PRICES["anthropic-5m"])


def check_against_prune(store, session: str, ms: list[Message], *readers) -> None:
    """The stored state of `session` is `prune` over `ms`, as the store and each other reader sees it."""
    expected = prune(ms, policy=store.policy)
    stored = store.messages(session)
    assert [m.id for m in stored] == [m.id for m in ms]
    assert {m.id: m.verdict for m in stored} == expected.verdicts
    assert {m.id: m.base for m in stored} == expected.base
    for reader in (store, *readers):
        assert [m.id for m in reader.live(session)] == [m.id for m in expected.live]
    want = [[m.id for m in span] for span in expected.unsummarized()]
    assert [[m.id for m in span] for span in store.unsummarized(session)] == want
    stats = store.stats(session)
    assert (stats.events, stats.pending_tokens) == (expected.events, expected.pending_tokens)
    assert (stats.comebacks, stats.late_joins) == (expected.comebacks, expected.late_joins)
    assert stats.live_tokens == sum(m.tokens for m in store.live(session))


def check_replay(store, session: str) -> None:
    """`what_if` under the store's own policy replays the session to its stored verdicts, counters and cost."""
    replayed, stats = store.what_if(session), store.stats(session)
    assert (replayed.changed, replayed.messages) == (0, stats.messages)
    counters = (stats.events, stats.comebacks, stats.late_joins)
    assert (replayed.events, replayed.comebacks, replayed.late_joins) == counters
    if store.policy.prices is not None:
        assert (replayed.cost, replayed.cost_everything) == pytest.approx((stats.cost, stats.cost_everything))


def append_in_batches(store, session: str, ms: list[Message], data, *readers) -> None:
    """Append `ms` in batches of 1 to 3 messages (a summary may cover one of its own batch), checking each."""
    position = 0
    while position < len(ms):
        size = data.draw(st.integers(1, 3))
        store.append(session, ms[position : position + size])
        position += size
        check_against_prune(store, session, ms[:position], *readers)


def stored_session(open_store, policy: Policy, data) -> tuple:
    """A store under `policy`, and a session with summaries appended to it in batches: (store, name, messages)."""
    store = open_store(policy)
    ms = data.draw(summarized())
    session = f"s{next(_names)}"
    append_in_batches(store, session, ms, data)
    return store, session, ms


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=15)
@given(data=st.data())
def test_a_store_keeps_summaries_as_prune_does(open_store, policy, data):
    store, other = open_store(policy), open_store(policy)
    ms = data.draw(summarized())
    session = f"s{next(_names)}"
    append_in_batches(store, session, ms, data, other)
    assert store.verify(session).ok

    cut = data.draw(st.integers(0, len(ms) - 1))
    store.truncate(session, ms[cut].id)
    check_against_prune(store, session, ms[: cut + 1], other)
    assert store.verify(session).ok
    rest = ms[cut + 1 :]
    if rest:  # appended again, incrementally, over the state the cut put back from the journal
        store.append(session, rest)
        check_against_prune(store, session, ms, other)
        assert store.verify(session).ok

    store.rebuild(session)
    check_against_prune(store, session, ms, other)
    assert store.verify(session).ok
    check_replay(store, session)

    # A policy change replays every session, and one with prices replays its ledger too; then back.
    store.rebuild(policy=PRICED if policy != PRICED else POLICIES[0].values[0])
    check_against_prune(store, session, ms, other)
    assert store.verify(session).ok
    check_replay(store, session)
    store.rebuild(policy=policy)

    at = data.draw(st.integers(0, len(ms) - 1))
    store.fork(session, ms[at].id, f"{session}-fork")
    check_against_prune(store, f"{session}-fork", ms[: at + 1])
    assert store.verify(f"{session}-fork").ok


def tombstone(message: Message) -> Message:
    return Message(id=message.id, role="erased", content="", turn=message.turn, at=message.at)


def made_from(ms: list[Message], erased: set[str]) -> list[str]:
    """The summaries that stand for an erased message, or for such a summary, in append order."""
    stale: set[str] = set()
    while True:
        more = {m.id for m in ms if m.id not in erased and set(m.summarizes) & (erased | stale)}
        if more <= stale:
            return [m.id for m in ms if m.id in stale]
        stale |= more


@pytest.mark.parametrize("policy", POLICIES[:3])
@settings(max_examples=12)
@given(data=st.data())
def test_an_erasure_takes_the_summaries_made_from_what_it_erased(open_store, policy, data):
    store, session, ms = stored_session(open_store, policy, data)
    covered = sorted({c for m in ms for c in m.summarizes})
    chosen = data.draw(st.lists(st.sampled_from(covered or [ms[0].id]), min_size=1, max_size=3, unique=True))
    newly = [m.id for m in ms if m.id in chosen and m.role != "erased"]
    stale = made_from(ms, set(newly))

    receipt = store.erase(session, chosen)

    now = [tombstone(m) if m.id in chosen or m.id in stale else m for m in ms]
    check_against_prune(store, session, now)
    assert receipt.erased == tuple(newly)
    assert receipt.invalidated == tuple(stale)
    assert store.erasures(session)[-1].invalidated == tuple(stale)
    assert store.verify(session).ok
    later = Message(id="after", role="user", content="and then", turn=ms[-1].turn, at=ms[-1].at)
    store.append(session, later)  # incremental again, over the rebuilt state
    check_against_prune(store, session, [*now, later])
    assert store.verify(session).ok


def test_a_summary_stands_where_its_span_began_in_a_stored_session(open_store):
    store = open_store(Policy(budget=60, clear_at_least=20))
    said = [Message("sys", "system", "You are terse.", turn=0)]
    for t in range(1, 7):
        said.append(Message(f"u{t}", "user", f"question {t} about the city weather far away", turn=t))
        said.append(Message(f"a{t}", "assistant", f"answer {t} that is long enough to weigh", turn=t))
    store.append("chat", said)
    evicted = [m.id for m in store.messages("chat") if m.verdict == "evicted"]
    assert evicted, "the budget evicts the oldest turns"
    summary = Message("s", "user", "Earlier: questions on the weather.", turn=7, summarizes=tuple(evicted))
    delta = store.append("chat", summary)
    assert delta.live_added == ("s",)
    live = [m.id for m in store.live("chat")]
    assert live[:2] == ["sys", "s"], live
    (stored,) = store.messages("chat", ["s"])
    assert stored.summarizes == tuple(evicted) and stored.place == 2 and stored.to_message() == summary
    assert [m.id for m in store.live("chat")] == [m.id for m in prune([*said, summary], policy=store.policy).live]


@pytest.mark.parametrize("policy", POLICIES[:1] + POLICIES[-1:])
@settings(max_examples=8)
@given(data=st.data())
def test_an_exported_session_with_summaries_imports_as_it_was(open_store, store_url, tmp_path_factory, policy, data):
    store, session, ms = stored_session(open_store, policy, data)
    path = tmp_path_factory.mktemp("export") / "s.jsonl"
    path.write_text("".join(json.dumps(to_json(m, session=session)) + "\n" for m in ms))
    before = [(m.id, m.summarizes, m.place) for m in store.messages(session)]
    with PruneStore(store_url, policy=policy) as copy:  # the importer's own store, on the same database
        copy.delete_session(session)
        import_files(copy, [path], batch_size=data.draw(st.integers(1, 5)))
        check_against_prune(copy, session, ms)
        assert [(m.id, m.summarizes, m.place) for m in copy.messages(session)] == before
        assert copy.verify(session).ok


def _spans(store, session: str) -> list[list[str]]:
    return [[m.id for m in span] for span in store.unsummarized(session)]


@pytest.mark.parametrize("policy", POLICIES[:4])
@settings(max_examples=10)
@given(data=st.data())
def test_summarize_writes_one_summary_per_unsummarized_span(open_store, policy, data):
    store, session, ms = stored_session(open_store, policy, data)
    spans = _spans(store, session)
    seen: list[list[str]] = []

    def summarizer(span):
        seen.append([m.id for m in span])
        return "-"  # one token: the summaries may evict more, in spans of their own

    done = store.summarize(session, summarizer)
    assert seen == spans and done.failed == () and len(done.written) == len(spans)
    stored = store.messages(session)
    written = {m.id: m for m in stored[len(ms) :]}
    assert list(written) == list(done.written)
    assert [list(m.summarizes) for m in written.values()] == spans
    assert all(m.turn == ms[-1].turn and m.content == "-" for m in written.values())
    check_against_prune(store, session, [m.to_message() for m in stored])
    assert not {i for span in _spans(store, session) for i in span} & {i for span in spans for i in span}
    assert store.verify(session).ok


def _two_spans(store) -> list[list[str]]:
    """A chat whose evicted turns a pinned system message in the middle splits into two spans."""
    said = weather_chat(10)
    said.insert(7, Message("note", "system", "Mind the units.", turn=3))
    store.append("chat", said)
    spans = _spans(store, "chat")
    assert len(spans) == 2 and spans[0][-1] == "a3" and spans[1][0] == "u4", spans
    return spans


def test_a_failing_summarizer_leaves_its_span_evicted_and_says_so(open_store):
    store = open_store(Policy(budget=80, clear_at_least=20))
    spans = _two_spans(store)
    calls = []

    def flaky(span):
        calls.append(span[0].id)
        if len(calls) == 1:
            raise RuntimeError("the model timed out")
        return "Earlier: the weather."

    done = store.summarize("chat", flaky)
    assert done.failed == ((tuple(spans[0]), "RuntimeError: the model timed out"),)
    (written,) = done.written
    (summary,) = store.messages("chat", [written])
    assert summary.summarizes == tuple(spans[1]) and summary.verdict == "kept"
    assert _spans(store, "chat") == spans[:1]  # offered again, and nothing of it changed
    assert all(m.verdict == "evicted" for m in store.messages("chat", spans[0]))
    again = store.summarize("chat", lambda span: "Earlier: the weather.")
    assert again.failed == () and len(again.written) == 1
    (summary,) = store.messages("chat", again.written)
    assert summary.summarizes == tuple(spans[0])  # the summaries' tokens may evict more: a later span
    assert store.verify("chat").ok


@pytest.mark.parametrize(
    ("result", "named"),
    [(None, "returned None"), (42, "returned 42"), ("", "returned ''"), (" \n", "returned ' \\n'")],
)
def test_a_summarizer_that_returns_no_text_fails_its_span(open_store, result, named):
    store = open_store(Policy(budget=80, clear_at_least=20))
    spans = _two_spans(store)
    before = store.messages("chat")
    done = store.summarize("chat", lambda span: result)
    assert done.written == () and [ids for ids, _ in done.failed] == [tuple(s) for s in spans]
    assert all(named in why for _, why in done.failed)
    assert store.messages("chat") == before


def test_summarize_refuses_what_is_no_summarizer_and_a_role_no_message_has(open_store):
    from prunestore import InvalidArgumentError, InvalidMessageError

    store = open_store(Policy(budget=60, clear_at_least=20))
    store.append("chat", weather_chat(5))
    before = store.messages("chat")
    with pytest.raises(InvalidArgumentError, match="summarizer='nope'"):
        store.summarize("chat", "nope")
    with pytest.raises(InvalidMessageError, match="role='narrator'"):
        store.summarize("chat", lambda span: "x", role="narrator")
    assert store.messages("chat") == before


def test_a_sync_store_refuses_an_async_summarizer_and_an_async_store_awaits_it(store_url):
    import asyncio

    from prunestore import InvalidArgumentError, PruneStore
    from prunestore.aio import AsyncPruneStore

    policy = Policy(budget=60, clear_at_least=20)

    async def summarizer(span):
        await asyncio.sleep(0)
        return f"Earlier: {len(span)} messages on the weather."

    with PruneStore(store_url, policy=policy) as store:
        store.append("chat", weather_chat(5))
        before = store.messages("chat")
        with pytest.raises(InvalidArgumentError, match="awaitable"):
            store.summarize("chat", summarizer)
        assert store.messages("chat") == before
        spans = _spans(store, "chat")

    async def run():
        async with AsyncPruneStore(store_url, policy=policy) as aio:
            done = await aio.summarize("chat", summarizer)
            assert len(done.written) == len(spans) and done.failed == ()
            failing = await aio.summarize("chat", summarizer)  # nothing left to summarize
            assert failing.written == ()
            return await aio.messages("chat", done.written)

    written = asyncio.run(run())
    assert [list(m.summarizes) for m in written] == spans
    assert written[0].content.startswith("Earlier:")


def _one_summary_each(store, spans: list[list[str]], written: list[str]) -> None:
    """Each span has one summary, the ids `written` reported, whoever wrote it."""
    summaries = [m for m in store.messages("chat") if m.summarizes]
    assert sorted(list(m.summarizes) for m in summaries) == sorted(spans)
    assert sorted(written) == sorted(m.id for m in summaries)
    assert store.verify("chat").ok  # (the summaries' tokens may evict more: spans of their own)


def test_two_summarize_calls_at_once_write_one_summary_a_span(store_url):
    """Both calls read the same spans and call their summarizers before either appends: the second to reach
    each span's lock finds it summarized and appends nothing."""
    import threading

    from prunestore import PruneStore

    policy = Policy(budget=80, clear_at_least=20)
    both_read = threading.Barrier(2, timeout=30)
    with PruneStore(store_url, policy=policy) as first, PruneStore(store_url, policy=policy) as second:
        spans = _two_spans(first)
        results = {}

        def call(store, name):
            def summarizer(span):
                if span[0].id == spans[0][0]:
                    both_read.wait()
                return f"{name}: {len(span)} messages on the weather."

            results[name] = store.summarize("chat", summarizer)

        threads = [threading.Thread(target=call, args=(s, n)) for s, n in ((first, "one"), (second, "two"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(done.failed == () for done in results.values())
        _one_summary_each(first, spans, [i for done in results.values() for i in done.written])


def test_two_async_summarize_calls_at_once_write_one_summary_a_span(store_url):
    import asyncio

    from prunestore import PruneStore
    from prunestore.aio import AsyncPruneStore

    policy = Policy(budget=80, clear_at_least=20)
    with PruneStore(store_url, policy=policy) as store:
        spans = _two_spans(store)

    async def run():
        waiting, both_read = [], asyncio.Event()

        async def summarizer(span):
            if span[0].id == spans[0][0]:
                waiting.append(span)
                if len(waiting) == 2:
                    both_read.set()
                await asyncio.wait_for(both_read.wait(), 30)
            return f"Earlier: {len(span)} messages on the weather."

        async with AsyncPruneStore(store_url, policy=policy) as one, AsyncPruneStore(store_url, policy=policy) as two:
            return await asyncio.gather(one.summarize("chat", summarizer), two.summarize("chat", summarizer))

    results = asyncio.run(run())
    assert all(done.failed == () for done in results)
    with PruneStore(store_url, policy=policy) as store:
        _one_summary_each(store, spans, [i for done in results for i in done.written])


@pytest.mark.parametrize("format", ["openai", "anthropic"])
@settings(max_examples=25)
@given(transcript=openai_transcripts(), data=st.data())
def test_a_summary_never_separates_a_call_from_its_results(open_store, format, transcript, data):
    """An agent's transcript under a small budget, summarized now and then: every rendered prompt is one the
    provider accepts, and holds each summary in the prompt."""
    store = open_store(Policy(budget=40, clear_at_least=10))
    if format == "openai":
        messages = from_openai(transcript)
    else:
        system, anthropic = anthropic_from_openai(transcript)
        messages = from_anthropic(anthropic, system)
    session = f"r{next(_names)}"
    written = itertools.count()
    for message in messages:
        store.append(session, message)
        if data.draw(st.booleans()):
            store.summarize(session, lambda span: f"SUMMARY {next(written)} of {len(span)}")
        rendered = store.render(session, format, dropped=data.draw(st.sampled_from(["omit", "placeholder"])))
        if format == "openai":
            validate_openai(rendered.messages, waiting_at_end=True)
        else:
            validate_anthropic(rendered.system, rendered.messages, waiting_at_end=True)
        shown = json.dumps(rendered.messages)
        live = store.live(session)
        assert all(m.content in shown for m in live if m.summarizes)
        # What goes out leads with a message (a call with its results, or any other) in the prompt's order.
        plan, _, _ = plan_prompt(store.prompt_messages(session).messages, "omit")
        leaders = [item.message.id for item, _ in plan if item.message.live]
        assert leaders == [m.id for m in live if m.id in set(leaders)]
    assert store.verify(session).ok
