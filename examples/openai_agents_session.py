"""An OpenAI Agents SDK agent whose session lives in prunestore (no network: the model is scripted).

Every run, the runner reads the session's items: the live history, where a
directory listing that a later identical call superseded is gone together
with its call. Run it twice: the session is on disk and goes on.

    pip install '.[openai-agents]'    # the Agents SDK and the asyncio drivers
    python examples/openai_agents_session.py   # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import asyncio
import json
import uuid

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from prunestore import AsyncPruneStore
from prunestore.integrations.openai_agents import PruneStoreSession

set_tracing_disabled(True)  # nothing leaves the machine


class ScriptedModel(Model):
    """A stand-in for a real model: lists the files, then answers."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        n = uuid.uuid4().hex[:12]  # a real model's item ids are unique across runs
        already_called = isinstance(input, list) and input and input[-1].get("type") == "function_call_output"
        if not already_called:
            self.sent.append(len(input))
            item = ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call-{n}",
                name="list_files",
                arguments='{"path": "/data"}',
                id=f"fc-{n}",
            )
        else:
            text = ResponseOutputText(
                type="output_text", text=f"There are {input[-1]['output'].count(',') + 1} files.", annotations=[]
            )
            item = ResponseOutputMessage(
                type="message", id=f"msg-{n}", role="assistant", status="completed", content=[text]
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


@function_tool
def list_files(path: str) -> str:
    """List the files under a path."""
    return json.dumps(["orders.csv", "refunds.csv"])


async def main() -> None:
    async with AsyncPruneStore() as store:
        session = PruneStoreSession("agents-demo", store)
        model = ScriptedModel()
        agent = Agent(name="files", instructions="Answer questions about files.", model=model, tools=[list_files])
        for question in ["What files are there?", "And now?", "One more time?"]:
            result = await Runner.run(agent, question, session=session)
            print(f"{question} -> {result.final_output}")
        items = await session.get_items()
        stored = await store.messages("agents-demo")
        calls = sum(1 for i in items if i.get("type") == "function_call")
        print(f"the next run sends {len(items)} of {len(stored)} items; {calls} file listing call with its output")
        print(f"verify: {'ok' if (await store.verify('agents-demo')).ok else 'MISMATCH'}")


if __name__ == "__main__":
    asyncio.run(main())
