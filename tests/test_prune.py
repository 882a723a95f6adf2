"""The batch pruner on hand-written cases for every rule, and its properties on generated sessions."""

from __future__ import annotations

import pytest
from helpers import sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import DuplicateMessageError, Message, Policy, prune
from prunestore.model import LIVE_VERDICTS, effective_defines, effective_refs
from prunestore.text import normalize

DIRECT = Policy(restore="direct")


def M(id, role, content, turn, **kw):
    return Message(id, role, content, turn, **kw)


def live_ids(result):
    return [m.id for m in result.live]


def test_the_csv_preference_survives_while_stale_tool_output_goes():
    ms = [
        M("sys", "system", "You are a data assistant.", 0),
        M("pref", "user", "My preferred format is CSV. DEFINE:format", 3, expires_after_turn=5),
        M("ls1", "tool_output", "files: a b", 4, tool_key="ls:/data"),
        M("ls2", "tool_output", "files: a b c", 20, tool_key="ls:/data"),
        M("ask", "user", "Export the results. REF:format", 47),
    ]
    result = prune(ms)
    assert live_ids(result) == ["sys", "pref", "ls2", "ask"]
    assert result.verdicts == {
        "sys": "kept",
        "pref": "restored",
        "ls1": "superseded",
        "ls2": "kept",
        "ask": "kept",
    }
    assert result.base["pref"] == "expired"
    assert result.tokens_after < result.tokens_before
    assert result.counts["superseded"] == 1 and result.counts["restored"] == 1


def test_superseded_ignores_role_and_keeps_only_the_last_holder():
    ms = [
        M("a", "tool_output", "v1", 0, tool_key="t"),
        M("b", "assistant", "v2", 0, tool_key="t"),
        M("c", "user", "v3", 1, tool_key="t"),
        M("d", "tool_output", "other", 1, tool_key="u"),
    ]
    assert prune(ms).verdicts == {"a": "superseded", "b": "superseded", "c": "kept", "d": "kept"}


def test_ttl_expiry_uses_current_turn():
    ms = [M("a", "user", "x", 0, expires_after_turn=2), M("b", "user", "y", 2)]
    assert prune(ms).verdicts["a"] == "kept"  # T = 2, not > 2
    assert prune(ms, current_turn=3).verdicts["a"] == "expired"
    assert prune(ms, current_turn=3).current_turn == 3


def test_superseded_wins_over_expired():
    ms = [
        M("a", "tool_output", "x", 0, tool_key="t", expires_after_turn=0),
        M("b", "tool_output", "y", 5, tool_key="t"),
    ]
    assert prune(ms).verdicts["a"] == "superseded"


def test_duplicates_compare_normalized_content_and_only_dedupe_roles():
    ms = [
        M("a", "retrieved_doc", "The  Passage", 0),
        M("b", "retrieved_doc", "the passage", 0),
        M("c", "user", "the passage", 0),
        M("d", "retrieved_doc", "THE\npassage ", 1),
    ]
    assert prune(ms).verdicts == {"a": "kept", "b": "duplicate", "c": "kept", "d": "duplicate"}
    assert prune(ms, policy=Policy(dedupe_roles={"retrieved_doc", "user"})).verdicts["c"] == "duplicate"


def test_duplicate_of_a_superseded_copy_is_kept():
    ms = [
        M("a", "retrieved_doc", "passage", 0, tool_key="fetch"),
        M("b", "retrieved_doc", "passage", 0),
        M("c", "retrieved_doc", "passage", 0),
        M("d", "tool_output", "newer fetch", 1, tool_key="fetch"),
    ]
    assert prune(ms).verdicts == {"a": "superseded", "b": "kept", "c": "duplicate", "d": "kept"}


def test_duplicate_of_an_expired_copy_is_kept():
    ms = [
        M("a", "retrieved_doc", "passage", 0, expires_after_turn=0),
        M("b", "retrieved_doc", "passage", 1),
    ]
    assert prune(ms).verdicts == {"a": "expired", "b": "kept"}


def test_restores_an_expired_definer_and_a_duplicate_definer():
    ms = [
        M("pref", "user", "DEFINE:tz Europe/Paris", 0, expires_after_turn=0),
        M("doc1", "retrieved_doc", "the spec", 0),
        M("doc2", "retrieved_doc", "The spec", 0, defines=("spec",)),
        M("ask", "user", "what time is it? REF:tz", 1, refs=("spec",)),
    ]
    result = prune(ms)
    assert result.verdicts == {"pref": "restored", "doc1": "kept", "doc2": "restored", "ask": "kept"}
    assert result.base == {"pref": "expired", "doc1": "kept", "doc2": "duplicate", "ask": "kept"}


def test_forward_reference_is_restored_once_the_definer_arrives():
    ms = [
        M("ask", "user", "REF:plan", 0),
        M("plan", "tool_output", "DEFINE:plan v1", 0, tool_key="plan"),
        M("plan2", "tool_output", "unrelated", 1, tool_key="plan"),
    ]
    assert prune(ms).verdicts == {"ask": "kept", "plan": "restored", "plan2": "kept"}


