"""A LangChain v1 agent (`create_agent`) whose model sees the thread's pruned history.

No network: the model is scripted. LangGraph's checkpointer keeps the thread's whole state; PruneStoreMiddleware
appends each new message of that state to prunestore and hands the model the
store's prompt instead: stale file listings and their calls pruned, every
remaining call paired with its result. Run it twice: both are on disk and the
thread goes on.

    pip install '.[langchain]' langgraph-checkpoint-sqlite
    python examples/langchain_create_agent.py   # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import json
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

from prunestore import PruneStore
from prunestore.integrations.langchain import LANGCHAIN, PruneStoreMiddleware

FILES = ["sales.csv"]
THREAD = {"configurable": {"thread_id": "files-agent"}}


@tool
def list_files(path: str) -> str:
    """List the files in a folder."""
    return json.dumps(FILES)


@tool
def create_file(name: str) -> str:
    """Create a file."""
    FILES.append(name)
    return f"created {name}"


class ScriptedModel(GenericFakeChatModel):
    """Answers from its script, as a tool-calling model would: list the files, act, answer."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def script(turn: int) -> list[AIMessage]:
    listing = {"name": "list_files", "args": {"path": "/data"}, "id": f"list-{turn}"}
    create = {"name": "create_file", "args": {"name": f"report-{turn}.csv"}, "id": f"create-{turn}"}
    return [
        AIMessage("", tool_calls=[listing]),
        AIMessage("", tool_calls=[create]),
        AIMessage(f"Done: report-{turn}.csv is written."),
    ]


def main() -> None:
    with PruneStore() as store, SqliteSaver.from_conn_string("langgraph-checkpoints.db") as checkpointer:
        turns: list[int] = []
        replies = (reply for turn in iter(turns.pop, None) for reply in script(turn))
        agent = create_agent(
            ScriptedModel(messages=replies),
            tools=[list_files, create_file],
            system_prompt="You manage files.",
            middleware=[PruneStoreMiddleware(store)],
            checkpointer=checkpointer,
        )
        asked = agent.get_state(THREAD).values.get("messages", [])
        start = sum(isinstance(m, HumanMessage) for m in asked)
        for turn in range(start, start + 3):
            turns.append(turn)
            state = agent.invoke({"messages": [HumanMessage(f"Write report {turn}.")]}, THREAD)
            prompt = store.view("files-agent", LANGCHAIN)  # what the model saw last
            print(f"Write report {turn}. the model saw {len(prompt)} of {len(state['messages']) - 1} messages")
        listings = [m for m in prompt if isinstance(m, ToolMessage) and m.tool_call_id.startswith("list")]
        print(f"file listings in the prompt: {len(listings)} (older ones were superseded)")
        print(f"checkpointed: {len(state['messages'])} messages, untouched")
        print(f"verify: {'ok' if store.verify('files-agent').ok else 'MISMATCH'}")


if __name__ == "__main__":
    main()
