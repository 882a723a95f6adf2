"""The workload generator: deterministic, with the parameters it promises, and truthful labels."""

from __future__ import annotations

import pytest

from prunestore import prune
from prunestore.model import effective_defines, effective_refs
from prunestore.showcase.workloads import WORKLOADS, generate
from prunestore.text import normalize


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_deterministic_per_seed(name):
    assert generate(name, 60, seed=3) == generate(name, 60, seed=3)
    assert generate(name, 60, seed=3).messages != generate(name, 60, seed=4).messages


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_parameters_hold_on_a_long_session(name):
    spec, turns = WORKLOADS[name], 2000
    session = generate(name, turns, seed=1)
    ms = session.messages
    by_role = {
        role: [m for m in ms if m.role == role]
        for role in ("system", "user", "assistant", "tool_output", "retrieved_doc")
    }
    assert len(by_role["system"]) == 1 and ms[0].turn == 0
    assert len(by_role["user"]) == len(by_role["assistant"]) == turns
    assert len(by_role["retrieved_doc"]) == spec.passages_per_turn * turns
    tools = by_role["tool_output"]
    assert abs(len(tools) / turns - spec.tool_call_rate) < 0.03
    if spec.tool_call_rate:
        repeats = len(tools) - len({m.tool_key for m in tools})
        assert abs(repeats / len(tools) - spec.tool_repeat_rate) < 0.08
        assert {m.tool_key.split(":")[0] for m in tools} == set(spec.tools)
        defining = sum(1 for m in tools if effective_defines(m))
        assert abs(defining / len(tools) - spec.tool_define_rate) < 0.06
    if spec.passages_per_turn:
        seen, repeats = set(), 0
        for m in by_role["retrieved_doc"]:
            text = normalize(m.content)
            repeats += text in seen
            seen.add(text)
        assert abs(repeats / len(by_role["retrieved_doc"]) - spec.overlap_rate) < 0.05
    preferences = sum(1 for m in by_role["user"] if "DEFINE:" in m.content)
    assert abs(preferences / turns - spec.preference_rate) < 0.025
    references = sum(1 for m in by_role["user"] if effective_refs(m))
    assert abs(references / turns - spec.reference_rate) < 0.05


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_required_facts_are_the_definers_that_later_turns_refer_to(name):
    session = generate(name, 400, seed=2)
    position = {m.id: i for i, m in enumerate(session.messages)}
    for required in session.required:
        message = session.messages[position[required]]
        keys = effective_defines(message)
        assert keys
        assert any(key in effective_refs(m) for m in session.messages[position[required] + 1 :] for key in keys)
    result = prune(session.messages)
    assert session.required <= {m.id for m in result.live}


def test_by_turn_groups_in_order():
    session = generate("agent", 30)
    groups = list(session.by_turn())
    assert [g[0].turn for g in groups] == list(range(31))
    assert [m for g in groups for m in g] == list(session.messages)


def test_reductions_land_near_the_published_figures():
    reductions = {name: prune(generate(name, 2000).messages).reduction for name in WORKLOADS}
    assert 0.015 < reductions["chat"] < 0.04
    assert 0.27 < reductions["rag"] < 0.34
    assert 0.31 < reductions["agent"] < 0.36
