"""The budget and removal events: what the prompt may do between two appends.

Sessions come from `helpers.sessions`, appended one message at a time (each
append is one step of the fold), on both backends, in both restore modes.
After every append: the stored verdicts equal `prune`; the prompt is within
the budget unless the session is reported over it; without an event the
previous prompt is a prefix of the new one (unless a dependency came back);
an event removes at least `clear_at_least` tokens or leaves nothing it could
still remove; every message in the prompt has the definers it needs in it.
"""

from __future__ import annotations

import itertools
import json
from datetime import timedelta

import pytest
from helpers import sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import Message, Policy, prune
from prunestore.model import effective_defines, effective_refs

BOTH_APIS = True

_names = itertools.count()

BUDGETED = [
    pytest.param(Policy(budget=10), id="budget"),
    pytest.param(Policy(budget=14, clear_at_least=5), id="budget-gathered"),
    pytest.param(Policy(budget=9, clear_at_least=3, restore="direct"), id="budget-direct"),
    pytest.param(Policy(clear_at_least=6), id="gathered"),
    pytest.param(Policy(budget=12, clear_at_least=4, pinned_roles={"system", "user"}), id="pinned-users"),
    pytest.param(Policy(budget=11, clear_at_least=3, evict="definers_last"), id="definers-last"),
    pytest.param(Policy(budget=9, restore="direct", evict="definers_last"), id="definers-last-direct"),
    pytest.param(Policy(clear_at_least=10, cache_ttl=60), id="cache-ttl"),
    pytest.param(Policy(budget=13, clear_at_least=6, cache_ttl=60, evict="definers_last"), id="cache-ttl-budget"),
]


def _needed(prompt: list, policy: Policy) -> set[str]:
    """Ids of the definers that a counting message in the prompt refers to (other than itself)."""
    definer = {key: m.id for m in prompt for key in effective_defines(m)}
    out = set()
    for m in prompt:
        if m.verdict == "kept" or (policy.transitive and m.verdict == "restored"):
            out |= {definer[k] for k in effective_refs(m) if k in definer and definer[k] != m.id}
    return out


def _returned_and_gone(stored: list, evicted: set[str], shown_before: set[str], newly_evicted: list, delta) -> list:
    """Messages evicted before this step and after it that a message shown in this step refers to (at most)."""
    definer = {key: m.id for m in stored for key in effective_defines(m)}
    wanted = shown_before | {m.id for m in newly_evicted} | set(delta.live_added)
    while True:  # to a fixed point: a definer that came back may bring back its own
        more = wanted | {definer[k] for m in stored if m.id in wanted for k in effective_refs(m) if k in definer}
        if more == wanted:
            break
        wanted = more
    return [m for m in stored if m.verdict == "evicted" and m.id in evicted and m.id in wanted]


