"""Summaries: messages that stand for earlier ones while the budget keeps those out of the prompt.

docs/semantics.md, "Summaries", is what these tests read: a summary is in
the prompt exactly while a message it stands for is evicted, it stands where
its span began, it changes nothing else but by its tokens, and the passes
read nothing of it.
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers import summarized, weather_chat
from hypothesis import given, settings

from prunestore import InvalidMessageError, Message, Policy, prune
from prunestore.engine.maintainer import Maintainer
from prunestore.engine.state import NoRows, new_state
from prunestore.jsonl import parse_line, to_json
from prunestore.text import count_tokens
from prunestore.tokens import message_tokens

POLICIES = [
    pytest.param(Policy(budget=10), id="budget"),
    pytest.param(Policy(budget=14, clear_at_least=5), id="budget-gathered"),
    pytest.param(Policy(budget=9, clear_at_least=3, restore="direct"), id="budget-direct"),
    pytest.param(Policy(budget=12, clear_at_least=4, pinned_roles={"system", "user"}), id="pinned-users"),
    pytest.param(Policy(budget=11, clear_at_least=3, evict="definers_last"), id="definers-last"),
    pytest.param(Policy(budget=13, clear_at_least=6, cache_ttl=60, evict="definers_last"), id="cache-ttl-budget"),
    pytest.param(Policy(clear_at_least=6), id="gathered"),
    pytest.param(Policy(), id="no-budget"),
]


def _without_summaries(ms: list[Message]) -> list[Message]:
    return [m for m in ms if not m.summarizes]


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=60, deadline=None)
@given(ms=summarized())
def test_a_summary_is_in_the_prompt_exactly_while_a_message_it_stands_for_is_evicted(policy, ms):
    result = prune(ms, policy=policy)
    for m in ms:
        if not m.summarizes:
            continue
        needed = any(result.verdicts[c] == "evicted" for c in m.summarizes)
        verdict = result.verdicts[m.id]
        if needed:
            assert verdict in ("kept", "evicted") and result.base[m.id] == "kept", (m.id, verdict)
        else:
            assert verdict in ("pending", "unneeded") and result.base[m.id] == "unneeded", (m.id, verdict)
        if not policy.gathers:
            assert verdict == "unneeded"


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=60, deadline=None)
@given(ms=summarized(tokens=[0], quiet=True))
def test_summaries_of_no_tokens_change_nothing_else(policy, ms):
    """A summary weighs only its tokens: at 0 tokens, every other message's fate is what it was without it.

    A summary is a message, and its step is a step of the fold: one over the budget holds an event, which
    may evict a message the next one brings back, so the counts of events and comebacks may differ. The
    summaries are said in the turn before them: a step that moves the turn moves what the passes drop.
    """
    with_them = prune(ms, policy=policy)
    without = prune(_without_summaries(ms), policy=policy)
    for m in _without_summaries(ms):
        assert with_them.verdicts[m.id] == without.verdicts[m.id], m.id
        assert with_them.base[m.id] == without.base[m.id], m.id
    assert (with_them.pending_tokens, with_them.over_budget) == (without.pending_tokens, without.over_budget)
    assert [m.id for m in with_them.live if not m.summarizes] == [m.id for m in without.live]


@pytest.mark.parametrize("policy", POLICIES[:6])
@settings(max_examples=60, deadline=None)
@given(ms=summarized())
def test_the_prompt_shows_each_summary_where_its_span_began(policy, ms):
    result = prune(ms, policy=policy)
    position = {m.id: i for i, m in enumerate(ms)}
    by_id = {m.id: m for m in ms}

    def place(message_id: str) -> int:
        m = by_id[message_id]
        return min(place(c) for c in m.summarizes) if m.summarizes else position[message_id]

    order = [m.id for m in result.live]
    assert sorted(order, key=lambda i: (place(i), not by_id[i].summarizes, position[i])) == order
    assert set(order) == {i for i, v in result.verdicts.items() if v in ("kept", "restored", "pending")}


POLICY = Policy(budget=60, clear_at_least=20)


def test_a_summary_joins_where_its_span_began_and_leaves_when_what_it_covers_comes_back():
    ms = weather_chat(6)
    first = prune(ms, policy=POLICY)
    evicted = [m.id for m in ms if first.verdicts[m.id] == "evicted"]
    assert evicted, "the budget evicts the oldest turns"
    summary = Message("s", "user", "Earlier: questions on the weather.", turn=7, summarizes=tuple(evicted))
    ms.append(summary)
    result = prune(ms, policy=POLICY)
    assert result.verdicts["s"] == "kept"
    live = [m.id for m in result.live]
    assert live[:2] == ["sys", "s"], live  # where the span began: before every later message
    assert prune(ms).verdicts["s"] == "unneeded"  # without a budget nothing is evicted, so nothing is summarized

    # A reference brings the evicted facts back (each defines a key): the summary is no longer needed,
    # stays until the next event, pending, and then leaves.
    defining = [dataclasses.replace(m, defines=(f"k{i}",)) for i, m in enumerate(ms[:-1])]
    refs = tuple(f"k{i}" for i, m in enumerate(ms[:-1]) if m.id in evicted)
    base = defining + [summary]
    back = base + [Message("r", "user", "tell me all of it again", turn=8, refs=refs)]
    result = prune(back, policy=Policy(budget=1000, clear_at_least=20))
    assert result.verdicts["s"] == "unneeded"
    gathered = prune(base, policy=Policy(budget=60, clear_at_least=20))
    assert gathered.verdicts["s"] == "kept"


def test_what_a_summary_says_is_not_read_by_the_passes():
    ms = [
        Message("d", "user", "DEFINE:fmt CSV please", turn=1),
        Message("p", "retrieved_doc", "the same passage", turn=1),
        Message("s", "retrieved_doc", "the same passage REF:fmt DEFINE:other", turn=2, summarizes=("d",)),
        Message("s2", "retrieved_doc", "the same passage", turn=2, summarizes=("p",)),
    ]
    result = prune(ms)
    assert result.verdicts == {"d": "kept", "p": "kept", "s": "unneeded", "s2": "unneeded"}
    # A later message referring to a key a summary's text names is not served by the summary.
    later = ms + [Message("x", "user", "REF:other", turn=3)]
    assert prune(later).verdicts["s"] == "unneeded"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"summarizes": "m1"}, "summarizes='m1'"),
        ({"summarizes": ("m1", "m1")}, "names the same message twice"),
        ({"summarizes": ("s",)}, "cannot summarize itself"),
        ({"summarizes": ("",)}, "summarizes=''"),
        ({"summarizes": ("m1",), "tool_key": "search"}, "tool_key='search'"),
        ({"summarizes": ("m1",), "defines": ("k",)}, "defines=('k',)"),
        ({"summarizes": ("m1",), "refs": ("k",)}, "refs=('k',)"),
        ({"summarizes": ("m1",), "expires_after_turn": 3}, "expires_after_turn=3"),
        ({"summarizes": ("m1",), "role": "erased", "content": ""}, "summarizes="),
    ],
)
def test_a_bad_summary_is_refused_naming_the_field(fields, named):
    values = {"id": "s", "role": "user", "content": "summary", "turn": 1, **fields}
    with pytest.raises(InvalidMessageError, match="summarizes|tool_key|defines|refs|expires") as caught:
        Message(**values)
    assert named in str(caught.value)


@pytest.mark.parametrize(
    ("ms", "why"),
    [
        ([Message("s", "user", "sum", turn=1, summarizes=("later",)), Message("later", "user", "x", turn=1)], "no"),
        ([Message("s", "user", "sum", turn=1, summarizes=("nowhere",))], "no earlier message"),
        ([Message("e", "erased", "", turn=1), Message("s", "user", "sum", turn=1, summarizes=("e",))], "erased"),
    ],
)
def test_prune_refuses_a_summary_of_what_is_not_earlier_in_the_session(ms, why):
    with pytest.raises(InvalidMessageError, match=f"summarizes=.*{why}"):
        prune(ms)


def test_a_summary_survives_the_json_lines_format():
    summary = Message("s", "user", "summary", turn=2, summarizes=("a", "b"))
    line = to_json(summary)
    assert line["summarizes"] == ["a", "b"]
    import json

    assert parse_line(json.dumps(line), 1, session_field=False) == (None, summary)


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=60, deadline=None)
@given(ms=summarized())
def test_the_incremental_fold_keeps_summaries_as_prune_does(policy, ms):
    """The store's engine, one message at a time in memory (as `verify` and `rebuild` replay a session),
    against `prune` over the session so far, after every message."""
    maintainer = Maintainer(NoRows(), policy, 0, 0)
    for count, message in enumerate(ms, 1):
        maintainer.append(new_state(message, message_tokens(count_tokens, message)))
        want = prune(ms[:count], policy=policy)
        assert {s.id: s.verdict for s in maintainer.new} == want.verdicts, count
        assert {s.id: s.base for s in maintainer.new} == want.base, count
        if maintainer.prompt is not None:
            counters = maintainer.prompt.counters
            assert (counters.events, counters.pending, counters.comebacks, counters.late_joins) == (
                want.events,
                want.pending_tokens,
                want.comebacks,
                want.late_joins,
            ), count
            assert counters.tokens == sum(message_tokens(count_tokens, m) for m in want.live), count


def test_a_new_summary_joins_only_after_what_comes_back_in_its_step():
    """A summary appended while what it covers is evicted, in the step where a reference brings that back:
    it is unneeded at once, never in the prompt (not pending), as `prune` has it."""
    policy = Policy(budget=14, clear_at_least=5)
    ms = [
        Message("m1", "user", "alpha passage DEFINE:k1 REF:k1 REF:k1", 0, "search", 0, refs=("k1",)),
        Message("m2", "retrieved_doc", "alpha passage", 0, "search", 1, refs=("k1",), tokens=9),
        Message("m3", "retrieved_doc", "alpha passage", 1, "sql", 3, refs=("k1",)),
        Message("s", "user", "summary", turn=3, summarizes=("m1",)),
    ]
    maintainer = Maintainer(NoRows(), policy, 0, 0)
    for count, message in enumerate(ms, 1):
        maintainer.append(new_state(message, message_tokens(count_tokens, message)))
        assert {s.id: s.verdict for s in maintainer.new} == prune(ms[:count], policy=policy).verdicts, count
    assert maintainer.new[-1].verdict == "unneeded"


def test_the_incremental_fold_refuses_a_summary_of_what_it_does_not_hold():
    maintainer = Maintainer(NoRows(), POLICY, 0, 0)
    maintainer.append(new_state(Message("e", "erased", "", turn=1), 0))
    for covered, why in (("nowhere", "no earlier message"), ("e", "erased")):
        summary = Message("s", "user", "sum", turn=1, summarizes=(covered,))
        with pytest.raises(InvalidMessageError, match=f"summarizes='{covered}': .*{why}"):
            maintainer.append(new_state(summary, 1))


@pytest.mark.parametrize("policy", POLICIES[:6])
@settings(max_examples=60, deadline=None)
@given(ms=summarized())
def test_unsummarized_gives_every_evicted_message_no_summary_stands_for_once_in_gaps_of_the_prompt(policy, ms):
    result = prune(ms, policy=policy)
    covered = {c for m in ms for c in m.summarizes}
    spans = result.unsummarized()
    flat = [m.id for span in spans for m in span]
    assert flat == [m.id for m in ms if result.verdicts[m.id] == "evicted" and m.id not in covered]
    position = {m.id: i for i, m in enumerate(ms)}
    shown = [position[m.id] for m in result.live]
    for span in spans:  # nothing in the prompt within a span
        first, last = position[span[0].id], position[span[-1].id]
        assert not [i for i in shown if first < i < last]
    for before, after in zip(spans, spans[1:], strict=False):  # something in the prompt between two spans
        assert [i for i in shown if position[before[-1].id] < i < position[after[0].id]]


@pytest.mark.parametrize("policy", POLICIES[:6])
@settings(max_examples=60, deadline=None)
@given(ms=summarized(tokens=[0], quiet=True))
def test_a_summary_of_each_unsummarized_span_stands_in_its_gap(policy, ms):
    """The loop a caller of `prune` runs: summarize what is unsummarized, append it, and nothing is left."""
    spans = prune(ms, policy=policy).unsummarized()
    summaries = [
        Message(f"sum{i}", "user", "", turn=ms[-1].turn, tokens=0, at=ms[-1].at, summarizes=tuple(m.id for m in span))
        for i, span in enumerate(spans)
    ]
    result = prune(ms + summaries, policy=policy)
    assert result.unsummarized() == []
    order = [m.id for m in result.live]
    position = {m.id: i for i, m in enumerate(ms)}
    by_id = {m.id: m for m in ms}

    def place(message_id: str) -> int:  # where a message stands: a summary where its span began
        m = by_id[message_id]
        return min(place(c) for c in m.summarizes) if m.summarizes else position[message_id]

    for summary, span in zip(summaries, spans, strict=True):
        assert result.verdicts[summary.id] == "kept"
        start = min(place(m.id) for m in span)
        here = order.index(summary.id)
        for i, m in enumerate(result.live):  # before it, what was said before its span; after it, what was after
            if not m.summarizes:
                assert (i < here) == (position[m.id] < start), (summary.id, m.id)
