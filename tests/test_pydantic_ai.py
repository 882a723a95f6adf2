"""PruneStoreHistory in real Pydantic AI agents, with Pydantic AI's own FunctionModel answering from a script.

Every model request is checked as the model receives it: calls and returns
paired, equal to the session's pruned history read through another store
object, `verify` ok. Where nothing is pruned, the model must receive what
Pydantic AI sends it without prunestore.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import uuid
from typing import Any

import pytest
from helpers import tool_loop_turns
from hypothesis import given, settings
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from prunestore import AsyncPruneStore, Policy, PruneStore
from prunestore.integrations._shared import NO_WORDS
from prunestore.integrations.pydantic_ai import PYDANTIC_AI, PruneStoreHistory


def ls_calls(*calls: tuple[str, str]) -> list[Any]:
    """A response's parts: `ls` calls, each (call id, path)."""
    return [ToolCallPart("ls", {"path": path}, tool_call_id=call_id) for call_id, path in calls]


def text(words: str) -> list[Any]:
    return [TextPart(words)]


class Scripted:
    """A FunctionModel answering from a script, checking each request against the store as it goes."""

    def __init__(self, script: list[list[Any]], url: str | None = None, session: str = "conv") -> None:
        self.script = list(script)
        self.seen: list[list[ModelMessage]] = []
        self.checker = PruneStore(url) if url else None
        self.session = session

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        assert_paired(messages)
        if self.checker is not None:
            cold = PruneStoreHistory(self.checker)._prompt(self.session, self.checker.view(self.session, PYDANTIC_AI))
            assert messages == cold  # joined afresh from another store object's view
            assert self.checker.verify(self.session).ok
        return ModelResponse(parts=self.script.pop(0))

    def close(self) -> None:
        if self.checker is not None:
            self.checker.close()


def assert_paired(messages: list[ModelMessage]) -> None:
    """Every return answers a call of the response just before it, and every call has its return."""
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ModelResponse):
            assert not open_calls, open_calls
            open_calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
        else:
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    assert part.tool_call_id in open_calls, part
                    open_calls.remove(part.tool_call_id)
            assert not open_calls, open_calls


def agent_for(model: Scripted, *capabilities: Any) -> Agent:
    agent = Agent(FunctionModel(model), instructions="Be brief.", capabilities=list(capabilities))

    @agent.tool_plain
    def ls(path: str) -> str:
        """List a folder."""
        return f"{path}: " + " ".join(f"file{i}.csv" for i in range(40))

    return agent


@pytest.fixture(params=["sync store", "async store"])
def open_store(store_url, request):
    """Make stores of the kind under test on the test database; all closed at the end."""
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        store = (
            AsyncPruneStore(store_url, **kwargs) if request.param == "async store" else PruneStore(store_url, **kwargs)
        )
        made.append(store)
        return store

    yield make
    for store in made:
        if isinstance(store, AsyncPruneStore):
            asyncio.run(store.close())
        else:
            store.close()