@pytest.mark.parametrize("policy", BUDGETED)
@settings(max_examples=40)
@given(data=st.data())
def test_prompt_moves_only_in_events_and_stays_in_budget(open_store, policy, data):
    store = open_store(policy)
    ms = data.draw(sessions(min_size=1, max_size=24))
    session = f"b{next(_names)}"
    appended: list[Message] = []
    before: list = []
    evicted: set[str] = set()
    events = comebacks = late_joins = 0
    for message in ms:
        delta = store.append(session, message)
        appended.append(message)
        expected = prune(appended, policy=policy)
        stored = store.messages(session)
        assert {m.id: m.verdict for m in stored} == expected.verdicts
        prompt = store.live(session)
        assert [m.id for m in prompt] == [m.id for m in expected.live]
        stats = store.stats(session)
        assert stats.live_tokens == sum(m.tokens for m in prompt)
        assert stats.events == expected.events == events + delta.events
        assert (stats.comebacks, stats.late_joins) == (expected.comebacks, expected.late_joins)
        assert stats.pending_tokens == expected.pending_tokens
        assert bool(stats.over_budget) == expected.over_budget
        if policy.budget is not None and not stats.over_budget:
            assert stats.live_tokens <= policy.budget

        ids = [m.id for m in prompt]
        came_back = set(delta.live_added) - {message.id}
        if came_back and not delta.events:  # each one a comeback or a late join, counted as one step
            assert stats.comebacks + stats.late_joins > comebacks + late_joins
        assert comebacks + late_joins <= stats.comebacks + stats.late_joins <= comebacks + late_joins + 2
        returned = stats.comebacks > comebacks
        comebacks, late_joins = stats.comebacks, stats.late_joins
        if not delta.events and not came_back:
            assert ids[: len(before)] == [m.id for m in before], "between events the prompt only grows at its end"
            assert not delta.live_removed
        if delta.events:
            # What the event took out: from the previous prompt, and what joined in this step and was evicted.
            newly_evicted = [m for m in stored if m.verdict == "evicted" and m.id not in evicted]
            shown_before = {m.id for m in before}
            removed = sum(m.tokens for m in before if m.id in set(delta.live_removed))
            removed += sum(m.tokens for m in newly_evicted if m.id not in shown_before)
            if returned:
                # A definer that came back in this step and went again in its event (its referrer joined and went
                # too) was removed by the event as well; the messages that were in the prompt in this step tell which.
                gone = _returned_and_gone(stored, evicted, shown_before, newly_evicted, delta)
                removed += sum(m.tokens for m in gone)
            assert stats.pending_tokens == 0
            previous = appended[-2].at if len(appended) > 1 else None
            gap = message.at - previous if message.at and previous else None
            idle = policy.cache_ttl is not None and gap is not None and gap > timedelta(seconds=policy.cache_ttl)
            if removed < policy.clear_at_least and not idle:
                # The budget forced it and nothing more could go: pinned, current turn, or needed.
                needed = _needed(prompt, policy)
                turn = appended[-1].turn
                assert all(m.role in policy.pinned_roles or m.turn == turn or m.id in needed for m in prompt)
        events += delta.events

        shown = {m.id for m in prompt}
        definer = {key: m.id for m in stored for key in effective_defines(m)}
        for m in prompt:
            if m.verdict == "kept" or (policy.transitive and m.verdict == "restored"):
                assert {definer[k] for k in effective_refs(m) if k in definer} <= shown
        before = prompt
        evicted = {m.id for m in stored if m.verdict == "evicted"}
    assert store.verify(session).ok


@pytest.mark.parametrize("policy", BUDGETED)
@settings(max_examples=15)
@given(data=st.data())
def test_explain_and_stats_speak_of_the_budget(open_store, policy, data):
    store = open_store(policy)
    ms = data.draw(sessions(min_size=1, max_size=20))
    session = f"e{next(_names)}"
    store.append(session, ms)
    for m in store.messages(session):
        why = store.explain(session, m.id)
        assert why.verdict == m.verdict
        assert why.live == (m.verdict in ("kept", "restored", "pending"))
        if m.verdict == "evicted":
            assert why.reason.startswith(f"evicted to stay under the budget of {policy.budget} tokens")
            assert "kept:" not in why.reason  # live by the rules, yet out of the prompt: no contradiction
        if m.verdict == "pending":
            assert "until the next removal event" in why.reason
            assert why.base in ("superseded", "expired", "duplicate")


