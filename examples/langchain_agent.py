"""A LangChain tool-calling loop whose history lives in prunestore (no network: the model is scripted).

Each turn the model sees `history.messages`: the live history, with stale
tool results and their calls pruned and every remaining call paired with its
result. Run it twice: the session is on disk and goes on.

    pip install '.[langchain]'
    python examples/langchain_agent.py        # PRUNESTORE_URL, else sqlite:///prunestore.db
"""

from __future__ import annotations

import json

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from prunestore import PruneStore
from prunestore.integrations.langchain import PrunedChatMessageHistory

FILES = ["sales.csv"]


def run_tool(call: dict) -> str:
    if call["name"] == "list_files":
        return json.dumps(FILES)
    FILES.append(call["args"]["name"])
    return f"created {call['args']['name']}"


def scripted_model(turn: int) -> FakeMessagesListChatModel:
    """What a model would answer: list the files, act, answer."""
    listing = {"name": "list_files", "args": {"path": "/data"}, "id": f"list-{turn}"}
    create = {"name": "create_file", "args": {"name": f"report-{turn}.csv"}, "id": f"create-{turn}"}
    return FakeMessagesListChatModel(
        responses=[
            AIMessage("", tool_calls=[listing]),
            AIMessage("", tool_calls=[create]),
            AIMessage(f"Done: report-{turn}.csv is written."),
        ]
    )


def main() -> None:
    with PruneStore() as store:
        history = PrunedChatMessageHistory("langchain-demo", store)
        if not history.messages:
            history.add_messages([SystemMessage("You manage files."), HumanMessage("I want reports as CSV.")])
        start = len(store.messages("langchain-demo"))
        for turn in range(start, start + 3):
            question = f"Write report {turn}."
            history.add_user_message(question)
            model = scripted_model(turn)
            while True:
                reply = model.invoke(history.messages)
                history.add_message(reply)
                if not reply.tool_calls:
                    break
                for call in reply.tool_calls:
                    history.add_message(ToolMessage(run_tool(call), tool_call_id=call["id"]))
            seen = history.messages
            print(f"{question} the model sees {len(seen)} of {len(store.messages('langchain-demo'))} messages")
        listings = [m for m in history.messages if isinstance(m, ToolMessage) and m.tool_call_id.startswith("list")]
        print(f"file listings in the prompt: {len(listings)} (older ones were superseded)")
        print(f"verify: {'ok' if store.verify('langchain-demo').ok else 'MISMATCH'}")


if __name__ == "__main__":
    main()