def test_redefinition_moves_the_key_to_the_last_definer():
    ms = [
        M("v1", "tool_output", "DEFINE:cfg v1", 0, tool_key="cfg"),
        M("v2", "tool_output", "DEFINE:cfg v2", 0, tool_key="cfg"),
        M("v3", "tool_output", "something else", 0, tool_key="cfg"),
        M("ask", "user", "REF:cfg", 1),
    ]
    assert prune(ms).verdicts == {"v1": "superseded", "v2": "restored", "v3": "kept", "ask": "kept"}


def test_transitive_follows_refs_of_restored_messages_and_direct_does_not():
    ms = [
        M("a", "tool_output", "DEFINE:a", 0, tool_key="x"),
        M("b", "tool_output", "DEFINE:b REF:a", 0, tool_key="y"),
        M("x2", "tool_output", "new", 1, tool_key="x"),
        M("y2", "tool_output", "new", 1, tool_key="y"),
        M("ask", "user", "REF:b", 1),
    ]
    assert prune(ms).verdicts["a"] == "restored"
    assert prune(ms).verdicts["b"] == "restored"
    direct = prune(ms, policy=DIRECT)
    assert direct.verdicts["b"] == "restored"
    assert direct.verdicts["a"] == "superseded"


def test_cycles_are_fine_and_need_a_kept_root():
    ms = [
        M("a", "tool_output", "DEFINE:a REF:b", 0, tool_key="x"),
        M("b", "tool_output", "DEFINE:b REF:a", 0, tool_key="y"),
        M("x2", "tool_output", "new", 1, tool_key="x"),
        M("y2", "tool_output", "new", 1, tool_key="y"),
    ]
    assert prune(ms).verdicts["a"] == prune(ms).verdicts["b"] == "superseded"
    with_root = ms + [M("ask", "user", "REF:a", 1)]
    assert prune(with_root).verdicts["a"] == prune(with_root).verdicts["b"] == "restored"


def test_a_message_refers_to_its_own_key():
    ms = [M("a", "tool_output", "DEFINE:k REF:k", 0, tool_key="t"), M("b", "tool_output", "new", 0, tool_key="t")]
    assert prune(ms).verdicts["a"] == "superseded"


def test_a_kept_definer_is_not_restored_and_unknown_refs_are_ignored():
    ms = [M("a", "user", "DEFINE:k", 0), M("b", "user", "REF:k REF:nobody", 0)]
    assert prune(ms).verdicts == {"a": "kept", "b": "kept"}


def test_empty_input_and_repeated_ids():
    result = prune([])
    assert result.live == [] and result.tokens_before == 0 and result.reduction == 0.0
    with pytest.raises(DuplicateMessageError, match="id='a'"):
        prune([M("a", "user", "x", 0), M("a", "user", "y", 0)])


# -- properties on generated sessions -------------------------------------

policies = st.sampled_from([Policy(), DIRECT, Policy(dedupe_roles={"retrieved_doc", "tool_output"})])


@given(sessions(), policies, st.integers(0, 3))
def test_deterministic(ms, policy, extra_turns):
    turn = max((m.turn for m in ms), default=0) + extra_turns
    assert prune(ms, policy=policy, current_turn=turn) == prune(list(ms), policy=policy, current_turn=turn)


@given(sessions(tool_roles_can_dedupe=False), policies, st.integers(0, 3))
def test_idempotent_when_no_message_has_a_tool_key_and_a_dedupe_role(ms, policy, extra_turns):
    ms = [m for m in ms if not (m.tool_key is not None and m.role in policy.dedupe_roles)]
    turn = max((m.turn for m in ms), default=0) + extra_turns
    first = prune(ms, policy=policy, current_turn=turn)
    again = prune(first.live, policy=policy, current_turn=turn)
    assert live_ids(again) == live_ids(first)


def test_idempotence_counterexample_with_a_tool_keyed_retrieved_doc():
    """The documented exception: a restored, superseded retrieved_doc can shadow a kept copy.

    d1 is superseded by d3 (which then expires), so d2 is the surviving copy
    of the passage, and ask restores d1 through k. Rerun on the live set, d1
    has no later holder any more: it is the first copy and d2 its duplicate.
    """
    ms = [
        M("d1", "retrieved_doc", "the passage", 0, tool_key="fetch", defines=("k",)),
        M("d2", "retrieved_doc", "The  passage", 0),
        M("d3", "tool_output", "refetch", 0, tool_key="fetch", expires_after_turn=0),
        M("ask", "user", "REF:k", 1),
    ]
    first = prune(ms)
    assert first.verdicts == {"d1": "restored", "d2": "kept", "d3": "expired", "ask": "kept"}
    second = prune(first.live, current_turn=1)
    assert live_ids(first) == ["d1", "d2", "ask"]
    assert live_ids(second) == ["d1", "ask"]


