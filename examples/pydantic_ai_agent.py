"""A Pydantic AI agent whose model is sent the conversation's pruned history (no network: the model is scripted).

PruneStoreHistory is a capability: before each model request it stores the
run's new messages in prunestore and sends the model the session's prompt,
with stale file listings and their calls pruned and every remaining call
paired with its return. The conversation lives in the store: run it twice
and it goes on.

    pip install '.[pydantic-ai]'
    python examples/pydantic_ai_agent.py   # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import asyncio
import json

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from prunestore import PruneStore, SessionNotFoundError
from prunestore.integrations.pydantic_ai import PruneStoreHistory

FILES = ["sales.csv"]
CONVERSATION = "files-agent"


class ScriptedModel:
    """What a model would answer: list the files, create the report, answer. Remembers what it was sent."""

    def __init__(self) -> None:
        self.turn = 0
        self.sent: list[ModelMessage] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.sent = messages
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(
                parts=[ToolCallPart("list_files", {"path": "/data"}, tool_call_id=f"list-{self.turn}")]
            )
        if returns[0].tool_name == "list_files":
            call = ToolCallPart("create_file", {"name": f"report-{self.turn}.csv"}, tool_call_id=f"create-{self.turn}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"Done: report-{self.turn}.csv is written.")])


async def main() -> None:
    with PruneStore() as store:
        model = ScriptedModel()
        agent = Agent(FunctionModel(model), instructions="You manage files.", capabilities=[PruneStoreHistory(store)])

        @agent.tool_plain
        def list_files(path: str) -> str:
            """List the files in a folder."""
            return json.dumps(FILES)

        @agent.tool_plain
        def create_file(name: str) -> str:
            """Create a file."""
            FILES.append(name)
            return f"created {name}"

        try:
            start = sum(m.role == "user" for m in store.messages(CONVERSATION))  # the turns so far
        except SessionNotFoundError:
            start = 0
        for turn in range(start, start + 3):
            model.turn = turn
            await agent.run(f"Write report {turn}.", conversation_id=CONVERSATION)
            stored = len(store.messages(CONVERSATION))
            print(f"Write report {turn}. the model saw {len(model.sent)} messages; stored: {stored}")
        listings = [
            p for m in model.sent for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == "list_files"
        ]
        print(f"file listings in the prompt: {len(listings)} (older ones were superseded)")
        print(f"verify: {'ok' if store.verify(CONVERSATION).ok else 'MISMATCH'}")


if __name__ == "__main__":
    asyncio.run(main())
