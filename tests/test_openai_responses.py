"""OpenAIResponsesHistory with the OpenAI SDK's own client, its HTTP answered by a script (no network).

Each model call goes through ``client.responses.create``; the test checks
the body the SDK sent: it is the history's items, every call with its
output and every reasoning item with the item it preceded, and where nothing
was pruned it is what the caller's own list of items would have sent.
"""

from __future__ import annotations

import asyncio
import copy
import json

import pytest
from providers import ScriptedAPI

from prunestore import AsyncPruneStore, Delta, InvalidMessageError, PruneStore
from prunestore.integrations.openai_responses import OpenAIResponsesHistory

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")


def reasoning(item_id: str) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": f"enc-{item_id}"}


def call(call_id: str, path: str) -> dict:
    arguments = json.dumps({"path": path})
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": "ls", "arguments": arguments}


def say(text: str, item_id: str) -> dict:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": item_id, "role": "assistant", "status": "completed", "content": content}


def response(*output: dict) -> dict:
    return {"id": "resp_x", "object": "response", "created_at": 0, "model": "m", "status": "completed",
            "output": list(output), "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}  # fmt: skip


SCRIPT = [  # the model's answers, in order: the third turn lists /a again, so the first output is superseded
    response(reasoning("rs_1"), call("c1", "/a")),
    response(say("One file in /a.", "msg_1")),
    response(reasoning("rs_2"), call("c2", "/b"), call("c3", "/c")),
    response(say("Two more.", "msg_2")),
    response(reasoning("rs_3"), call("c4", "/a")),
    response(say("Still one file.", "msg_3")),
]


def scripted(script: list[dict]) -> ScriptedAPI:
    return ScriptedAPI(script, httpx.Response)


def assert_sendable(items: list[dict]) -> None:
    """What the API takes: each output after its call, each call answered, each reasoning item followed by the
    item it preceded (a call or a message)."""
    waiting: set[str] = set()
    for n, item in enumerate(items):
        if item.get("type") == "function_call":
            waiting.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in waiting, item
            waiting.remove(item["call_id"])
        elif item.get("type") == "reasoning":
            after = items[n + 1] if n + 1 < len(items) else {}
            assert after.get("type") in ("function_call", "message"), (item, after)
    assert not waiting, waiting


def converse(history: OpenAIResponsesHistory, model: ScriptedAPI, questions: list[str]) -> list[dict]:
    """The tool loop a caller writes; returns the list of items it would keep without prunestore."""
    sdk = openai.OpenAI(api_key="test", http_client=httpx.Client(transport=httpx.MockTransport(model)))
    plain: list[dict] = []
    for question in questions:
        step: list[dict] = [{"role": "user", "content": question}]
        while step:
            history.add(step)
            plain.extend(step)
            sent = history.items()
            answer = sdk.responses.create(model="m", input=sent, store=False, include=["reasoning.encrypted_content"])
            assert model.bodies[-1]["input"] == sent  # what went over the wire is the history's input
            assert_sendable(sent)
            history.add(answer.output)  # the SDK's output items, as create returns them
            plain.extend(o.model_dump(mode="json", exclude_unset=True) for o in answer.output)
            step = [
                {"type": "function_call_output", "call_id": o.call_id, "output": f"x.csv in {json.loads(o.arguments)}"}
                for o in answer.output
                if o.type == "function_call"
            ]
    return plain


def test_with_nothing_pruned_the_sdk_sends_what_the_callers_list_holds(store):
    model = scripted(SCRIPT[:4])
    history = OpenAIResponsesHistory("s", store)
    plain = converse(history, model, ["What is in /a?", "And /b and /c?"])
    for body, upto in zip(model.bodies, (1, 4, 6, 11), strict=True):
        assert body["input"] == plain[:upto]  # field by field, reasoning and its encrypted content too
    assert history.items() == plain  # imported and given back exactly
    assert store.verify().ok


def test_a_superseded_output_goes_with_its_call_and_the_reasoning_before_it(store):
    model = scripted(SCRIPT)
    history = OpenAIResponsesHistory("s", store)
    plain = converse(history, model, ["What is in /a?", "And /b and /c?", "And /a again?"])
    last = model.bodies[-1]["input"]
    ids = [i.get("id") or i.get("call_id") for i in last if "role" not in i or i.get("type") == "message"]
    assert "rs_1" not in ids and "fc_c1" not in ids and "c1" not in ids  # c1 superseded by c4: all three went
    assert [i for i in last if i.get("id") == "rs_2"] == [reasoning("rs_2")]  # its calls stay, it stays
    assert last == [i for i in plain if i.get("id") not in ("rs_1", "fc_c1") and i.get("call_id") != "c1"][:-1]
    with PruneStore(store.url) as other:  # another store on the session (another process) sends the same
        assert OpenAIResponsesHistory("s", other).items() == history.items()
    assert store.verify().ok


def test_the_items_are_read_only_and_a_deep_copy_is_not(store):
    history = OpenAIResponsesHistory("s", store)
    history.add([{"role": "user", "content": "Hi"}, {"type": "web_search_call", "id": "ws_1", "status": "completed"}])
    items = history.items()
    assert items == [
        {"role": "user", "content": "Hi"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    with pytest.raises(TypeError, match="read-only"):
        items[0]["content"] = "changed"
    mine = copy.deepcopy(items)
    mine[0]["content"] = "changed"
    assert history.items() == items


def test_bad_items_are_refused_by_name(store):
    history = OpenAIResponsesHistory("s", store)
    with pytest.raises(InvalidMessageError, match="items\\[1\\]"):
        history.add([{"role": "user", "content": "x"}, {"content": "no type, no role"}])
    with pytest.raises(InvalidMessageError, match="items="):
        history.add({"role": "user", "content": "x"})
    assert history.items() == [] and store.sessions() == [] and history.add([]) == Delta()
    assert history.add([{"role": "user", "content": "x"}]).appended == 1  # each add gives its append's Delta


def test_on_the_async_store_and_the_async_client(store_url):
    async def main() -> None:
        model = scripted(SCRIPT[:2])
        sdk = openai.AsyncOpenAI(api_key="test", http_client=httpx.AsyncClient(transport=httpx.MockTransport(model)))
        async with AsyncPruneStore(store_url) as store:
            history = OpenAIResponsesHistory("s", store)
            added = await history.aadd([{"role": "user", "content": "What is in /a?"}])
            assert (added.appended, len(added.live_added), await history.aadd([])) == (1, 1, Delta())
            first = await sdk.responses.create(model="m", input=await history.aitems())
            await history.aadd(first.output)
            await history.aadd([{"type": "function_call_output", "call_id": "c1", "output": "x.csv"}])
            await sdk.responses.create(model="m", input=await history.aitems())
            assert [i.get("type", "message") for i in model.bodies[-1]["input"]] == [
                "message",
                "reasoning",
                "function_call",
                "function_call_output",
            ]
            with pytest.raises(TypeError, match="aadd / aitems"):
                history.items()

    asyncio.run(main())