@given(sessions(), policies, st.integers(0, 3))
def test_dependency_safe(ms, policy, extra_turns):
    turn = max((m.turn for m in ms), default=0) + extra_turns
    result = prune(ms, policy=policy, current_turn=turn)
    definer = {}
    for m in ms:
        for key in effective_defines(m):
            definer[key] = m.id
    live = {m.id for m in result.live}
    sources = [m for m in result.live if policy.transitive or result.verdicts[m.id] == "kept"]
    for m in sources:
        for key in effective_refs(m):
            if key in definer:
                assert definer[key] in live, (m.id, key)


@given(sessions(), policies)
def test_every_message_gets_one_verdict_and_live_is_kept_plus_restored(ms, policy):
    result = prune(ms, policy=policy)
    assert list(result.verdicts) == [m.id for m in ms]
    assert live_ids(result) == [m.id for m in ms if result.verdicts[m.id] in ("kept", "restored")]
    assert sum(result.counts.values()) == len(ms)
    for m in ms:
        if result.verdicts[m.id] == "restored":
            assert result.base[m.id] != "kept"


def article_three_passes(ms):
    """The reference article's passes, written independently: tool outputs, then passages, then markers."""
    survivors = []
    seen_tools = set()
    for m in reversed(ms):  # pass 1: a later call of the same tool supersedes
        if m.tool_key is not None and m.tool_key in seen_tools:
            continue
        if m.tool_key is not None:
            seen_tools.add(m.tool_key)
        survivors.append(m)
    survivors.reverse()
    kept, seen_texts = [], set()
    for m in survivors:  # pass 2: the first copy of a retrieved passage wins
        if m.role == "retrieved_doc":
            text = normalize(m.content)
            if text in seen_texts:
                continue
            seen_texts.add(text)
        kept.append(m)
    kept_ids = {m.id for m in kept}
    restore = set()
    for m in kept:  # pass 3: bring back the last definer of every key a kept message references
        for key in effective_refs(m):
            definers = [d for d in ms if key in effective_defines(d)]
            if definers and definers[-1].id not in kept_ids:
                restore.add(definers[-1].id)
    return [m.id for m in ms if m.id in kept_ids or m.id in restore]


@settings(max_examples=300)
@given(sessions())
def test_seed_compatible_with_the_article_in_direct_mode(ms):
    ms = [
        Message(m.id, m.role, m.content, m.turn, tool_key=m.tool_key)  # no TTLs, keys only as markers
        for m in ms
    ]
    assert live_ids(prune(ms, policy=DIRECT)) == article_three_passes(ms)


def test_a_current_turn_below_the_last_message_is_refused_under_a_budget():
    from prunestore import InvalidArgumentError

    messages = [Message(f"m{i}", "user", "word " * 50, i) for i in range(1, 6)]
    budget = Policy(budget=120, clear_at_least=40)
    with pytest.raises(InvalidArgumentError, match="current_turn=3: below turn 5 of message id='m5'"):
        prune(messages, policy=budget, current_turn=3)
    for turn in (5, 9):  # at or past the last turn, the live list and the verdicts agree
        result = prune(messages, policy=budget, current_turn=turn)
        assert [m.id for m in result.live] == [m.id for m in messages if result.verdicts[m.id] in LIVE_VERDICTS]
    assert prune(messages, current_turn=3).current_turn == 3  # without a budget the passes take any turn


def test_definers_last_evicts_what_defines_nothing_first():
    """Under ``evict="definers_last"`` a fact outlives chatter, so a later reference needs no comeback."""
    messages = [
        Message("fact", "user", "my preferred format is CSV DEFINE:format", 1),  # 8 tokens
        Message("chat1", "assistant", "word " * 20, 2),
        Message("redefined", "user", "call me Sam DEFINE:name", 3),  # 6
        Message("renamed", "user", "call me Alex DEFINE:name", 4),  # 6
        Message("chat2", "assistant", "word " * 14, 5),  # 54 in all: an event, down to 30
    ]
    referring = Message("export", "user", "export the results REF:format", 6)
    budget = {"budget": 50, "clear_at_least": 20}
    oldest, last = Policy(**budget), Policy(**budget, evict="definers_last")

    before = prune(messages, policy=oldest)
    assert [m.id for m in before.live] == ["redefined", "renamed", "chat2"]
    after = prune([*messages, referring], policy=oldest)
    assert [m.id for m in after.live][:1] == ["fact"], "the fact comes back before the cached prompt"

    before = prune(messages, policy=last)
    # chatter first, and a message whose key a later one redefined is no longer a definer
    assert [m.id for m in before.live] == ["fact", "renamed", "chat2"]
    assert before.verdicts["chat1"] == before.verdicts["redefined"] == "evicted"
    after = prune([*messages, referring], policy=last)
    assert [m.id for m in after.live] == [m.id for m in before.live] + ["export"], "the prompt only grew"
    assert before.events == after.events == 1
