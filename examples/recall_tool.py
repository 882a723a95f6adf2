"""An agent that looks back: a LangChain v1 agent with prunestore's recall tool.

No network: the model is scripted. The agent checks a price twice; the
second reading supersedes the first, so the first leaves the model's
prompt. Asked what the price was at first, the model calls `recall`, which
finds the superseded reading among the messages out of the prompt and
returns it as the call's result. Each run starts the thread afresh.

    pip install '.[langchain]'
    python examples/recall_tool.py   # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import itertools
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from prunestore import PruneStore
from prunestore.integrations.langchain import LANGCHAIN, PruneStoreMiddleware

PRICES = itertools.count(240, 15)


@tool
def check_price(item: str) -> str:
    """The current price of an item."""
    return f"price of {item}: {next(PRICES)} EUR"


class ScriptedModel(GenericFakeChatModel):
    """Answers from its script, as a tool-calling model would."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def script() -> list[AIMessage]:
    check = {"name": "check_price", "args": {"item": "lamp"}}
    look_back = {"name": "recall", "args": {"words": "price of lamp"}, "id": "recall-1"}
    return [
        AIMessage("", tool_calls=[{**check, "id": "check-1"}]),
        AIMessage("", tool_calls=[{**check, "id": "check-2"}]),
        AIMessage("The price changed; let me look at the first reading.", tool_calls=[look_back]),
        AIMessage("It was lower at first."),
    ]


def main() -> None:
    thread = {"configurable": {"thread_id": "prices"}}
    with PruneStore() as store:
        if "prices" in store.sessions(prefix="prices"):
            store.delete_session("prices")
        agent = create_agent(
            ScriptedModel(messages=iter(script())),
            tools=[check_price],
            system_prompt="You watch prices.",
            middleware=[PruneStoreMiddleware(store, recall=True)],
            checkpointer=InMemorySaver(),
        )
        state = agent.invoke({"messages": [HumanMessage("Check the lamp twice, then compare.")]}, thread)
        recalled = next(m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == "recall")
        print(f"recall returned:\n{recalled.content}")
        prompt = store.view("prices", LANGCHAIN)
        readings = [m.content for m in prompt if isinstance(m, ToolMessage) and m.name == "check_price"]
        print(f"price readings in the prompt: {readings}")
        print(f"verify: {'ok' if store.verify('prices').ok else 'MISMATCH'}")


if __name__ == "__main__":
    main()
