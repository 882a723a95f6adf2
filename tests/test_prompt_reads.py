"""A prompt read through the index of calls is the prompt read from every message of the session.

`render` and a fresh view read the live messages, the session's last ones
and the messages that make or answer the calls those name
(`prunestore.sql.calls`); a view built so refuses the patches it cannot
take exactly. Each is checked against the same prompt from every message:
`formats.render` of `messages()`, and a view whose form the index does not
serve, after appends by two stores, truncates and calls whose ids come back.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from providers import openai_transcripts
from test_formats import OPTIONS

from prunestore import Message, Policy, formats
from prunestore.formats import Continuation, from_openai
from prunestore.integrations.openai_chat import OPENAI_CHAT
from prunestore.sql.calls import call_ids
from prunestore.web.prompt import prompt_page

_names = itertools.count()
POLICY = Policy(budget=120, clear_at_least=40)


class _EveryMessage:
    """OPENAI_CHAT without the index: its fresh views read every message."""

    name = "openai-chat-every-message"
    unit = staticmethod(OPENAI_CHAT.unit)
    without_calls = staticmethod(OPENAI_CHAT.without_calls)


@pytest.fixture
def stores(open_store):
    return open_store(POLICY), open_store(POLICY), open_store(POLICY, live_cache_bytes=0)


def _reused(transcript: list[dict], ids: int) -> list[dict]:
    """The transcript with its call ids taken modulo `ids`: providers reuse ids, results answer the latest."""

    def call(value: str) -> str:
        return f"call_{int(value.removeprefix('call_')) % ids}"

    out = []
    for message in transcript:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [{**c, "id": call(c["id"])} for c in message["tool_calls"]]
        if message.get("role") == "tool":
            message["tool_call_id"] = call(message["tool_call_id"])
        out.append(message)
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(transcript=openai_transcripts(max_turns=8), ids=st.sampled_from([0, 2, 3]), data=st.data())
def test_prompts_through_the_index_of_calls_equal_prompts_from_every_message(stores, transcript, ids, data):
    a, b, cold = stores
    if ids:
        transcript = _reused(transcript, ids)
    session = f"p{next(_names)}"
    for n in range(len(transcript)):
        messages = from_openai(transcript[: n + 1], **OPTIONS)  # a reused id's results: <id>, <id>#2, ...
        count = len(a.messages(session)) if n else 0
        if count > len(messages):
            continue
        data.draw(st.sampled_from([a, b, b])).append(session, messages[count:])
        if count > 2 and data.draw(st.integers(0, 5)) == 0:
            b.truncate(session, messages[data.draw(st.integers(1, count - 1))].id)
        every = cold.view(session, _EveryMessage())
        assert a.view(session, OPENAI_CHAT) == every
        assert cold.view(session, OPENAI_CHAT) == every
        stored, source = a.messages(session), a.prompt_messages(session)
        deciding, size = list(source.messages), (source.stored, source.tokens)
        assert size == (len(stored), sum(m.tokens for m in stored))
        assert {m.id for m in a.live(session)} <= {m.id for m in deciding}
        assert deciding == [m for m in stored if m.id in {d.id for d in deciding}]  # as stored, in append order
        for format, dropped in itertools.product(("openai", "anthropic", "text"), ("omit", "placeholder")):
            assert a.render(session, format, dropped=dropped) == formats.render(stored, format, dropped)
            # the web view's prompt page, calls left out included, from what render reads
            placeholders = dropped == "placeholder"
            assert prompt_page(deciding, format, placeholders, size) == prompt_page(stored, format, placeholders)


class _Counting:
    """OPENAI_CHAT counting the messages it is asked to read."""

    name = "openai-chat-counting"
    indexed = True
    without_calls = staticmethod(OPENAI_CHAT.without_calls)

    def __init__(self) -> None:
        self.asked: list[int] = []

    def unit(self, message):
        self.asked.append(message.seq)
        return OPENAI_CHAT.unit(message)


def test_a_fresh_view_a_patch_and_a_render_read_each_message_once(stores):
    a, b, cold = stores
    session = f"p{next(_names)}"
    transcript = [{"role": "user", "content": "Go."}]
    for n in range(30):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "ls", "arguments": f'{{"p": {n % 4}}}'}}
        transcript += [
            {"role": "user", "content": f"And now {n}?"},  # a turn each: the budget evicts the older ones
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"listing {n % 4} " + "x " * 20},
        ]
    a.append(session, from_openai(transcript))
    assert a.stats(session).by_verdict["evicted"].messages > 0
    form = _Counting()
    assert cold.view(session, form) == cold.view(session, _EveryMessage())
    assert form.asked and len(form.asked) == len(set(form.asked)) < len(transcript)
    a.view(session, form)  # cached by `a`, then patched with what `b` appends
    more = [{"role": "user", "content": "More?"}, {"role": "assistant", "content": "No."}]
    b.append(session, from_openai(more, continuation=Continuation.after(b.messages(session))))
    form.asked.clear()
    assert a.view(session, form) == cold.view(session, _EveryMessage())
    assert form.asked and len(form.asked) == len(set(form.asked)) <= 3
    asked = []
    item_of = formats.plan.item_of

    def counted(message):
        asked.append(message.seq)
        return item_of(message)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(formats, "item_of", counted)
        patch.setattr(formats.plan, "item_of", counted)
        rendered = cold.render(session)
    assert rendered == formats.render(a.messages(session), "openai", "omit")
    assert asked and len(asked) == len(set(asked)) < len(transcript)


def test_the_index_finds_the_call_ids_of_every_built_in_shape():
    assert call_ids({"openai": {"role": "assistant", "tool_calls": [{"id": "a", "type": "function"}]}}) == {"a"}
    assert call_ids({"openai": {"role": "tool", "tool_call_id": "a", "content": "x"}}) == {"a"}
    assert call_ids({"anthropic": {"content": [{"type": "tool_use", "id": "b"}, {"type": "text"}]}}) == {"b"}
    assert call_ids({"anthropic": {"content": [{"type": "tool_result", "tool_use_id": "b"}]}}) == {"b"}
    assert call_ids({"langchain": {"type": "ai", "data": {"id": "m1", "tool_calls": [{"id": "c"}]}}}) == {"c"}
    assert call_ids({"openai_agents": {"type": "function_call_output", "call_id": "d", "id": "fc"}}) == {"d"}
    assert call_ids({"pydantic_ai": {"parts": [{"part_kind": "tool-call", "tool_call_id": "e"}]}}) == {"e"}
    assert call_ids({"note": "no calls", "id": "m2"}) == set()


def test_a_call_is_abandoned_when_a_pruned_message_follows_it(stores):
    """The last message is pruned, yet it decides that the call before it no longer waits for its result."""
    a, _, cold = stores
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "lookup", "arguments": "{}"}}]}  # fmt: skip
    session = f"p{next(_names)}"
    a.append(session, [
        Message("u1", "user", "Find the guide.", 1),
        Message("d1", "retrieved_doc", "Passage about setup.", 1),
        Message("a1", "assistant", "lookup({})", 1, metadata={"openai": call}),
        Message("d2", "retrieved_doc", "Passage about setup.", 1),  # a copy of d1: pruned
    ])  # fmt: skip
    assert [m.id for m in a.live(session)] == ["u1", "d1", "a1"]
    stored = a.messages(session)
    for format, dropped in itertools.product(("openai", "anthropic"), ("omit", "placeholder")):
        rendered = a.render(session, format, dropped=dropped)
        assert rendered == formats.render(stored, format, dropped)
        assert rendered.report.calls_removed + rendered.report.placeholders == 1
    assert cold.view(session, OPENAI_CHAT) == cold.view(session, _EveryMessage())


def _caller(call: str, **keys) -> Message:
    made = {"role": "assistant", "content": None, "tool_calls": [{"id": call, "type": "function",
            "function": {"name": "lookup", "arguments": "{}"}}]}  # fmt: skip
    return Message(f"a-{call}", "assistant", "lookup({})", 1, tool_key="plan", metadata={"openai": made}, **keys)


def _result(call: str, text: str, **keys) -> Message:
    answer = {"role": "tool", "tool_call_id": call, "content": text}
    return Message(call, "tool_output", text, 1, tool_key="lookup", metadata={"openai": answer}, **keys)


def test_a_view_read_from_the_index_takes_back_a_call_it_never_read(open_store):
    """A superseded result comes back when another writer refers to it, and goes out with its call, superseded
    too: the view that never read them reads the session's prompt again rather than send it unpaired."""
    a, b, cold = open_store(), open_store(), open_store(live_cache_bytes=0)
    session = f"p{next(_names)}"
    a.append(session, [
        Message("u0", "user", "Look it up.", 1),
        _caller("c1"),
        _result("c1", "Use CSV.", defines=("format",)),
        _caller("c2"),
        _result("c2", "Still CSV."),
        Message("u1", "user", "Fine.", 1),
    ])  # fmt: skip
    assert [m.id for m in a.live(session)] == ["u0", "a-c2", "c2", "u1"]
    assert a.view(session, OPENAI_CHAT) == cold.view(session, _EveryMessage())
    b.append(session, Message("u2", "user", "Export it in that format.", 2, refs=("format",)))
    assert [m.id for m in a.live(session)] == ["u0", "c1", "a-c2", "c2", "u1", "u2"]
    every = cold.view(session, _EveryMessage())
    assert {"role": "tool", "tool_call_id": "c1", "content": "Use CSV."} in every
    assert a.view(session, OPENAI_CHAT) == every


def test_a_view_read_from_the_index_pairs_a_late_result_with_a_call_it_never_read(open_store):
    """A result arrives after its call was superseded: it goes out with that call, so the view that never
    read the call reads the session's prompt again."""
    a, b, cold = open_store(), open_store(), open_store(live_cache_bytes=0)
    session = f"p{next(_names)}"
    a.append(session, [Message("u0", "user", "Look it up.", 1), _caller("c1"), _caller("c2"), _result("c2", "CSV.")])
    assert "a-c1" not in [m.id for m in a.live(session)]
    assert a.view(session, OPENAI_CHAT) == cold.view(session, _EveryMessage())
    b.append(session, _result("c1", "Late, but CSV."))
    every = cold.view(session, _EveryMessage())
    assert {"role": "tool", "tool_call_id": "c1", "content": "Late, but CSV."} in every
    assert a.view(session, OPENAI_CHAT) == every
