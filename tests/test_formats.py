"""Provider formats: transcripts import with keys from their calls, and every render is one the provider accepts."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from providers import anthropic_from_openai, openai_transcripts, validate_anthropic, validate_openai

from prunestore import InvalidMessageError, Message, from_anthropic, from_openai, prune
from prunestore.formats import Continuation, ToolResult, tool_key
from prunestore.integrations.openai_chat import OPENAI_CHAT

BOTH_APIS = True  # these tests run on PruneStore and on AsyncPruneStore (see conftest)

_names = itertools.count()


def settings_hook(result: ToolResult):
    return (["user_settings"], []) if result.name == "get_user_settings" else None


OPTIONS = {"document_tools": {"fetch_doc"}, "ttl": {"run_sql": 2}, "keys_of": settings_hook}


def test_tool_key_is_name_plus_canonical_arguments():
    assert tool_key("search", '{"b": 1, "a": [1, 2]}') == tool_key("search", '{"a":[1,2],"b":1}')
    assert tool_key("search", {"a": 1}) == 'search:{"a":1}'
    assert tool_key("search", '{"a": 1}') != tool_key("search", '{"a": 2}')
    assert tool_key("search", '{"a": 1}') != tool_key("other", '{"a": 1}')
    assert tool_key("search", "not json {") == "search:not json {"


def test_openai_import_maps_roles_turns_keys_and_options():
    transcript = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "List the files."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "/data"}'}},
                {"id": "c2", "type": "function", "function": {"name": "fetch_doc", "arguments": '{"q": "faq"}'}},
                {"id": "c3", "type": "function", "function": {"name": "get_user_settings", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a b"},
        {"role": "tool", "tool_call_id": "c2", "content": "The FAQ."},
        {"role": "tool", "tool_call_id": "c3", "content": '{"format": "csv"}'},
        {"role": "user", "content": [{"type": "text", "text": "Again."}, {"type": "image_url", "image_url": {}}]},
    ]
    ms = from_openai(transcript, keep_tools={"get_user_settings"}, **{**OPTIONS, "ttl": {"ls": 3}})
    assert [(m.id, m.role, m.turn) for m in ms] == [
        ("m0", "system", 0),
        ("m1", "user", 1),
        ("m2", "assistant", 1),
        ("c1", "tool_output", 1),
        ("c2", "retrieved_doc", 1),
        ("c3", "tool_output", 1),
        ("m6", "user", 2),
    ]
    assert ms[3].tool_key == 'ls:{"path":"/data"}' and ms[3].expires_after_turn == 4
    assert ms[4].tool_key is None  # a passage: deduplicated by content instead
    assert ms[5].tool_key is None and ms[5].defines == ("user_settings",)  # kept tool, keys from the hook
    assert ms[6].content == "Again.\n[image_url]"
    assert all(m.metadata == {"openai": t} for m, t in zip(ms, transcript, strict=True))
    assert from_openai(transcript, turns=[0, 5, 5, 5, 5, 5, 9])[6].turn == 9


def test_anthropic_import_splits_tool_results_into_messages_of_their_own():
    transcript = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "t2", "name": "weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "12C"},
                {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "20C"}]},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    ms = from_anthropic(transcript, system="Be brief.")
    assert [(m.id, m.role, m.turn, m.tool_key) for m in ms] == [
        ("system", "system", 0, None),
        ("m0", "user", 1, None),
        ("m1", "assistant", 1, None),
        ("t1", "tool_output", 2, 'weather:{"city":"Paris"}'),
        ("t2", "tool_output", 2, 'weather:{"city":"Rome"}'),
        ("m2.2", "user", 2, None),
    ]
    assert ms[4].content == "20C" and ms[5].content == "And tomorrow?"


def test_anthropic_thinking_goes_with_the_last_of_its_calls(store):
    """Rendered for Anthropic, a thinking block (with its signature) stays while a call of its message is sent,
    and is never sent alone."""
    thinking = {"type": "thinking", "thinking": "Which cities?", "signature": "sig-1"}

    def asked(n: int, *cities: str) -> list[dict]:
        uses = [{"type": "tool_use", "id": f"t{n}{c}", "name": "weather", "input": {"city": c}} for c in cities]
        results = [{"type": "tool_result", "tool_use_id": f"t{n}{c}", "content": f"{c}: sun"} for c in cities]
        return [
            {"role": "user", "content": f"Weather {n}?"},
            {"role": "assistant", "content": [thinking, *uses]},
            {"role": "user", "content": results},
            {"role": "assistant", "content": f"Answer {n}."},
        ]

    transcript = asked(1, "Paris", "Rome")
    store.append("s", from_anthropic(transcript))
    assert store.render("s", format="anthropic").messages[1]["content"] == transcript[1]["content"]
    transcript += asked(2, "Paris")  # Paris again: t1Paris goes, and Rome keeps the thinking
    store.append("s", from_anthropic(transcript))
    sent = store.render("s", format="anthropic").messages
    assert sent[1] == {"role": "assistant", "content": [thinking, transcript[1]["content"][2]]}
    transcript += asked(3, "Rome")  # Rome again: the first message has no call left, so no thinking either
    store.append("s", from_anthropic(transcript))
    sent = store.render("s", format="anthropic").messages
    assert sent[:2] == [{"role": "user", "content": "Weather 1?"}, {"role": "assistant", "content": "Answer 1."}]
    assert all(not (m["role"] == "assistant" and m["content"] == [thinking]) for m in sent)
    validate_anthropic(None, sent)


def test_bad_transcripts_raise_naming_the_field():
    with pytest.raises(InvalidMessageError, match=r"messages\[0\].role='robot'"):
        from_openai([{"role": "robot", "content": "x"}])
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        from_openai([{"role": "tool", "content": "x"}])
    with pytest.raises(InvalidMessageError, match="messages="):
        from_anthropic("not a list")
    with pytest.raises(InvalidMessageError, match="role"):
        from_anthropic([{"role": "system", "content": "x"}])


def _appended_incrementally(store, session, transcripts, convert):
    """Import growing prefixes the way a chatbot does each turn; only new messages are appended."""
    count = 0
    for prefix in transcripts:
        messages = convert(prefix)
        assert [m.id for m in messages[:count]] == [m.id for m in store.messages(session)] if count else True
        store.append(session, messages[count:])
        count = len(messages)
        yield messages


def _assert_waiting_calls_at_the_end_kept(stored, sent: list[dict]) -> None:
    """The calls of the session's last message but results, with no result stored yet, go out last;
    no other call goes without its result."""
    tail = next((i for i in range(len(stored) - 1, -1, -1) if stored[i].metadata["openai"]["role"] != "tool"), None)
    last = stored[tail] if tail is not None else None
    answered = {m.metadata["openai"]["tool_call_id"] for m in stored[tail + 1 if tail is not None else 0 :]}
    calls = last.metadata["openai"].get("tool_calls") or [] if last is not None and last.live else []
    waiting = {c["id"] for c in calls if c["id"] not in answered}
    unanswered = set()
    for m in sent:
        if m["role"] == "assistant":
            unanswered = {c["id"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            unanswered.discard(m["tool_call_id"])
    assert unanswered == waiting


def _assert_live_content_sent(store, session, rendered_json: str) -> None:
    for m in store.live(session):
        text = m.metadata["openai"].get("content") if "openai" in (m.metadata or {}) else None
        if isinstance(text, str) and text:
            assert json.dumps(text)[1:-1] in rendered_json, (m.id, text)


@settings(max_examples=60)
@given(
    transcript=st.booleans().flatmap(lambda reused: openai_transcripts(reused_ids=reused)),
    dropped=st.sampled_from(["omit", "placeholder"]),
)
def test_every_render_after_every_append_is_valid(store, transcript, dropped):
    """Also where every message numbers its calls from ``call_0``: each result goes out after its own call."""
    session = f"o{next(_names)}"
    prefixes = [transcript[: n + 1] for n in range(len(transcript))]
    for _ in _appended_incrementally(store, session, prefixes, lambda p: from_openai(p, **OPTIONS)):
        openai = store.render(session, "openai", dropped=dropped)
        validate_openai(openai.messages, waiting_at_end=True)
        _assert_waiting_calls_at_the_end_kept(store.messages(session), openai.messages)
        if dropped == "omit":  # one rule for every prompt: the rendered one is the view's
            assert openai.messages == store.view(session, OPENAI_CHAT)
        live = [m.metadata["openai"] for m in store.live(session) if m.metadata["openai"]["role"] == "tool"]
        sent = [m for m in openai.messages if m["role"] == "tool"]
        extra = Counter(m["tool_call_id"] for m in sent) - Counter(m["tool_call_id"] for m in live)
        assert len(sent) == len(live) + extra.total()  # every live result goes out, once
        stand_ins = [m for m in sent if m["content"].startswith(("[result pruned", "[no result"))]
        assert len(stand_ins) == extra.total() and (dropped == "placeholder" or not stand_ins)
        _assert_live_content_sent(store, session, json.dumps(openai.messages))
        anthropic = store.render(session, "anthropic", dropped=dropped)
        validate_anthropic(anthropic.system, anthropic.messages, waiting_at_end=True)
        _assert_live_content_sent(store, session, json.dumps([anthropic.system, anthropic.messages]))
        assert openai.report.tokens_out <= openai.report.tokens_in or dropped == "placeholder"
        assert store.render(session, "text").text.count("\n\n") + 1 >= min(1, len(store.live(session)))


def test_a_call_id_used_again_names_its_results_apart_in_pieces_and_at_once(store):
    """Each turn's call is ``call_0``: its results are ``call_0``, ``call_0#2``, ..., however the transcript
    is imported, and a piece that fails to import leaves the continuation where it was."""
    transcript = [{"role": "user", "content": "Hi."}]
    for n in range(3):
        call = {"id": "call_0", "type": "function", "function": {"name": "ls", "arguments": f'{{"p": {n}}}'}}
        transcript += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": f"listing {n}"},
            {"role": "assistant", "content": f"Listed {n}."},
        ]
    at_once = from_openai(transcript)
    assert [m.id for m in at_once if m.role == "tool_output"] == ["call_0", "call_0#2", "call_0#3"]
    continuation = Continuation()
    pieces = from_openai(transcript[:3], continuation=continuation)
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        from_openai([transcript[3], {"role": "tool", "content": "no id"}], continuation=continuation)
    pieces += from_openai(transcript[3:], continuation=continuation)
    assert [m.id for m in pieces] == [m.id for m in at_once]
    session = f"p{next(_names)}"
    store.append(session, at_once[:4])
    after = Continuation.after(store.messages(session))
    store.append(session, from_openai(transcript[4:], continuation=after))
    assert [m.id for m in store.messages(session)] == [m.id for m in at_once]
    assert store.render(session, "openai").messages == transcript  # each call with its own result


@pytest.fixture
def caching_stores(open_store):
    """Two stores with the live cache, and one without it; opened once for all examples."""
    return open_store(), open_store(), open_store(live_cache_bytes=0)


@settings(max_examples=30)
@given(transcript=openai_transcripts(), data=st.data())
def test_a_view_follows_another_stores_appends(caching_stores, transcript, data):
    """Store `a` keeps its view while `b` appends calls and results too: each view equals a cold one."""
    a, b, cold = caching_stores
    session = f"v{next(_names)}"
    count = 0
    for n in range(len(transcript)):
        messages = from_openai(transcript[: n + 1], **OPTIONS)
        writer = data.draw(st.sampled_from([a, b, b]))
        writer.append(session, messages[count:])
        count = len(messages)
        if data.draw(st.booleans()):
            assert a.view(session, OPENAI_CHAT) == cold.view(session, OPENAI_CHAT)
    assert a.view(session, OPENAI_CHAT) == cold.view(session, OPENAI_CHAT) == cold.render(session).messages


@settings(max_examples=40)
@given(transcript=openai_transcripts(), dropped=st.sampled_from(["omit", "placeholder"]), thinking=st.booleans())
def test_anthropic_transcripts_render_valid_after_every_append(store, transcript, dropped, thinking):
    """With extended thinking too: every assistant turn sent with reasoning starts with it."""
    system, messages = anthropic_from_openai(transcript)
    messages = _with_thinking(messages) if thinking else messages
    session = f"a{next(_names)}"
    prefixes = [messages[: n + 1] for n in range(len(messages))]
    for _ in _appended_incrementally(store, session, prefixes, lambda p: from_anthropic(p, system, **OPTIONS)):
        for format in ("anthropic", "openai"):
            rendered = store.render(session, format, dropped=dropped)
            if format == "anthropic":
                validate_anthropic(rendered.system, rendered.messages, waiting_at_end=True)
            else:
                validate_openai(rendered.messages, waiting_at_end=True)


@settings(max_examples=30)
@given(transcript=st.booleans().flatmap(lambda reused: openai_transcripts(unique=True, reused_ids=reused)))
def test_import_then_render_gives_the_transcript_back_when_nothing_is_pruned(store, transcript):
    """Also where every message numbers its calls from ``call_0``: each result goes out after its own call."""
    complete = _complete(transcript)
    system, messages = anthropic_from_openai(complete)
    complete = [  # a provider's reasoning field on an assistant message (DeepSeek's, say) is kept as it came
        {**m, "reasoning_content": f"step {n}"} if m["role"] == "assistant" and n % 2 else m
        for n, m in enumerate(complete)
    ]
    session = f"r{next(_names)}"
    store.append(session, from_openai(complete))
    assert all(m.verdict == "kept" for m in store.messages(session))
    assert store.render(session, "openai").messages == complete
    store.append(session, from_openai(complete))  # importing again is a no-op
    assert len(store.messages(session)) == len(complete)

    messages = _with_thinking(messages)
    session = f"r{next(_names)}"
    store.append(session, from_anthropic(messages, system))
    rendered = store.render(session, "anthropic")
    assert (rendered.system, rendered.messages) == (system, messages)


def test_anthropic_thinking_stays_while_its_message_has_text_and_leads_the_merged_turn(store):
    """A call superseded out of `[thinking, text, tool_use]`: the thinking stays with the text, so the assistant
    turn it merges into still starts with thinking, as the API requires of the last one."""

    def looked(n: int, words: str) -> list[dict]:
        thinking = {"type": "thinking", "thinking": f"Plan {n}.", "signature": f"sig-{n}"}
        use = {"type": "tool_use", "id": f"t{n}", "name": "ls", "input": {"path": "/data"}}
        return [
            {"role": "assistant", "content": [thinking, {"type": "text", "text": words}, use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "a.csv"}]},
        ]

    transcript = [{"role": "user", "content": "What is in /data?"}, *looked(1, "Let me look."), *looked(2, "Again.")]
    session = f"k{next(_names)}"
    store.append(session, from_anthropic(transcript))
    sent = store.render(session, "anthropic").messages
    first, second = transcript[1]["content"], transcript[3]["content"]
    assert sent[1] == {"role": "assistant", "content": [first[0], first[1], *second]}  # t1 superseded by t2
    validate_anthropic(None, sent)


def _with_thinking(messages: list[dict]) -> list[dict]:
    """Each assistant message that makes calls led by its reasoning, as extended thinking records it:
    a thinking block with its signature, and every other time a redacted one after it."""
    out = []
    for n, m in enumerate(messages):
        blocks = m["content"] if isinstance(m["content"], list) else []
        if m["role"] == "assistant" and any(b["type"] == "tool_use" for b in blocks):
            reasoning = [{"type": "thinking", "thinking": f"Plan {n}.", "signature": f"sig-{n}"}]
            reasoning += [{"type": "redacted_thinking", "data": f"opaque-{n}"}] * (n % 2)
            m = {**m, "content": [*reasoning, *blocks]}
        out.append(m)
    return out


def _complete(transcript: list[dict]) -> list[dict]:
    """The transcript without abandoned calls (no result, and the conversation went on: they are not sent)."""
    answered = {m["tool_call_id"] for m in transcript if m["role"] == "tool"}
    last_other = max(i for i, m in enumerate(transcript) if m["role"] != "tool" and not m.get("tool_calls"))
    out = []
    for i, m in enumerate(transcript):
        calls = m.get("tool_calls")
        if calls and i < last_other and any(c["id"] not in answered for c in calls):
            kept = [c for c in calls if c["id"] in answered]
            m = {**m, "tool_calls": kept} if kept else {k: v for k, v in m.items() if k != "tool_calls"}
            if not kept and not m.get("content"):
                continue
        out.append(m)
    return out


def test_a_superseded_result_loses_its_call_or_gets_a_placeholder(store):
    call = lambda i: {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": '{"p": 1}'}}  # noqa: E731
    transcript = [
        {"role": "user", "content": "List."},
        {"role": "assistant", "content": "Listing.", "tool_calls": [call(1)]},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "user", "content": "Again."},
        {"role": "assistant", "content": None, "tool_calls": [call(2)]},
        {"role": "tool", "tool_call_id": "c2", "content": "a b"},
    ]
    store.append("s", from_openai(transcript))
    omitted = store.render("s", "openai")
    assert omitted.messages == [transcript[0], {"role": "assistant", "content": "Listing."}, *transcript[3:]]
    assert omitted.report.calls_removed == 1 and omitted.report.placeholders == 0
    kept = store.render("s", "openai", dropped="placeholder")
    assert kept.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": kept.messages[2]["content"]}
    assert "superseded" in kept.messages[2]["content"] and kept.report.placeholders == 1
    validate_openai(kept.messages)
    text = store.render("s", "text").text
    assert "assistant called ls" in text and "tool result: a b" in text


def test_a_live_result_keeps_its_call_when_the_call_message_is_pruned(store):
    """An assistant message pruned by a TTL still sends the call of a result that is live."""
    transcript = [
        {"role": "user", "content": "Fetch."},
        {
            "role": "assistant",
            "content": "Fetching.",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "data"},
    ]
    ms = from_openai(transcript)
    ms[1] = Message(ms[1].id, "assistant", ms[1].content, 1, expires_after_turn=1, metadata=ms[1].metadata)
    store.append("s", ms)
    store.append("s", Message("later", "user", "Thanks.", 3))
    assert {m.id: m.verdict for m in store.messages("s")}["m1"] == "expired"
    rendered = store.render("s", "openai")
    validate_openai(rendered.messages)
    assert rendered.messages[1] == {"role": "assistant", "content": None, "tool_calls": transcript[1]["tool_calls"]}
    anthropic = store.render("s", "anthropic")
    validate_anthropic(anthropic.system, anthropic.messages)
    assert anthropic.messages[1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "c1", "name": "fetch", "input": {}}],
    }


def test_render_refuses_unknown_options(store):
    store.append("s", Message("a", "user", "hi", 0))
    with pytest.raises(InvalidMessageError, match="format='xml'"):
        store.render("s", "xml")
    with pytest.raises(InvalidMessageError, match="dropped='hide'"):
        store.render("s", "openai", dropped="hide")


FIXTURES = Path(__file__).parent / "fixtures"


def _settings_and_export(result: ToolResult):
    """The settings lookup defines user_settings; the final export depends on it."""
    if result.name == "get_user_settings":
        return ["user_settings"], []
    if result.name == "export":
        return [], ["user_settings"]
    return None


@pytest.mark.parametrize("format", ["openai", "anthropic"])
def test_a_recorded_agent_session_renders_valid_every_turn_and_shrinks(store, format):
    """60 turns of a data agent (tests/fixtures/make_transcripts.py), appended turn by turn."""
    data = json.loads((FIXTURES / f"{format}_agent.json").read_text(encoding="utf-8"))
    options = {"document_tools": {"search_docs"}, "keys_of": _settings_and_export}
    if format == "openai":
        messages = from_openai(data, **options)
    else:
        messages = from_anthropic(data["messages"], data["system"], **options)
    validate = validate_openai if format == "openai" else lambda ms: validate_anthropic(rendered.system, ms)
    for _, turn in itertools.groupby(messages, key=lambda m: m.turn):
        store.append("agent", list(turn))
        rendered = store.render("agent", format)
        validate(rendered.messages)
    report = rendered.report
    assert report.messages_in == len(messages) == 298
    assert 0.50 <= 1 - report.tokens_out / report.tokens_in <= 0.60  # 54.5% when the fixture was written
    assert report.calls_removed == 108  # one per superseded or duplicate result: 77 + 31
    stored = store.messages("agent")
    assert {m.id: m.verdict for m in stored} == prune(messages).verdicts
    listings = [m for m in stored if m.tool_key == 'list_files:{"path":"/data"}']
    assert [m.verdict for m in listings] == ["superseded"] * (len(listings) - 1) + ["kept"]
    by_id = {m.id: m for m in stored}
    assert by_id["call_0"].live and "user_settings" in by_id["call_0"].defines  # the settings the export needs
    assert by_id[messages[-2].id].live  # the export's result
    assert "my preferred format is CSV" in json.dumps(rendered.messages)
