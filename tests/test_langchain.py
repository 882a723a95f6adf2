"""PrunedChatMessageHistory against the real langchain-core: pruned, provider-valid history both ways."""

from __future__ import annotations

import asyncio
import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, convert_to_openai_messages
from providers import validate_openai

from prunestore import AsyncPruneStore
from prunestore.formats import ToolResult
from prunestore.integrations.langchain import PrunedChatMessageHistory


def _call(call_id: str, name: str = "ls", **args) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args or {"path": "/data"}, "id": call_id}])


def _turns():
    return [
        [SystemMessage("You are a data assistant."), HumanMessage("My preferred format is CSV.")],
        [HumanMessage("List the files."), _call("c1"), ToolMessage("a.csv", tool_call_id="c1"), AIMessage("One file.")],
        [HumanMessage("Settings?"), _call("c2", "get_user_settings", user="me")],
        [ToolMessage('{"format": "csv"}', tool_call_id="c2")],
        [HumanMessage("And now?"), _call("c3"), ToolMessage("a.csv b.csv", tool_call_id="c3"), AIMessage("Two.")],
    ]


def _settings(result: ToolResult):
    return (["user_settings"], []) if result.name == "get_user_settings" else None


def test_history_drops_a_superseded_result_with_its_call(store):
    history = PrunedChatMessageHistory("chat", store, keys_of=_settings)
    assert history.messages == []
    for turn in _turns():
        history.add_messages(turn)
        validate_openai(convert_to_openai_messages(history.messages))
    messages = history.messages
    kinds = [type(m).__name__ for m in messages]
    assert kinds == [
        "SystemMessage",
        "HumanMessage",
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert "c1" not in json.dumps(convert_to_openai_messages(messages))  # the stale listing and its call
    assert [m.tool_calls[0]["id"] for m in messages if isinstance(m, AIMessage) and m.tool_calls] == ["c2", "c3"]
    assert {m.id: m.tool_key for m in store.messages("chat")}["c3"] == 'ls:{"path":"/data"}'
    assert "user_settings" in {m.id: m for m in store.messages("chat")}["c2"].defines
    assert store.verify().ok


def test_a_second_history_object_continues_the_same_session(store):
    first = PrunedChatMessageHistory("chat", store)
    for turn in _turns()[:2]:
        first.add_messages(turn)
    second = PrunedChatMessageHistory("chat", store)  # a new process, say
    second.add_messages(
        [HumanMessage("Again?"), _call("c9"), ToolMessage("a.csv", tool_call_id="c9"), HumanMessage("More?")]
    )
    stored = {m.id: m for m in store.messages("chat")}
    assert stored["c1"].verdict == "superseded"  # the call made before was found
    assert stored["c9"].turn == 3 and store.messages("chat")[-1].turn == 4
    first.add_messages([HumanMessage("Thanks.")])  # its turn (2) is stale: it rereads the session and goes on
    assert store.messages("chat")[-1].turn == 5
    first.clear()
    assert second.messages == [] and store.sessions() == []


def test_async_history_on_the_async_store(store_url):
    async def main() -> None:
        async with AsyncPruneStore(store_url) as store:
            history = PrunedChatMessageHistory("chat", store)
            for turn in _turns():
                await history.aadd_messages(turn)
            messages = await history.aget_messages()
            validate_openai(convert_to_openai_messages(messages))
            assert len(messages) == 11
            with pytest.raises(TypeError, match="AsyncPruneStore"):
                history.messages  # noqa: B018
            await history.aclear()
            assert await history.aget_messages() == []

    asyncio.run(main())
