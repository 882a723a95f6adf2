"""Hand-written sessions that force each cascade of the incremental store, on both backends.

Each is appended one message at a time and checked against `prune` after
every append, in both restore modes, so every cascade is exercised on every
run (the property tests reach them too, but only by chance).
"""

from __future__ import annotations

import pytest

from prunestore import Message as M
from prunestore import Policy, prune

BOTH_APIS = True  # these tests run on PruneStore and on AsyncPruneStore (see conftest)

SCENARIOS = {
    "handover promotes a copy whose refs restore a definer": [
        M("d1", "retrieved_doc", "the passage", 0, tool_key="fetch"),
        M("d2", "retrieved_doc", "The passage", 0, refs=("k",)),
        M("x", "tool_output", "DEFINE:k", 0, tool_key="calc"),
        M("x2", "tool_output", "newer", 0, tool_key="calc"),
        M("f2", "tool_output", "refetched", 1, tool_key="fetch"),
    ],
    "late reference restores a chain": [
        M("a", "tool_output", "DEFINE:a", 0, tool_key="t1"),
        M("b", "tool_output", "DEFINE:b REF:a", 0, tool_key="t2"),
        M("a2", "tool_output", "x", 0, tool_key="t1"),
        M("b2", "tool_output", "y", 0, tool_key="t2"),
        M("ask", "user", "REF:b", 0),
    ],
    "a cycle loses its only root": [
        M("a", "tool_output", "DEFINE:a REF:b", 0, tool_key="t1"),
        M("b", "tool_output", "DEFINE:b REF:a", 0, tool_key="t2"),
        M("ask", "user", "REF:a", 0, expires_after_turn=1),
        M("a2", "tool_output", "x", 1, tool_key="t1"),
        M("b2", "tool_output", "y", 1, tool_key="t2"),
        M("later", "user", "nothing", 2),
    ],
    "a self-reference does not keep a message": [
        M("a", "tool_output", "DEFINE:k REF:k", 0, tool_key="t"),
        M("a2", "tool_output", "new", 0, tool_key="t"),
    ],
    "a new definer takes the key from a restored one": [
        M("d1", "tool_output", "DEFINE:k REF:j", 0, tool_key="t"),
        M("j", "tool_output", "DEFINE:j", 0, tool_key="u"),
        M("d1b", "tool_output", "new", 0, tool_key="t"),
        M("j2", "tool_output", "new", 0, tool_key="u"),
        M("ask", "user", "REF:k", 0),
        M("p1", "retrieved_doc", "passage", 1),
        M("p2", "retrieved_doc", "PASSAGE DEFINE:k", 1),
        M("p3", "retrieved_doc", "passage  DEFINE:k", 1),
    ],
    "one turn advance expires several copies and hands over twice": [
        M("c1", "retrieved_doc", "doc", 0, expires_after_turn=0),
        M("c2", "retrieved_doc", "DOC", 0, expires_after_turn=1),
        M("c3", "retrieved_doc", "doc", 0, refs=("k",)),
        M("c4", "retrieved_doc", "doc", 0),
        M("def", "tool_output", "DEFINE:k", 0, expires_after_turn=0),
        M("next", "user", "turn two", 2),
    ],
    "a restored duplicate becomes the kept copy": [
        M("c1", "retrieved_doc", "doc", 0, tool_key="t"),
        M("c2", "retrieved_doc", "doc", 0, defines=("k",), refs=("j",)),
        M("j", "tool_output", "DEFINE:j", 0, tool_key="u"),
        M("j2", "tool_output", "new", 0, tool_key="u"),
        M("ask", "user", "REF:k", 0),
        M("t2", "tool_output", "new", 0, tool_key="t"),
    ],
    "a kept referrer expires and its definers follow": [
        M("d", "tool_output", "DEFINE:k REF:j", 0, tool_key="t"),
        M("e", "tool_output", "DEFINE:j", 0, tool_key="u"),
        M("d2", "tool_output", "new", 0, tool_key="t"),
        M("e2", "tool_output", "new", 0, tool_key="u"),
        M("ask", "user", "REF:k", 0, expires_after_turn=0),
        M("later", "user", "hello", 1),
        M("again", "user", "REF:k", 1),
    ],
    "a message superseded after it expired": [
        M("a", "tool_output", "DEFINE:k", 0, tool_key="t", expires_after_turn=0),
        M("ask", "user", "REF:k", 1),
        M("a2", "tool_output", "new", 1, tool_key="t"),
    ],
}


@pytest.mark.parametrize("policy", [Policy(), Policy(restore="direct")], ids=["transitive", "direct"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_one_message_at_a_time(open_store, policy, name):
    store = open_store(policy)
    messages = SCENARIOS[name]
    for i, message in enumerate(messages, 1):
        store.append("s", message)
        expected = prune(messages[:i], policy=policy)
        assert {m.id: m.verdict for m in store.messages("s")} == expected.verdicts, f"after {message.id}"
    assert store.verify().ok


@pytest.mark.parametrize("policy", [Policy(), Policy(restore="direct")], ids=["transitive", "direct"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_in_one_batch(open_store, policy, name):
    store = open_store(policy)
    store.append("s", SCENARIOS[name])
    assert {m.id: m.verdict for m in store.messages("s")} == prune(SCENARIOS[name], policy=policy).verdicts
    assert store.verify().ok


def test_scenarios_reach_restoration():
    """The scenarios are not vacuous: each restores or drops something."""
    for messages in SCENARIOS.values():
        verdicts = [prune(messages[:i]).verdicts for i in range(1, len(messages) + 1)]
        assert any(v != "kept" for vs in verdicts for v in vs.values())
    assert "restored" in prune(SCENARIOS["late reference restores a chain"]).verdicts.values()
