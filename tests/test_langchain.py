"""PrunedChatMessageHistory against LangChain's own behaviour, with the real langchain-core.

Where nothing is pruned, every step must give what InMemoryChatMessageHistory
gives (the behaviours of LangChain's chat-history and RunnableWithMessageHistory
tests, re-implemented here); where something is pruned, the history must stay
provider-valid. Each test runs on both backends and with both store classes.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from helpers import cached_prompt_equals_cold
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.history import RunnableWithMessageHistory
from providers import validate_openai

from prunestore import AsyncPruneStore, PruneStore
from prunestore.formats import ToolResult
from prunestore.integrations.langchain import PrunedChatMessageHistory


class Histories:
    """History objects over one store, driven the same way whether the store is blocking or asyncio."""

    def __init__(self, url: str, api: str) -> None:
        self.api = api
        self.loop = asyncio.new_event_loop()
        self.store = AsyncPruneStore(url) if api == "async" else PruneStore(url)

    def new(self, session: str = "chat", **options) -> Driven:
        return Driven(self, PrunedChatMessageHistory(session, self.store, **options))

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def stored(self, session: str = "chat"):
        """The stored messages of the session, with their verdicts, turns and keys."""
        if self.api == "async":
            return self.run(self.store.messages(session))
        return self.store.messages(session)

    def close(self) -> None:
        if self.api == "async":
            self.run(self.store.close())
        else:
            self.store.close()
        self.loop.close()


class Driven:
    def __init__(self, histories: Histories, history: PrunedChatMessageHistory) -> None:
        self.histories, self.history = histories, history

    def add(self, messages) -> None:
        if self.histories.api == "async":
            self.histories.run(self.history.aadd_messages(messages))
        else:
            self.history.add_messages(messages)

    @property
    def messages(self):
        if self.histories.api == "async":
            return self.histories.run(self.history.aget_messages())
        return self.history.messages

    def clear(self) -> None:
        if self.histories.api == "async":
            self.histories.run(self.history.aclear())
        else:
            self.history.clear()


@pytest.fixture(params=["sync", "async"])
def histories(store_url, request):
    made = Histories(store_url, request.param)
    yield made
    made.close()


def call(call_id: str, name: str = "ls", **args) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args or {"path": "/data"}, "id": call_id}])


def same_as_in_memory(batches, histories: Histories, **options) -> None:
    """Add each batch to a prunestore history and to InMemoryChatMessageHistory; after each, both agree."""
    ours, theirs = histories.new(**options), InMemoryChatMessageHistory()
    for batch in batches:
        ours.add(batch)
        theirs.add_messages(batch)
        assert ours.messages == theirs.messages
        assert [type(m) for m in ours.messages] == [type(m) for m in theirs.messages]


# -- what comes back when nothing is pruned -------------------------------------------


FIELDS = [
    [SystemMessage("You are terse.", id="sys-1"), HumanMessage("Hi there", id="h-1", name="ann")],
    [
        AIMessage(
            "Hello!",
            id="run-1",
            additional_kwargs={"refusal": None, "custom": [1, 2]},
            response_metadata={"model_name": "gpt-x", "finish_reason": "stop"},
            usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
        )
    ],
    [HumanMessage([{"type": "text", "text": "Look:"}, {"type": "text", "text": "two blocks"}])],
    [HumanMessage([{"type": "image", "source_type": "url", "url": "https://example.com/a.png"}])],
    [
        AIMessage(
            [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "/data"}},
            ],
            tool_calls=[{"name": "ls", "args": {"path": "/data"}, "id": "toolu_1"}],
        )
    ],
    [ToolMessage("boom", tool_call_id="toolu_1", status="error", artifact={"rows": [1, 2]}, id="t-1")],
    [AIMessage(""), HumanMessage("still there?"), ChatMessage(content="a note", role="critic")],
]


def test_every_field_comes_back(histories):
    same_as_in_memory(FIELDS, histories)


def test_the_helper_methods_and_clear(histories):
    ours, theirs = histories.new(), InMemoryChatMessageHistory()
    for history in (ours.history, theirs):
        if histories.api == "sync":
            history.add_user_message("hello")
            history.add_ai_message("hi")
            history.add_message(HumanMessage("and one more"))
        else:
            histories.run(history.aadd_messages([HumanMessage("hello"), AIMessage("hi"), HumanMessage("and one more")]))
    assert ours.messages == theirs.messages
    if histories.api == "sync":
        assert str(ours.history) == str(theirs)
    ours.clear()
    assert ours.messages == []
    ours.add([HumanMessage("after clear")])
    assert [m.content for m in ours.messages] == ["after clear"]
    assert [(m.content, m.turn) for m in histories.stored()] == [("after clear", 1)]


def test_the_same_message_object_added_twice_is_stored_twice(histories):
    """As InMemoryChatMessageHistory does: FakeMessagesListChatModel hands out messages with the same id."""
    answer = AIMessage("same answer", id="fixed-id")
    same_as_in_memory([[HumanMessage("q1"), answer], [HumanMessage("q2"), answer]], histories)


def test_an_empty_ai_message_is_not_dropped(histories):
    same_as_in_memory([[HumanMessage("a")], [AIMessage("")], [HumanMessage("b")]], histories)


def test_a_call_waiting_for_its_result_stays(histories):
    batches = [[HumanMessage("list files"), call("c1")], [ToolMessage("a.csv", tool_call_id="c1")], [AIMessage("one")]]
    same_as_in_memory(batches, histories)


# -- RunnableWithMessageHistory ------------------------------------------------------


def test_runnable_with_message_history_matches_in_memory(histories):
    """A model that calls a tool: its second prompt holds the call and the result, as with the in-memory history."""
    replies = [call("c1"), AIMessage("There is one file."), AIMessage("Bye.")]

    def run(get_history) -> list[list]:
        model = FakeMessagesListChatModel(responses=replies)
        seen: list[list] = []
        original = model._generate

        def record(messages, *args, **kwargs):
            seen.append(list(messages))
            return original(messages, *args, **kwargs)

        object.__setattr__(model, "_generate", record)
        chain = RunnableWithMessageHistory(model, get_history)
        config: RunnableConfig = {"configurable": {"session_id": "chat"}}
        inputs = [[HumanMessage("List the files.")], [ToolMessage("a.csv", tool_call_id="c1")], "Thanks."]
        for value in inputs:
            if histories.api == "async":
                histories.run(chain.ainvoke(value, config))
            else:
                chain.invoke(value, config)
        return seen

    memory = InMemoryChatMessageHistory()
    expected = run(lambda session_id: memory)
    got = run(lambda session_id: histories.new(session_id).history)  # a new history object per turn
    assert got == expected
    assert [type(m).__name__ for m in got[1]] == ["HumanMessage", "AIMessage", "ToolMessage"]


# -- pruning ---------------------------------------------------------------------------


def _settings(result: ToolResult):
    return (["user_settings"], []) if result.name == "get_user_settings" else None


TURNS = [
    [SystemMessage("You are a data assistant."), HumanMessage("My preferred format is CSV.")],
    [HumanMessage("List the files."), call("c1"), ToolMessage("a.csv", tool_call_id="c1"), AIMessage("One file.")],
    [HumanMessage("Settings?"), call("c2", "get_user_settings", user="me")],
    [ToolMessage('{"format": "csv"}', tool_call_id="c2")],
    [HumanMessage("And now?"), call("c3"), ToolMessage("a.csv b.csv", tool_call_id="c3"), AIMessage("Two.")],
]


def test_a_superseded_result_goes_with_its_call(histories):
    history = histories.new(keys_of=_settings)
    assert history.messages == []
    for turn in TURNS:
        history.add(turn)
        validate_openai(convert_to_openai_messages(history.messages), waiting_at_end=True)
    messages = history.messages
    kept = [m for turn in TURNS for m in turn if not (getattr(m, "tool_call_id", None) == "c1")]
    assert messages == [
        m for m in kept if not (isinstance(m, AIMessage) and m.tool_calls and m.tool_calls[0]["id"] == "c1")
    ]
    by_content = {m.content: m for m in histories.stored()}
    assert by_content["a.csv"].verdict == "superseded" and by_content["a.csv b.csv"].tool_key == 'ls:{"path":"/data"}'
    assert "user_settings" in by_content['{"format": "csv"}'].defines


def test_a_superseded_call_leaves_the_rest_of_its_message(histories):
    both = AIMessage(
        "Checking two things.",
        tool_calls=[
            {"name": "ls", "args": {"path": "/data"}, "id": "a1"},
            {"name": "ls", "args": {"path": "/tmp"}, "id": "a2"},
        ],
        additional_kwargs={"tool_calls": [{"id": "a1"}, {"id": "a2"}]},
    )
    history = histories.new()
    history.add([HumanMessage("go"), both, ToolMessage("x", tool_call_id="a1"), ToolMessage("y", tool_call_id="a2")])
    history.add([HumanMessage("again"), call("b1"), ToolMessage("x2", tool_call_id="b1")])
    sent = history.messages
    trimmed = sent[1]
    assert trimmed.content == "Checking two things." and [c["id"] for c in trimmed.tool_calls] == ["a2"]
    assert trimmed.additional_kwargs["tool_calls"] == [{"id": "a2"}]
    assert both.tool_calls[0]["id"] == "a1"  # the message given was not changed
    validate_openai(convert_to_openai_messages(sent))


def test_reasoning_goes_with_the_last_of_its_calls(histories):
    """Thinking blocks (with their signatures) stay while a call of their message is sent, and never alone."""
    thinking = {"type": "thinking", "thinking": "Which folders?", "signature": "sig-1"}
    both = AIMessage(
        [
            thinking,
            *(
                {"type": "tool_use", "id": i, "name": "ls", "input": {"path": p}}
                for i, p in (("a1", "/data"), ("a2", "/tmp"))
            ),
        ],
        tool_calls=[
            {"name": "ls", "args": {"path": "/data"}, "id": "a1"},
            {"name": "ls", "args": {"path": "/tmp"}, "id": "a2"},
        ],
    )
    history = histories.new()
    history.add([HumanMessage("go"), both, ToolMessage("x", tool_call_id="a1"), ToolMessage("y", tool_call_id="a2")])
    history.add([HumanMessage("again"), call("b1"), ToolMessage("x2", tool_call_id="b1")])  # /data again: a1 goes
    kept = history.messages[1]
    assert kept.content[0] == thinking and [b.get("id") for b in kept.content[1:]] == ["a2"]
    history.add([HumanMessage("and tmp"), call("b2", path="/tmp"), ToolMessage("y2", tool_call_id="b2")])  # a2 goes
    assert [m.content for m in history.messages[:2]] == ["go", "again"]  # no message left with thinking alone
    validate_openai(convert_to_openai_messages(history.messages))


# -- several history objects, threads and stores on one session ------------------------------


def test_history_objects_share_the_session_state(histories):
    a, b = histories.new(), histories.new()
    a.add([HumanMessage("List the files.")])
    b.add([call("c1")])
    a.add([ToolMessage("a.csv", tool_call_id="c1")])  # its call was written by the other object
    b.add([HumanMessage("again"), call("c2"), ToolMessage("a.csv", tool_call_id="c2")])
    for n in range(4):
        (a if n % 2 else b).add([HumanMessage(f"message {n}")])
    stored = histories.stored()
    results = [m for m in stored if m.role == "tool_output"]
    assert [m.tool_key for m in results] == ['ls:{"path":"/data"}'] * 2 and results[0].verdict == "superseded"
    assert [m.turn for m in stored if m.role == "user"] == [1, 2, 3, 4, 5, 6]
    a.clear()
    b.add([HumanMessage("a new start")])
    assert [(m.content, m.turn) for m in histories.stored()] == [("a new start", 1)]


@pytest.mark.parametrize("api", ["sync"])
def test_threads_on_one_history_lose_nothing(store_url, api):
    with PruneStore(store_url) as store:
        history = PrunedChatMessageHistory("chat", store)
        threads = [threading.Thread(target=history.add_messages, args=([HumanMessage(f"m{n}")],)) for n in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(m.content for m in history.messages) == sorted(f"m{n}" for n in range(10))
        assert sorted(m.turn for m in store.messages("chat")) == list(range(1, 11))


def test_tasks_and_event_loops_on_one_store_lose_nothing(store_url):
    store = AsyncPruneStore(store_url)
    history = PrunedChatMessageHistory("chat", store)

    async def many(prefix: str) -> None:
        await asyncio.gather(*(history.aadd_messages([HumanMessage(f"{prefix}{n}")]) for n in range(25)))

    asyncio.run(many("a"))
    threads = [threading.Thread(target=asyncio.run, args=(many(p),)) for p in ("b", "c")]  # two loops at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "an event loop hung"

    async def read() -> list:
        try:
            return await history.aget_messages()
        finally:
            await store.close()

    contents = sorted(m.content for m in asyncio.run(read()))
    assert contents == sorted(f"{p}{n}" for p in "abc" for n in range(25))


# -- the cached prompt equals a cold one, whoever writes ---------------------------------------

CALLS = ["c1", "c2", "c3"]


@st.composite
def steps(draw):
    """Batches of LangChain messages: repeated and reused calls, results, plain text, empty answers."""
    made: list[str] = []
    out = []
    for _ in range(draw(st.integers(1, 12))):
        batch = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["human", "ai", "call", "result", "result", "empty"]))
            if kind == "human":
                batch.append(HumanMessage(draw(st.sampled_from(["go", "again", "DEFINE:k note", "REF:k use"]))))
            elif kind == "ai":
                batch.append(AIMessage(draw(st.sampled_from(["ok", "done"]))))
            elif kind == "empty":
                batch.append(AIMessage(""))
            elif kind == "call":
                ids = draw(st.lists(st.sampled_from(CALLS), min_size=1, max_size=2, unique=True))
                path = draw(st.sampled_from(["/a", "/b"]))
                batch.append(AIMessage("", tool_calls=[{"name": "ls", "args": {"path": path}, "id": i} for i in ids]))
                made += ids
            elif made:
                batch.append(ToolMessage(draw(st.sampled_from(["x", "y"])), tool_call_id=draw(st.sampled_from(made))))
        writer = draw(st.integers(0, 2))
        out.append((writer, batch))
    return out


@settings(max_examples=40)
@given(script=steps())
def test_the_cached_prompt_equals_a_cold_read(store_url, script):
    cached_prompt_equals_cold(
        store_url, PrunedChatMessageHistory, PrunedChatMessageHistory.add_messages, lambda h: h.messages, script
    )


def test_messages_written_without_the_adapter_read_as_the_closest_langchain_messages(store):
    from prunestore import Message, from_openai

    store.append("chat", [Message("s", "system", "Be brief.", 0), Message("a", "assistant", "Hi.", 0)])
    store.append("chat", from_openai([{"role": "user", "content": "From a transcript."}], turns=[1]))
    store.append("chat", Message("t", "tool_output", "a loose tool output", 1))
    got = PrunedChatMessageHistory("chat", store).messages
    assert [(type(m).__name__, m.content) for m in got] == [
        ("SystemMessage", "Be brief."),
        ("AIMessage", "Hi."),
        ("HumanMessage", "From a transcript."),
        ("HumanMessage", "a loose tool output"),  # no call to answer: a provider takes it only as user text
    ]
