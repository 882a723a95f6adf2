"""PruneStoreSession against the real OpenAI Agents SDK, with a scripted model (no network)."""

from __future__ import annotations

import asyncio
import itertools
import json

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from prunestore import AsyncPruneStore, PruneStore
from prunestore.integrations.openai_agents import PruneStoreSession

set_tracing_disabled(True)
_ids = itertools.count()


class ScriptedModel(Model):
    """Answers with the next scripted output item, and remembers what it was sent."""

    def __init__(self, replies: list) -> None:
        self.replies = list(replies)
        self.inputs: list = []

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=[self.replies.pop(0)], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def call(call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=call_id,
        name="list_files",
        arguments=json.dumps({"path": "/data"}),
        id=f"fc_{call_id}",
        status="completed",
    )


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        type="message",
        id=f"msg_{next(_ids)}",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


@function_tool
def list_files(path: str) -> str:
    """List the files under a path."""
    return "a.csv b.csv"


def assert_paired(items: list[dict]) -> None:
    """Every call is followed by its output, and every output follows its call."""
    open_calls: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            open_calls.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in open_calls, item
            open_calls.remove(item["call_id"])
    assert not open_calls


def _calls_sent(model_input) -> list[str]:
    return [i["call_id"] for i in model_input if isinstance(i, dict) and i.get("type") == "function_call"]


def test_runner_sees_pruned_history_with_calls_paired(store_url):
    async def main() -> None:
        async with AsyncPruneStore(store_url) as store:
            session = PruneStoreSession("agent", store)
            model = ScriptedModel([call("c1"), say("Two files."), call("c2"), say("Still two."), say("Bye.")])
            agent = Agent(name="files", instructions="You list files.", model=model, tools=[list_files])
            first = await Runner.run(agent, "List the files.", session=session)
            assert first.final_output == "Two files."
            await Runner.run(agent, "And now?", session=session)
            await Runner.run(agent, "Thanks.", session=session)
            assert _calls_sent(model.inputs[2]) == ["c1"]  # run 2 begins with c1 still live
            assert _calls_sent(model.inputs[4]) == ["c2"]  # run 3: c1's output was superseded, its call went too
            items = await session.get_items()
            assert_paired(items)
            assert [i.get("call_id") for i in items if "call_id" in i] == ["c2", "c2"]
            stored = await store.messages("agent")
            assert {m.id: m.verdict for m in stored}["output-c1"] == "superseded"
            assert (await store.verify()).ok

    asyncio.run(main())


def test_unknown_items_pop_limit_and_clear(store_url):
    async def main() -> None:
        with PruneStore(store_url) as store:  # the blocking store works too (in a worker thread)
            session = PruneStoreSession("s", store)
            reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"}
            await session.add_items([{"role": "user", "content": "Hi"}, reasoning])
            await session.add_items(
                [
                    call("c1").model_dump(exclude_unset=True),
                    {"type": "function_call_output", "call_id": "c1", "output": "a.csv"},
                    {"role": "assistant", "content": "One file."},
                ]
            )
            items = await session.get_items()
            assert items[1] == reasoning  # stored and given back untouched
            assert_paired(items)
            assert await session.get_items(limit=2) == items[-1:]  # a cut never starts with an orphan output
            assert await session.pop_item() == {"role": "assistant", "content": "One file."}
            assert len(await session.get_items()) == 4
            assert store.messages("s")[-1].id == "output-c1" and store.verify().ok
            await session.clear_session()
            assert await session.get_items() == [] and await session.pop_item() is None

    asyncio.run(main())
