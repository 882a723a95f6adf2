"""The recall tool of the histories for code without a framework, through each provider's own SDK client.

Each SDK's HTTP is answered by a script (no network). The caller's tool
loop is the one each provider documents: send the history with the tools,
store the response, run each call, store the results. The price is read
twice; the second reading supersedes the first, which leaves the prompt.
Asked what it was at first, the model calls ``recall``, and the history's
answer, sent back as that call's result, holds the first reading only.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from providers import ScriptedAPI, validate_anthropic, validate_openai
from pydantic import TypeAdapter

from prunestore import AsyncPruneStore
from prunestore.integrations.anthropic_messages import AnthropicHistory
from prunestore.integrations.openai_chat import OpenAIChatHistory
from prunestore.integrations.openai_responses import OpenAIResponsesHistory

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
httpx2 = pytest.importorskip("httpx2")  # the Anthropic SDK's HTTP library

PRICE = {"price": {"item": "lamp"}}
QUESTIONS = ["Price of the lamp?", "And now?", "What was it at first?"]


def readings():
    return iter(["lamp: 240 EUR", "lamp: 255 EUR"])


def run_call(history, name: str, arguments: dict, prices) -> str:
    """The caller's dispatch: its own tool, or the history's recall."""
    if name == "recall":
        return history.recall(arguments["words"])
    assert name == "price" and arguments == {"item": "lamp"}
    return next(prices)


def script(prefix: str, calls, says) -> list[dict]:
    """The model's answers, in a provider's format (`calls(id, name, arguments)`, `says(text)`), calls numbered
    from ``<prefix>1``: the price read twice, then a look back at the first reading."""
    return [
        calls(f"{prefix}1", "price", {"item": "lamp"}),
        says("240."),
        calls(f"{prefix}2", "price", {"item": "lamp"}),
        says("255 now."),
        calls(f"{prefix}3", "recall", {"words": "lamp"}),
        says("It was 240 at first."),
    ]


def assert_recalled(answer: str) -> None:
    assert "lamp: 240 EUR" in answer and "255" not in answer  # out of the prompt only: the superseded reading


# -- Anthropic Messages API ------------------------------------------------------------------------------


def anthropic_reply(*blocks: dict) -> dict:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-test", "content": list(blocks),
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}  # fmt: skip


def anthropic_use(call_id: str, name: str, arguments: dict) -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


ANTHROPIC_SCRIPT = script(
    "t",
    lambda *call: anthropic_reply(anthropic_use(*call)),
    lambda text: anthropic_reply({"type": "text", "text": text}),
)


def test_the_anthropic_history_gives_a_tool_the_sdk_takes_and_answers_it(store):
    history = AnthropicHistory("s", store)
    tool = history.recall_tool()
    assert TypeAdapter(anthropic.types.ToolParam).validate_python(tool) == tool  # no field the SDK does not know
    price_tool = {"name": "price", "description": "A price.", "input_schema": {"type": "object"}}
    model = ScriptedAPI(ANTHROPIC_SCRIPT, httpx2.Response)
    sdk = anthropic.Anthropic(api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(model)))
    prices, answers = readings(), {}
    for question in QUESTIONS:
        step: list[dict] = [{"role": "user", "content": question}]
        while step:
            history.add(step)
            sent = history.messages()
            validate_anthropic(None, sent)
            response = sdk.messages.create(model="claude-test", max_tokens=100, messages=sent, tools=[price_tool, tool])
            assert model.bodies[-1]["tools"][1] == tool
            history.add([response])
            uses = [b for b in response.content if b.type == "tool_use"]
            for use in uses:
                answers[use.id] = run_call(history, use.name, use.input, prices)
            step = [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id, "content": answers[u.id]}]}
                for u in uses
            ]
    assert_recalled(answers["t3"])
    last = json.dumps(model.bodies[-1]["messages"])
    assert "t1" not in last and "lamp: 255 EUR" in last  # the first reading left with its call
    assert answers["t3"] in [b.get("content") for m in model.bodies[-1]["messages"] for b in m["content"]
                             if isinstance(b, dict)]  # fmt: skip
    assert history.recall_tool() is not history.recall_tool() and store.verify().ok


# -- Chat Completions ------------------------------------------------------------------------------------


def completion(message: dict) -> dict:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}  # fmt: skip


def chat_call(call_id: str, name: str, arguments: dict) -> dict:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


CHAT_SCRIPT = script(
    "c", lambda *call: completion(chat_call(*call)), lambda text: completion({"role": "assistant", "content": text})
)


def chat_loop(history, sdk, model, tools) -> dict[str, str]:
    prices, answers = readings(), {}
    for question in QUESTIONS:
        step: list[dict] = [{"role": "user", "content": question}]
        while step:
            history.add(step)
            sent = history.messages()
            validate_openai(sent)
            message = sdk.chat.completions.create(model="m", messages=sent, tools=tools).choices[0].message
            assert model.bodies[-1]["tools"] == tools
            history.add([message.model_dump(exclude_none=True)])
            step = []
            for call in message.tool_calls or []:
                answers[call.id] = run_call(history, call.function.name, json.loads(call.function.arguments), prices)
                step.append({"role": "tool", "tool_call_id": call.id, "content": answers[call.id]})
    return answers


def test_the_chat_completions_history_gives_a_tool_the_sdk_takes_and_answers_it(store):
    history = OpenAIChatHistory("s", store)
    tool = history.recall_tool()
    assert TypeAdapter(openai.types.chat.ChatCompletionToolParam).validate_python(tool) == tool
    price_tool = {"type": "function", "function": {"name": "price", "parameters": {"type": "object"}}}
    model = ScriptedAPI(CHAT_SCRIPT, httpx.Response)
    sdk = openai.OpenAI(api_key="test", http_client=httpx.Client(transport=httpx.MockTransport(model)))
    answers = chat_loop(history, sdk, model, [price_tool, tool])
    assert_recalled(answers["c3"])
    last = model.bodies[-1]["messages"]
    assert [m.get("tool_call_id") for m in last if m["role"] == "tool"] == ["c2", "c3"]
    assert last[-1]["content"] == answers["c3"]
    assert store.verify().ok


# -- Responses API ---------------------------------------------------------------------------------------


def responses_reply(*output: dict) -> dict:
    return {"id": "resp_x", "object": "response", "created_at": 0, "model": "m", "status": "completed",
            "output": list(output), "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}  # fmt: skip


def function_call(call_id: str, name: str, arguments: dict) -> dict:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(arguments)}  # fmt: skip


def said(text: str) -> dict:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": "msg", "role": "assistant", "status": "completed", "content": content}


RESPONSES_SCRIPT = script(
    "r", lambda *call: responses_reply(function_call(*call)), lambda text: responses_reply(said(text))
)


async def responses_loop(history, sdk, model, tools) -> dict[str, str]:
    """The loop on the async store and the SDK's async client: `aadd`, `aitems`, `arecall`."""
    prices, answers = readings(), {}
    for question in QUESTIONS:
        step: list[dict] = [{"role": "user", "content": question}]
        while step:
            await history.aadd(step)
            response = await sdk.responses.create(model="m", input=await history.aitems(), tools=tools)
            assert model.bodies[-1]["tools"] == tools
            await history.aadd(response.output)
            step = []
            for item in response.output:
                if item.type == "function_call":
                    arguments = json.loads(item.arguments)
                    if item.name == "recall":
                        answers[item.call_id] = await history.arecall(arguments["words"])
                    else:
                        answers[item.call_id] = run_call(history, item.name, arguments, prices)
                    step.append(
                        {"type": "function_call_output", "call_id": item.call_id, "output": answers[item.call_id]}
                    )
    return answers