def sent(messages: list[ModelMessage]) -> list[dict]:
    """What a model adapter reads of the messages: their JSON without times and durations, run and
    conversation ids and metadata (never sent; the store's messages name their store id there)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            ignored = ("timestamp", "request_timestamp", "duration", "run_id", "conversation_id", "metadata")
            return {k: strip(v) for k, v in value.items() if k not in ignored}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


TOOL_LOOP = [
    ls_calls(("c1", "/data")),
    ls_calls(("c2", "/logs"), ("c3", "/tmp")),
    text("Data, logs and tmp listed."),
    ls_calls(("c4", "/data")),
    text("Same as before."),
    ls_calls(("c5", "/logs"), ("c6", "/srv")),
    text("Done."),
]
QUESTIONS = ["What is in /data?", "And /data again?", "And /logs and /srv?"]


def test_with_nothing_to_prune_the_model_gets_what_pydantic_ai_sends(open_store, store_url):
    script = [ls_calls(("c1", "/a")), ls_calls(("c2", "/b"), ("c3", "/c")), text("Listed."), text("Hello again.")]
    plain, ours = Scripted(script), Scripted(script, store_url)

    async def run() -> None:
        history = PruneStoreHistory(open_store())
        first = await agent_for(plain).run("List /a, /b and /c.")
        await agent_for(plain).run("Hi.", message_history=first.all_messages())
        await agent_for(ours, history).run("List /a, /b and /c.", conversation_id="conv")
        await agent_for(ours, history).run("Hi.", conversation_id="conv")

    asyncio.run(run())
    ours.close()
    assert len(ours.seen) == len(plain.seen) == 4
    for got, expected in zip(ours.seen, plain.seen, strict=True):
        assert sent(got) == sent(expected)


def test_a_superseded_return_leaves_the_prompt_with_its_call(open_store, store_url):
    model = Scripted(TOOL_LOOP, store_url)

    async def run() -> list[ModelMessage]:
        history = PruneStoreHistory(open_store())
        result = None
        for question in QUESTIONS:
            result = await agent_for(model, history).run(question, conversation_id="conv")
        assert result is not None
        return result.all_messages()

    run_messages = asyncio.run(run())
    model.close()
    returns = {p.tool_call_id for m in model.seen[-1] for p in m.parts if isinstance(p, ToolReturnPart)}
    assert returns == {"c3", "c4", "c5", "c6"}  # c4 listed /data again, c5 /logs
    calls = {p.tool_call_id for m in model.seen[-1] for p in m.parts if isinstance(p, ToolCallPart)}
    assert calls == returns
    # the run's own messages are Pydantic AI's, untouched: the last run's superseded call is still there
    assert "c5" in {p.tool_call_id for m in run_messages for p in m.parts if isinstance(p, ToolCallPart)}
    with PruneStore(store_url) as store:
        assert store.verify("conv").ok
        assert len({m.id for m in store.messages("conv")}) == len(store.messages("conv"))


def test_a_history_passed_back_is_not_stored_twice(open_store, store_url):
    """`message_history=` from the run's result (every message) or from the store (pruned): nothing twice."""
    model = Scripted(TOOL_LOOP, store_url)

    async def run() -> tuple[int, list[str]]:
        store = open_store()
        history = PruneStoreHistory(store)
        agent = agent_for(model, history)
        first = await agent.run(QUESTIONS[0], conversation_id="conv")
        second = await agent.run(QUESTIONS[1], message_history=first.all_messages())
        pruned = await history.messages("conv")
        third = await agent.run(QUESTIONS[2], message_history=pruned)
        assert second.all_messages()[0].conversation_id == "conv"
        stored = await store.messages("conv") if isinstance(store, AsyncPruneStore) else store.messages("conv")
        return len(third.new_messages()), [m.id for m in stored]

    third_run, stored = asyncio.run(run())
    model.close()
    assert third_run == 4  # the question, the calls, their returns (one request), the answer
    # 7 + 4 + 5 stored messages (a request with two returns is stored as two): each once
    assert len(stored) == len(set(stored)) == 16
    with PruneStore(store_url) as store:
        assert store.verify("conv").ok


def test_an_approval_pause_and_its_resume_append_each_message_once(open_store, store_url):
    """Pydantic AI's deferred tools: the run ends waiting for an approval; the next run resumes with it."""
    model = Scripted([ls_calls(("r1", "/tmp/a")), text("Listed.")], store_url)

    async def run() -> list[str]:
        store = open_store()
        agent = Agent(
            FunctionModel(model), output_type=[str, DeferredToolRequests], capabilities=[PruneStoreHistory(store)]
        )

        @agent.tool_plain(requires_approval=True)
        def ls(path: str) -> str:
            """List a folder."""
            return f"{path}: a.csv"

        paused = await agent.run("List /tmp/a.", conversation_id="conv")
        assert isinstance(paused.output, DeferredToolRequests)
        approved = DeferredToolResults(approvals={"r1": True})
        done = await agent.run(message_history=paused.all_messages(), deferred_tool_results=approved)
        assert done.output == "Listed."
        stored = await store.messages("conv") if isinstance(store, AsyncPruneStore) else store.messages("conv")
        return [m.content for m in stored]

    assert asyncio.run(run()) == ["List /tmp/a.", 'ls({"path": "/tmp/a"})', "/tmp/a: a.csv", "Listed."]
    model.close()
    assert [[type(p).__name__ for p in m.parts] for m in model.seen[-1]] == [
        ["UserPromptPart"],
        ["ToolCallPart"],
        ["ToolReturnPart"],
    ]