def test_a_late_joiner_and_the_definer_it_brings_back_can_go_in_one_event(open_store):
    """A duplicate promoted by a new message joins, brings back the definer it refers to, and both go at once."""
    store = open_store(Policy(restore="direct", budget=9, clear_at_least=3))
    doc = dict(role="retrieved_doc", content="alpha passage")
    session = [
        Message(id="m0", role="system", content="alpha passage", turn=0),
        Message(id="m1", role="system", content="alpha passage", turn=0),
        Message(id="m2", turn=0, tool_key="search", defines=("k1",), refs=("k1",), **doc),
        Message(id="m3", turn=0, tool_key="search", defines=("k1",), refs=("k1",), **doc),
        Message(id="m4", turn=0, tool_key="fs", expires_after_turn=1, defines=("k1",), refs=("k1",), **doc),
        Message(id="m5", turn=0, tool_key="sql", defines=("k2",), refs=("k1",), **doc),
        Message(id="m6", turn=1, tool_key="search", defines=("k2",), refs=("k3",), **dict(doc, role="user")),
    ]
    for message in session:
        store.append("s", message)
    assert [m.id for m in store.live("s")] == ["m0", "m1", "m6"]
    events = store.stats("s").events
    last = Message(id="m7", turn=2, tool_key="fs", expires_after_turn=2, defines=("k2",), refs=("k1",), **doc)
    delta = store.append("s", last)
    # m7 supersedes m4's copy of the passage, so m5 is its first copy: m5 joins and m4, which it needs, comes back.
    # Together they are over the budget, and neither is needed by what stays: the event takes both.
    assert delta.events == 1 and not delta.live_added and not delta.live_removed
    verdicts = {m.id: m.verdict for m in store.messages("s")}
    assert verdicts == prune([*session, last], policy=store.policy).verdicts
    assert (verdicts["m4"], verdicts["m5"], verdicts["m7"]) == ("evicted", "evicted", "duplicate")
    stats = store.stats("s")
    assert (stats.events, stats.comebacks, stats.late_joins) == (events + 1, 1, 1)
    assert [m.id for m in store.live("s")] == ["m0", "m1", "m6"]


def test_an_evicted_message_says_which_removal_event_evicted_it(open_store):
    store = open_store(Policy(budget=300, clear_at_least=100))
    evicted_at: dict[str, int] = {}
    was: set[str] = set()
    for turn in range(1, 40):
        store.append("e", Message(f"t{turn}", "tool_output", "row " * 25, turn, tool_key=f"q{turn}"))
        now = {m.id for m in store.messages("e") if m.verdict == "evicted"}
        evicted_at.update((message_id, turn) for message_id in now - was)
        was = now
    assert was
    for message_id in was:
        why = store.explain("e", message_id)
        assert why.evicted_at_turn == evicted_at[message_id] and why.evicted_by == f"t{evicted_at[message_id]}"
        assert f"at the removal event of turn {evicted_at[message_id]}" in why.reason
    store.rebuild()  # a rebuild clears the journal: the event is no longer known, and nothing pretends it is
    assert store.explain("e", next(iter(was))).evicted_at_turn is None


@pytest.mark.parametrize("policy", [BUDGETED[1], BUDGETED[5], BUDGETED[-1]], ids=["budget", "definers", "ttl"])
@settings(max_examples=10)
@given(data=st.data())
def test_an_import_under_a_budget_gives_what_appends_give(store_url, tmp_path_factory, policy, data):
    """`import_files` rebuilds message states and runs the prompt keeper batch by batch: the same fold."""
    from prunestore import PruneStore
    from prunestore.importer import import_files
    from prunestore.jsonl import to_json

    ms = data.draw(sessions(min_size=1, max_size=24))
    batch_size = data.draw(st.integers(1, 7))
    session = f"i{next(_names)}"
    path = tmp_path_factory.mktemp("import") / "session.jsonl"
    path.write_text("".join(json.dumps({"session": session, **to_json(m)}) + "\n" for m in ms))
    with PruneStore(store_url, policy=policy) as store:
        import_files(store, [path], batch_size=batch_size)
        expected = prune(ms, policy=policy)
        assert {m.id: m.verdict for m in store.messages(session)} == expected.verdicts
        stats = store.stats(session)
        assert (stats.events, stats.comebacks, stats.late_joins) == (
            expected.events,
            expected.comebacks,
            expected.late_joins,
        )
        assert [m.to_message() for m in store.messages(session)] == ms
        assert store.verify(session).ok
