"""PruneStoreMiddleware in real LangChain v1 agents (`create_agent`) over real LangGraph checkpointers.

The model is LangChain's `GenericFakeChatModel` answering from a script
(tool calls included), so every run is offline and repeatable. After every
model call a middleware placed inside ours checks what the model is about to
get: provider-valid, equal to the store's prompt read through another store
object, and `verify` ok. Where nothing is pruned, the model must get what it
gets without prunestore, field by field.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import tool_loop_turns
from hypothesis import given, settings
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage, convert_to_openai_messages
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from providers import validate_openai

from prunestore import AsyncPruneStore, Policy, PruneStore
from prunestore.errors import InvalidArgumentError
from prunestore.integrations._shared import NO_WORDS
from prunestore.integrations.langchain import LANGCHAIN, PruneStoreMiddleware

THREAD = {"configurable": {"thread_id": "thread-1"}}


class ScriptedModel(GenericFakeChatModel):
    """The fake chat model, able to take tools (it answers from its script whatever the tools)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


@tool
def ls(path: str) -> str:
    """List a folder."""
    return f"{path}: " + " ".join(f"file{i}.csv" for i in range(40))


@tool
def rm(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"


def call(*calls: tuple[str, str], text: str = "") -> AIMessage:
    """A model reply making tool calls, each (call id, path) to `ls`."""
    return AIMessage(text, tool_calls=[{"name": "ls", "args": {"path": p}, "id": c} for c, p in calls])


def say(text: str) -> AIMessage:
    return AIMessage(text)


class Checked(AgentMiddleware):
    """Inside PruneStoreMiddleware: records each model request and checks it against the store."""

    def __init__(self, url: str | None, session: str = "thread-1") -> None:
        super().__init__()
        self.checker = PruneStore(url) if url else None
        self.session = session
        self.prompts: list[list[BaseMessage]] = []
        self.events: list[int] = []

    def _check(self, request: Any) -> None:
        self.prompts.append(list(request.messages))
        validate_openai(convert_to_openai_messages(list(request.messages)))
        if self.checker is not None:
            assert request.messages == self.checker.view(self.session, LANGCHAIN)
            assert self.checker.verify(self.session).ok
            self.events.append(self.checker.stats(self.session).events)

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self._check(request)
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        await asyncio.to_thread(self._check, request)
        return await handler(request)

    def close(self) -> None:
        if self.checker is not None:
            self.checker.close()


def agent_with(
    replies: list[AIMessage], checked: Checked, store: Any = None, checkpointer: Any = None, **kwargs: Any
) -> Any:
    middleware: list[Any] = [PruneStoreMiddleware(store, **kwargs)] if store is not None else []
    return create_agent(
        ScriptedModel(messages=iter(replies)),
        tools=[ls, rm],
        system_prompt="Be brief.",
        middleware=[*middleware, checked],
        checkpointer=checkpointer if checkpointer is not None else InMemorySaver(),
    )


@contextmanager
def checkpointer_for(backend: str, store_url: str, tmp_path: Path) -> Iterator[Any]:
    """A persistent checkpointer beside the store: SqliteSaver next to SQLite, PostgresSaver next to PostgreSQL."""
    if backend == "sqlite":
        with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
            yield saver
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(store_url.replace("postgresql+psycopg://", "postgresql://")) as saver:
        saver.setup()
        yield saver


def ask(agent: Any, text: str, config: dict = THREAD) -> dict:
    return agent.invoke({"messages": [HumanMessage(text)]}, config)


# A session of three questions: a tool loop, the same call again (its first result is superseded), parallel calls.
TOOL_LOOP = [
    call(("c1", "/data")),
    call(("c2", "/logs"), ("c3", "/tmp")),
    say("Data, logs and tmp listed."),
    call(("c4", "/data")),
    say("Same as before."),
    call(("c5", "/logs"), ("c6", "/srv")),
    say("Done."),
]
QUESTIONS = ["What is in /data?", "And /data again?", "And /logs and /srv?"]


def ids_without(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The messages with the ids LangGraph and the model's run ids draw at random taken out."""
    return [m.model_copy(update={"id": None}) for m in messages]


# -- nothing to prune: what LangChain gives ----------------------------------------------


def test_with_nothing_to_prune_the_model_gets_what_langchain_gives(store_url):
    replies = [call(("c1", "/data")), call(("c2", "/logs"), ("c3", "/tmp")), say("Listed."), say("Hello again.")]
    plain, ours = Checked(None), Checked(store_url)
    store = PruneStore(store_url)
    try:
        for checked, with_store in ((plain, None), (ours, store)):
            agent = agent_with(replies, checked, with_store)
            ask(agent, "List /data, /logs and /tmp.")
            ask(agent, "Hi.")
        assert len(ours.prompts) == len(plain.prompts) == 4
        for got, expected in zip(ours.prompts, plain.prompts, strict=True):
            assert ids_without(got) == ids_without(expected)
            assert [type(m) for m in got] == [type(m) for m in expected]
    finally:
        store.close()
        ours.close()


# -- pruning in a tool loop, over a persistent checkpointer --------------------------------


def test_a_superseded_result_leaves_the_prompt_but_not_the_checkpoint(store_url, backend, tmp_path):
    checked = Checked(store_url)
    store = PruneStore(store_url)
    try:
        with checkpointer_for("sqlite" if backend == "sqlite" else "postgres", store_url, tmp_path) as saver:
            agent = agent_with(TOOL_LOOP, checked, store, saver)
            for question in QUESTIONS:
                state = ask(agent, question)
        assert len(checked.prompts) == len(TOOL_LOOP)
        kept = {m.tool_call_id for m in checked.prompts[-1] if m.type == "tool"}
        assert kept == {"c3", "c4", "c5", "c6"}  # c4 listed /data again, c5 /logs
        assert {"c1", "c2"} <= {m.tool_call_id for m in state["messages"] if m.type == "tool"}  # still checkpointed
        # every message of the thread is stored once, under LangGraph's id, in the thread's order (the
        # last answer at the thread's next model call)
        assert [m.id for m in store.messages("thread-1")] == [m.id for m in state["messages"][:-1]]
        assert store.verify("thread-1").ok
    finally:
        store.close()
        checked.close()


@pytest.mark.parametrize("api", ["async", "sync store in a thread"])
def test_async_agents(store_url, api):
    async def run() -> tuple[list, list]:
        store: Any = AsyncPruneStore(store_url) if api == "async" else PruneStore(store_url)
        checked = Checked(store_url)
        try:
            agent = agent_with(TOOL_LOOP, checked, store)
            for question in QUESTIONS:
                state = await agent.ainvoke({"messages": [HumanMessage(question)]}, THREAD)
            stored = await store.messages("thread-1") if api == "async" else store.messages("thread-1")
            return [m.id for m in stored], [m.id for m in state["messages"]]
        finally:
            await store.close() if api == "async" else store.close()
            checked.close()

    stored, thread = asyncio.run(run())
    assert stored == thread[:-1] and len(thread) == 3 + len(TOOL_LOOP) + 6


@asynccontextmanager
async def async_checkpointer_for(backend: str, store_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    """AsyncSqliteSaver next to SQLite, AsyncPostgresSaver next to PostgreSQL."""
    if backend == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
            yield saver
        return
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(
        store_url.replace("postgresql+psycopg://", "postgresql://")
    ) as saver:
        await saver.setup()
        yield saver


def test_streamed_async_agents_over_async_checkpointers(store_url, backend, tmp_path):
    """`astream` with an AsyncPruneStore and the checkpointer's async form: each step streams, nothing twice."""

    async def run() -> None:
        checked = Checked(store_url)
        async with AsyncPruneStore(store_url) as store:
            async with async_checkpointer_for(
                "sqlite" if backend == "sqlite" else "postgres", store_url, tmp_path
            ) as saver:
                agent = agent_with(TOOL_LOOP, checked, store, saver)
                for question in QUESTIONS:
                    chunks = [c async for c in agent.astream({"messages": [HumanMessage(question)]}, THREAD)]
                    assert chunks
                state = await agent.aget_state(THREAD)
            stored = [m.id for m in await store.messages("thread-1")]
            assert stored == [m.id for m in state.values["messages"][:-1]]
            assert (await store.verify("thread-1")).ok
        checked.close()
        assert len(checked.prompts) == len(TOOL_LOOP)
        assert {m.tool_call_id for m in checked.prompts[-1] if isinstance(m, ToolMessage)} == {"c3", "c4", "c5", "c6"}

    asyncio.run(run())


def test_a_blocking_agent_on_an_async_store_is_told_to_use_ainvoke(store_url):
    async def make() -> AsyncPruneStore:
        return AsyncPruneStore(store_url)

    store = asyncio.run(make())
    agent = agent_with([say("hi")], Checked(None), store)
    with pytest.raises(TypeError, match="ainvoke"):
        ask(agent, "Hi.")


# -- the cache: between removal events, each prompt begins with the previous one ----------------


def test_between_events_every_prompt_begins_with_the_previous_one(store_url, backend, tmp_path):
    """A persistent checkpointer and a budget: no model call rewrites the prompt's past except at an event."""
    paths = [f"/d{i % 5}" for i in range(30)]  # the same five folders again and again: superseded results
    replies = [call((f"c{i}", p)) for i, p in enumerate(paths)] + [say("All listed.")]
    store = PruneStore(store_url, policy=Policy(budget=1500, clear_at_least=600))
    checked = Checked(store_url)
    try:
        with checkpointer_for("sqlite" if backend == "sqlite" else "postgres", store_url, tmp_path) as saver:
            ask(agent_with(replies, checked, store, saver), "List these folders, one by one.")
        calls = range(1, len(checked.prompts))
        steady = [
            (checked.prompts[i - 1], checked.prompts[i]) for i in calls if checked.events[i - 1] == checked.events[i]
        ]
        assert checked.events[-1] >= 2 and len(steady) >= 10
        for before, after in steady:
            assert after[: len(before)] == before
        assert all(len(p) < 30 for p in checked.prompts[-3:])  # the budget held the prompt down
    finally:
        store.close()
        checked.close()


# -- interrupts, and two processes on one thread ----------------------------------------------


@pytest.mark.parametrize(
    "decision",
    [{"type": "approve"}, {"type": "edit", "edited_action": {"name": "rm", "args": {"path": "/tmp/b"}}}],
    ids=["approve", "edit"],
)
def test_an_interrupt_and_its_resume_append_each_message_once(store_url, decision):
    checked = Checked(store_url)
    store = PruneStore(store_url)
    replies = [
        AIMessage("", tool_calls=[{"name": "rm", "args": {"path": "/tmp/a"}, "id": "r1"}]),
        say("Removed."),
    ]
    try:
        agent = create_agent(
            ScriptedModel(messages=iter(replies)),
            tools=[ls, rm],
            middleware=[PruneStoreMiddleware(store), checked, HumanInTheLoopMiddleware(interrupt_on={"rm": True})],
            checkpointer=InMemorySaver(),
        )
        paused = ask(agent, "Remove /tmp/a.")
        assert "__interrupt__" in paused
        assert [m.id for m in store.messages("thread-1")] == [m.id for m in paused["messages"][:1]]
        state = agent.invoke(Command(resume={"decisions": [decision]}), THREAD)
        assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
        assert [m.id for m in store.messages("thread-1")] == [m.id for m in state["messages"][:-1]]
        path = "/tmp/b" if decision["type"] == "edit" else "/tmp/a"
        assert state["messages"][2].content.endswith(f"removed {path}")
        assert checked.prompts[-1][:3] == state["messages"][:3]  # the call and its result as the state holds them
        assert store.verify("thread-1").ok
    finally:
        store.close()
        checked.close()


_OTHER_PROCESS = textwrap.dedent(
    """
    import sys
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from prunestore import PruneStore
    from prunestore.integrations.langchain import PruneStoreMiddleware

    class ScriptedModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    store_url, checkpoints = sys.argv[1], sys.argv[2]
    store = PruneStore(store_url)
    with SqliteSaver.from_conn_string(checkpoints) as saver:
        agent = create_agent(
            ScriptedModel(messages=iter([AIMessage("From the other process.")])),
            middleware=[PruneStoreMiddleware(store)],
            checkpointer=saver,
        )
        agent.invoke({"messages": [HumanMessage("Are you there?")]}, {"configurable": {"thread_id": "thread-1"}})
    store.close()
    """
)


def test_two_processes_on_one_thread(store_url, tmp_path):
    checkpoints = str(tmp_path / "checkpoints.db")
    script = tmp_path / "other.py"
    script.write_text(_OTHER_PROCESS)
    store = PruneStore(store_url)
    try:
        with SqliteSaver.from_conn_string(checkpoints) as saver:
            ask(agent_with(TOOL_LOOP[:3], Checked(None), store, saver), "List /data.")
        done = subprocess.run(
            [sys.executable, str(script), store_url, checkpoints], capture_output=True, text=True, env=os.environ
        )
        assert done.returncode == 0, done.stderr
        with SqliteSaver.from_conn_string(checkpoints) as saver:
            checked = Checked(store_url)
            state = ask(agent_with([say("Back here.")], checked, store, saver), "Still there?")
            checked.close()
        assert [m.content for m in state["messages"][-4:]] == [
            "Are you there?",
            "From the other process.",
            "Still there?",
            "Back here.",
        ]
        assert [m.id for m in store.messages("thread-1")] == [m.id for m in state["messages"][:-1]]
        assert store.verify("thread-1").ok
    finally:
        store.close()


# -- naming the session ---------------------------------------------------------------------


def test_without_a_thread_the_session_must_be_named(store_url):
    store = PruneStore(store_url)
    try:
        agent = create_agent(
            ScriptedModel(messages=iter([say("hi"), say("hi")])), middleware=[PruneStoreMiddleware(store)]
        )
        with pytest.raises(InvalidArgumentError, match="thread_id"):
            agent.invoke({"messages": [HumanMessage("Hi.")]})
        named = create_agent(
            ScriptedModel(messages=iter([say("hi")])), middleware=[PruneStoreMiddleware(store, session="mine")]
        )
        named.invoke({"messages": [HumanMessage("Hi.")]})
        assert [m.content for m in store.messages("mine")] == ["Hi."]
    finally:
        store.close()


def test_a_subagent_called_from_a_tool_gets_a_session_of_its_own(store_url):
    store = PruneStore(store_url)
    sub = create_agent(ScriptedModel(messages=iter([say("Sub answer.")])), middleware=[PruneStoreMiddleware(store)])

    @tool
    def helper(question: str) -> str:
        """Ask the helper agent."""
        return sub.invoke({"messages": [HumanMessage(question)]})["messages"][-1].content

    try:
        main = create_agent(
            ScriptedModel(
                messages=iter(
                    [AIMessage("", tool_calls=[{"name": "helper", "args": {"question": "q?"}, "id": "h1"}]), say("ok")]
                )
            ),
            tools=[helper],
            middleware=[PruneStoreMiddleware(store)],
            checkpointer=InMemorySaver(),
        )
        ask(main, "Use the helper.")
        sessions = {name: len(store.messages(name)) for name in store.sessions()}
        assert sessions.pop("thread-1") == 3  # the last answer is stored at the thread's next model call
        [(name, count)] = sessions.items()
        assert name.startswith("thread-1|") and count == 1
    finally:
        store.close()


# -- generated tool loops ---------------------------------------------------------------------


def tool_loops(turns: list[list[list[tuple[str, str]]]]) -> list[list[AIMessage]]:
    """The model's replies for generated turns: each step's parallel `ls` calls, then an answer."""
    return [[*(call(*step) for step in steps), say(f"Answer {t}.")] for t, steps in enumerate(turns)]


@settings(max_examples=8)
@given(generated=tool_loop_turns())
def test_generated_tool_loops_stay_valid_and_equal_the_batch(store_url, generated):
    turns = tool_loops(generated)
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    store = PruneStore(store_url, policy=Policy(budget=600, clear_at_least=200))
    checked = Checked(store_url, thread)
    try:
        agent = agent_with([reply for replies in turns for reply in replies], checked, store)
        for t in range(len(turns)):
            state = ask(agent, f"Question {t}.", {"configurable": {"thread_id": thread}})
        assert len(checked.prompts) == sum(map(len, turns))
        assert [m.id for m in store.messages(thread)] == [m.id for m in state["messages"][:-1]]
        assert store.verify(thread).ok
    finally:
        store.close()
        checked.close()


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "ainvoke-async-store"])
def test_the_recall_tool_gives_the_model_back_a_pruned_result(store_url, mode):
    """With recall=True the agent has a `recall` tool; what it finds is the superseded listing, as its result."""
    recall_call = {"name": "recall", "args": {"words": "/data FILE39.csv"}, "id": "r1"}
    replies = [call(("c1", "/data")), call(("c2", "/data")), AIMessage("", tool_calls=[recall_call]), say("Found.")]
    checked = Checked(None)

    async def run(store: Any) -> dict:
        agent = agent_with(replies, checked, store, recall=True)
        return await agent.ainvoke({"messages": [HumanMessage("List /data twice, then recall it.")]}, THREAD)

    if mode == "invoke":
        with PruneStore(store_url) as store:
            state = agent_with(replies, checked, store, recall=True).invoke(
                {"messages": [HumanMessage("List /data twice, then recall it.")]}, THREAD
            )
            stored = store.messages("thread-1")
    else:
        store: Any = AsyncPruneStore(store_url) if mode == "ainvoke-async-store" else PruneStore(store_url)
        state = asyncio.run(run(store))
        with PruneStore(store_url) as reader:
            stored = reader.messages("thread-1")
        asyncio.run(store.close()) if mode == "ainvoke-async-store" else store.close()
    (answer,) = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "r1"]
    first = next(m for m in state["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "c1")
    assert answer.content == f"[tool_output, turn 1] {first.content}"
    assert [m.verdict for m in stored if m.content == first.content] == ["superseded", "kept"]
    # the last prompt holds that text twice: the live listing and the recall's result (the superseded copy is out)
    assert sum(first.content in str(m.content) for m in checked.prompts[-1]) == 2


def test_without_recall_the_agent_has_no_recall_tool(store_url):
    with PruneStore(store_url) as store:
        assert PruneStoreMiddleware(store).tools == []
        (tool_,) = PruneStoreMiddleware(store, recall=True).tools
        assert tool_.name == "recall" and "no longer in view" in tool_.description


def test_a_recall_with_no_words_is_answered_so_the_agent_goes_on(store_url):
    """A call of `recall` with only spaces gets an answer telling the model so, as any tool result."""
    replies = [AIMessage("", tool_calls=[{"name": "recall", "args": {"words": "  "}, "id": "r1"}]), say("Done.")]
    with PruneStore(store_url) as store:
        state = agent_with(replies, Checked(None), store, recall=True).invoke(
            {"messages": [HumanMessage("Recall nothing.")]}, THREAD
        )
        (answer,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        assert answer.content == NO_WORDS and answer.status == "success"
        assert state["messages"][-1].content == "Done." and store.verify("thread-1").ok