def test_a_deferred_resume_passed_back_whole_stores_each_return_once(open_store, store_url):
    """Run 1 calls two tools that need approval and one that does not, and stops; run 2 resumes with the
    approvals; run 3 is given run 2's whole history, in which Pydantic AI merged run 1's last request and
    run 2's first into one with no run id. Each return is stored once, and every request is paired."""
    deletes = [ToolCallPart("delete", {"path": p}, tool_call_id=f"d{n}") for n, p in enumerate(["/a", "/b"])]
    model = Scripted([[*deletes, *ls_calls(("l1", "/"))], text("Deleted."), text("Bye.")])  # (Pydantic AI merges)

    async def run() -> list[str]:
        store = open_store()
        agent = Agent(
            FunctionModel(model), output_type=[str, DeferredToolRequests], capabilities=[PruneStoreHistory(store)]
        )

        @agent.tool_plain
        def ls(path: str) -> str:
            """List a folder."""
            return f"{path}: a.csv"

        @agent.tool_plain(requires_approval=True)
        def delete(path: str) -> str:
            """Delete a file."""
            return f"deleted {path}"

        paused = await agent.run("Clean up.", conversation_id="conv")
        assert isinstance(paused.output, DeferredToolRequests)
        approved = DeferredToolResults(approvals={"d0": True, "d1": True})
        resumed = await agent.run(message_history=paused.all_messages(), deferred_tool_results=approved)
        await agent.run("Thanks.", message_history=resumed.all_messages())
        stored = await store.messages("conv") if isinstance(store, AsyncPruneStore) else store.messages("conv")
        return [m.content for m in stored]

    stored = asyncio.run(run())
    model.close()
    assert len(stored) == len(set(stored)) == 8, stored  # prompt, calls, 3 returns, answer, prompt, answer
    returns = [p.tool_call_id for m in model.seen[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert sorted(returns) == ["d0", "d1", "l1"]  # once each, right after the calls (Scripted checks the pairs)
    with PruneStore(store_url) as store:
        assert store.verify("conv").ok


def test_a_session_named_by_the_capability(open_store):
    async def run() -> list[str]:
        store = open_store()
        agent = agent_for(Scripted([text("hi"), text("hi again")]), PruneStoreHistory(store, session="mine"))
        await agent.run("Hi.")
        await agent.run("Hi again.")  # a new conversation id, the same session
        stored = await store.messages("mine") if isinstance(store, AsyncPruneStore) else store.messages("mine")
        return [m.content for m in stored]

    assert asyncio.run(run()) == ["Hi.", "hi", "Hi again.", "hi again"]


_OTHER_PROCESS = textwrap.dedent(
    """
    import asyncio, sys
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel
    from prunestore import PruneStore
    from prunestore.integrations.pydantic_ai import PruneStoreHistory

    store = PruneStore(sys.argv[1])
    agent = Agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("From the other process.")])),
                  capabilities=[PruneStoreHistory(store)])
    asyncio.run(agent.run("Are you there?", conversation_id="conv"))
    store.close()
    """
)


def test_two_processes_on_one_conversation(store_url, tmp_path):
    script = tmp_path / "other.py"
    script.write_text(_OTHER_PROCESS)
    model = Scripted([*TOOL_LOOP[:3], text("Back here.")], store_url)
    with PruneStore(store_url) as store:
        history = PruneStoreHistory(store)
        asyncio.run(agent_for(model, history).run(QUESTIONS[0], conversation_id="conv"))
        done = subprocess.run([sys.executable, str(script), store_url], capture_output=True, text=True, env=os.environ)
        assert done.returncode == 0, done.stderr
        asyncio.run(agent_for(model, history).run("Still there?", conversation_id="conv"))
        last = model.seen[-1]
        words = [p.content for m in last for p in m.parts if isinstance(p, TextPart)]
        assert words[-1] == "From the other process."
        assert [m.content for m in store.messages("conv")][-4:] == [
            "Are you there?",
            "From the other process.",
            "Still there?",
            "Back here.",
        ]
        assert store.verify("conv").ok
    model.close()


# -- generated tool loops under a budget ---------------------------------------------------------


def tool_loops(turns: list[list[list[tuple[str, str]]]]) -> list[list[list[Any]]]:
    """The model's responses for generated turns: each step's parallel `ls` calls, then an answer."""
    return [[*(ls_calls(*step) for step in steps), text(f"Answer {t}.")] for t, steps in enumerate(turns)]


@settings(max_examples=8)
@given(generated=tool_loop_turns())
def test_generated_tool_loops_stay_paired_and_equal_the_batch(store_url, generated):
    turns = tool_loops(generated)
    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    store = PruneStore(store_url, policy=Policy(budget=600, clear_at_least=200))
    model = Scripted([reply for replies in turns for reply in replies], store_url, conversation)
    try:
        agent = agent_for(model, PruneStoreHistory(store))
        for t in range(len(turns)):
            asyncio.run(agent.run(f"Question {t}.", conversation_id=conversation))
        assert len(model.seen) == sum(map(len, turns))
        assert store.verify(conversation).ok
    finally:
        store.close()
        model.close()


def test_an_in_memory_store_works_from_the_event_loop():
    """An in-memory SQLite database is one thread's connection: the capability must not call it from a worker."""
    with PruneStore("sqlite://") as store:
        model = Scripted([ls_calls(("c1", "/data")), text("Listed.")])
        asyncio.run(agent_for(model, PruneStoreHistory(store)).run(QUESTIONS[0], conversation_id="conv"))
        assert [m.role for m in store.messages("conv")] == ["user", "assistant", "tool_output", "assistant"]
        assert len(model.seen) == 2 and store.verify("conv").ok


def test_the_recall_tool_gives_the_model_back_a_pruned_return(open_store, store_url):
    """With recall=True the agent has a `recall` tool; what it finds is the superseded listing, as its return."""
    recall_call = [ToolCallPart("recall", {"words": "/data FILE39.csv"}, tool_call_id="r1")]
    model = Scripted([ls_calls(("c1", "/data")), ls_calls(("c2", "/data")), recall_call, text("Found.")], store_url)
    history = PruneStoreHistory(open_store(), recall=True)
    returns = tool_returns(model, history, "List /data twice, then recall it.")
    assert returns["r1"] == f"[tool_output, turn 1] {returns['c1']}"
    assert any(t.name == "recall" for t in model_tools(history))
    with PruneStore(store_url) as store:
        assert [m.verdict for m in store.messages("conv") if m.content == returns["c1"]] == ["superseded", "kept"]
        assert store.verify("conv").ok


def model_tools(history: PruneStoreHistory) -> list[Any]:
    toolset = history.get_toolset()
    assert toolset is not None and PruneStoreHistory(history.store).get_toolset() is None
    return list(toolset.tools.values())


def test_a_recall_with_no_words_is_answered_so_the_agent_goes_on(open_store, store_url):
    """A call of `recall` with only spaces gets an answer telling the model so, as any tool return."""
    model = Scripted([[ToolCallPart("recall", {"words": " "}, tool_call_id="r1")], text("Done.")], store_url)
    assert tool_returns(model, PruneStoreHistory(open_store(), recall=True), "Recall nothing.") == {"r1": NO_WORDS}


def tool_returns(model: Scripted, history: PruneStoreHistory, question: str) -> dict[str, Any]:
    """What each tool call of one run of the agent returned, by call id (the model is closed after)."""

    async def run() -> list[ModelMessage]:
        result = await agent_for(model, history).run(question, conversation_id="conv")
        return result.all_messages()

    run_messages = asyncio.run(run())
    model.close()
    return {p.tool_call_id: p.content for m in run_messages for p in m.parts if isinstance(p, ToolReturnPart)}
