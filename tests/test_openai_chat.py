"""OpenAIChatHistory: Chat Completions messages in, the pruned prompt out, kept up to date from each append."""

from __future__ import annotations

import asyncio

import pytest
from helpers import cached_prompt_equals_cold
from hypothesis import given, settings
from hypothesis import strategies as st
from providers import validate_openai

from prunestore import AsyncPruneStore, Delta, InvalidMessageError, Policy
from prunestore.integrations.openai_chat import OpenAIChatHistory


def call(call_id: str, path: str = "/data") -> dict:
    function = {"name": "ls", "arguments": f'{{"path": "{path}"}}'}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def result(call_id: str, text: str = "a.csv") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def test_messages_come_back_as_given_where_nothing_was_pruned(store):
    history = OpenAIChatHistory("s", store)
    given = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Look"}, {"type": "image_url", "image_url": {"url": "x"}}],
        },
        call("c1"),
        result("c1"),
        {"role": "assistant", "content": "", "refusal": None},
        {"role": "user", "content": "And?", "name": "ann"},
        call("c2", "/tmp"),  # waiting for its result
    ]
    history.add(given[:3])
    history.add(given[3:])
    assert history.messages() == given  # the empty answer too: nothing is dropped for being empty


def test_a_superseded_result_goes_with_its_call(store):
    history = OpenAIChatHistory("s", store)
    history.add([{"role": "user", "content": "ls"}, call("c1"), result("c1"), {"role": "assistant", "content": "1"}])
    history.add([{"role": "user", "content": "again"}, call("c2"), result("c2", "a.csv b.csv")])
    sent = history.messages()
    assert [m.get("tool_call_id") for m in sent] == [None, None, None, None, "c2"]
    validate_openai(sent)
    with pytest.raises(InvalidMessageError, match="messages\\[0\\]"):
        history.add([{"role": "robot", "content": "x"}])


def test_on_the_async_store(store_url):
    async def main() -> list:
        async with AsyncPruneStore(store_url) as store:
            history = OpenAIChatHistory("s", store)
            await asyncio.gather(*(history.aadd([{"role": "user", "content": f"m{n}"}]) for n in range(10)))
            return await history.amessages()

    assert sorted(m["content"] for m in asyncio.run(main())) == sorted(f"m{n}" for n in range(10))


@st.composite
def batches(draw):
    made: list[str] = []
    out = []
    for _ in range(draw(st.integers(1, 12))):
        batch = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["user", "call", "result", "result", "empty"]))
            if kind == "user":
                batch.append({"role": "user", "content": draw(st.sampled_from(["go", "DEFINE:k x", "REF:k y"]))})
            elif kind == "empty":
                batch.append({"role": "assistant", "content": ""})
            elif kind == "call":
                ids = draw(st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, max_size=2, unique=True))
                path = draw(st.sampled_from(["/a", "/b"]))
                calls = [call(i, path)["tool_calls"][0] for i in ids]
                batch.append(
                    {"role": "assistant", "content": draw(st.sampled_from([None, "looking"])), "tool_calls": calls}
                )
                made += ids
            elif made:
                batch.append(result(draw(st.sampled_from(made)), draw(st.sampled_from(["x", "y"]))))
        out.append((draw(st.integers(0, 2)), batch))
        step = draw(st.sampled_from(["none"] * 4 + ["pop", "truncate"]))  # then take some back
        if step == "pop":
            out.append((draw(st.integers(0, 2)), "pop"))
        elif step == "truncate":
            out.append((draw(st.integers(0, 2)), ("truncate", draw(st.integers(1, 3)))))
    return out


@settings(max_examples=40)
@given(script=batches())
def test_the_cached_prompt_equals_a_cold_read(store_url, script):
    cached_prompt_equals_cold(store_url, OpenAIChatHistory, OpenAIChatHistory.add, OpenAIChatHistory.messages, script)


def test_under_a_budget_the_prompt_stays_valid_and_within_it(open_store):
    store = open_store(Policy(budget=150, clear_at_least=50))
    history = OpenAIChatHistory("s", store)
    assert history.add([]) == Delta()
    events, reported = 0, set()
    for turn in range(30):
        delta = history.add(
            [
                {"role": "user", "content": f"question {turn} " * 3},
                call(f"c{turn}", f"/d{turn % 4}"),  # the same listing again every fourth turn: superseded
                result(f"c{turn}", "x.csv " * 10),
                {"role": "assistant", "content": f"answer {turn}"},
            ]
        )
        sent = history.messages()
        validate_openai(sent)  # every result with its call, every call answered
        stats = store.stats("s")
        assert stats.live_tokens <= 150 and not stats.over_budget
        assert [m["content"] for m in sent if m["role"] == "user"][-1] == f"question {turn} " * 3
        assert OpenAIChatHistory("s", store).messages() == sent  # a new object, read cold, agrees
        events = stats.events
        reported |= set(delta.evicted)
    assert events > 1
    evicted = {m.id for m in store.messages("s") if m.verdict == "evicted"}
    assert evicted and evicted <= reported  # each add says what the budget took out of the model's view


def test_the_sdks_own_message_objects_come_back_as_the_sdk_sends_them(store):
    """The OpenAI SDK's tool loop appends ``completion.choices[0].message`` itself; the history takes it too."""
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
    from providers import ScriptedAPI

    def completion(message: dict) -> dict:
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        choice = {"index": 0, "message": {"refusal": None, "annotations": [], **message}, "finish_reason": finish}
        return {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}

    script = [completion(call("c1")), completion({"role": "assistant", "content": "One file."})]
    script += [completion(call("c2")), completion({"role": "assistant", "content": "Two files."})]

    def client(model: ScriptedAPI):
        return openai.OpenAI(api_key="test", http_client=httpx.Client(transport=httpx.MockTransport(model)))

    model, mirror = ScriptedAPI(script, httpx.Response), ScriptedAPI(script, httpx.Response)
    sdk, plain_sdk = client(model), client(mirror)
    history, plain = OpenAIChatHistory("s", store), []  # the caller's own list, kept as the SDK's docs keep it
    for question in ("What is in /data?", "And now?"):
        step: list = [{"role": "user", "content": question}]
        while step:
            history.add(step)
            plain.extend(step)
            message = sdk.chat.completions.create(model="m", messages=history.messages()).choices[0].message
            plain_sdk.chat.completions.create(model="m", messages=plain)  # the caller's list as the SDK sends it
            if question == "What is in /data?":  # nothing pruned yet: the same messages went out
                assert model.bodies[-1]["messages"] == mirror.bodies[-1]["messages"]
            step = [message] + [result(c.id) for c in message.tool_calls or []]
            if not message.tool_calls:
                history.add(step)
                plain.extend(step)
                step = []
    sent = history.messages()
    validate_openai(sent)
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["c2"]  # c1 was superseded, its call went
    assert sent[-1] == {"content": "Two files.", "refusal": None, "role": "assistant", "annotations": []}
    assert len(sent) == len(plain) - 2 and store.verify().ok  # all else as the caller's list holds it