def test_the_responses_history_gives_a_tool_the_sdk_takes_and_answers_it_on_the_async_store(store_url):
    price_tool = {"type": "function", "name": "price", "parameters": {"type": "object"}, "strict": False}
    model = ScriptedAPI(RESPONSES_SCRIPT, httpx.Response)

    async def main():
        async with AsyncPruneStore(store_url) as store:
            history = OpenAIResponsesHistory("s", store)
            tool = history.recall_tool()
            assert TypeAdapter(openai.types.responses.FunctionToolParam).validate_python(tool) == tool
            transport = httpx.MockTransport(model)
            sdk = openai.AsyncOpenAI(api_key="test", http_client=httpx.AsyncClient(transport=transport))
            answers = await responses_loop(history, sdk, model, [price_tool, tool])
            assert (await store.verify()).ok
            return answers, await history.aitems()

    answers, items = asyncio.run(main())
    assert_recalled(answers["r3"])
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert outputs == ["r2", "r3"] and items[-2]["output"] == answers["r3"]


def test_a_recall_with_no_words_or_before_the_first_message_is_answered_not_raised(store):
    for history in (AnthropicHistory("s", store), OpenAIChatHistory("s", store), OpenAIResponsesHistory("s", store)):
        assert history.recall("lamp") == "Nothing earlier in this conversation matches."  # no session yet
    history = OpenAIChatHistory("s", store)
    history.add([{"role": "user", "content": "hello"}])
    assert "No words to look for" in history.recall("  ")
    assert "No words to look for" in asyncio.run(history.arecall(""))
    assert [m.content for m in store.messages("s")] == ["hello"]  # nothing stored by a look-up
