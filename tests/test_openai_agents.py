"""PruneStoreSession against the real OpenAI Agents SDK and its own SQLiteSession, with a scripted model.

Where nothing is pruned, every step gives what `SQLiteSession` gives (the
behaviours of the SDK's session tests, re-implemented here); where something
is pruned, every call still goes to the model with its output. Each test runs
on both backends and with both store classes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.memory import SessionSettings
from agents.models.interface import Model
from agents.run_config import CallModelData, ModelInputData
from agents.usage import Usage
from helpers import cached_prompt_equals_cold
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from prunestore import AsyncPruneStore, PruneStore
from prunestore.integrations.openai_agents import PruneStoreSession

set_tracing_disabled(True)
_ids = itertools.count()


@pytest.fixture(params=["async", "sync"])
def open_session(store_url, request, tmp_path):
    """Make (ours, theirs): a PruneStoreSession and an SQLiteSession on empty stores, closed at the end."""
    stores: list = []
    theirs_made: list = []

    def make(session_id: str = "s", **settings):
        store = AsyncPruneStore(store_url) if request.param == "async" else PruneStore(store_url)
        stores.append(store)
        theirs = SQLiteSession(session_id, tmp_path / "sdk.db", **settings)
        theirs_made.append(theirs)
        return PruneStoreSession(session_id, store, **settings), theirs

    yield make
    for store in stores:
        if isinstance(store, AsyncPruneStore):
            asyncio.run(store.close())
        else:
            store.close()
    for theirs in theirs_made:
        theirs.close()


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


def call(call_id: str, path: str = "/data", item_id: str | None = None) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=call_id,
        name="list_files",
        arguments=json.dumps({"path": path}),
        id=item_id or f"fc_{call_id}",
        status="completed",
    )


def say(text: str, item_id: str | None = None) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        type="message",
        id=item_id or f"msg_{next(_ids)}",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


@function_tool
def list_files(path: str) -> str:
    """List the files under a path."""
    return "a.csv b.csv"


def assert_paired(items: list[dict], *, waiting: bool = False) -> None:
    """Every output follows its call, and every call has its output (the last ones may still be waiting)."""
    open_calls: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            open_calls.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in open_calls, item
            open_calls.remove(item["call_id"])
    assert waiting or not open_calls


def assert_sendable(items: list[dict]) -> None:
    """A call without its output is one of the last step's: the calls at the end with only outputs after them
    (parallel calls wait together). (An output may come alone: one whose call the session never held.)"""
    open_calls: dict[str, int] = {}
    last_step = 0
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call_output":
            open_calls.pop(item["call_id"], None)
            continue
        if kind != "function_call" or (i and items[i - 1].get("type") not in ("function_call", "function_call_output")):
            last_step = i
        if kind == "function_call":
            open_calls[item["call_id"]] = i
    assert all(i >= last_step for i in open_calls.values()), items


def _calls_sent(model_input) -> list[str]:
    return [i["call_id"] for i in model_input if isinstance(i, dict) and i.get("type") == "function_call"]


def output(call_id: str, text: str = "a.csv") -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


ITEMS = [
    {"role": "user", "content": "Hi"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"},
    call("c1").model_dump(exclude_unset=True),
    output("c1"),
    {"role": "assistant", "content": "One file."},
    {"role": "user", "content": [{"type": "input_text", "text": "and this?"}]},
    {"type": "message", "role": "assistant", "id": "__fake_id__", "content": [{"type": "output_text", "text": "x"}]},
]


def run(coroutine):
    return asyncio.run(coroutine)


# -- the SDK's session behaviours, where nothing is pruned --------------------------------------


def test_add_get_pop_clear_like_sqlite_session(open_session):
    async def main() -> None:
        ours, theirs = open_session()
        for session in (ours, theirs):
            await session.add_items(ITEMS[:4])
            await session.add_items(ITEMS[4:])
        assert await ours.get_items() == await theirs.get_items() == ITEMS
        shared = (await ours.get_items())[0]
        with pytest.raises(TypeError, match="read-only"):
            shared["content"] = "changed"  # the items are the cache's: read-only
        assert {**shared, "content": "changed"}["content"] == "changed" and (await ours.get_items())[0] == ITEMS[0]
        for limit in (None, 1, 3, 0, -1, len(ITEMS), len(ITEMS) + 1, 2 * len(ITEMS) - 1, 100):
            assert await ours.get_items(limit) == await theirs.get_items(limit), limit
        assert await ours.pop_item() == await theirs.pop_item() == ITEMS[-1]
        assert await ours.get_items() == await theirs.get_items()
        for session in (ours, theirs):
            await session.clear_session()
        assert await ours.get_items() == await theirs.get_items() == []
        assert await ours.pop_item() is None and await theirs.pop_item() is None

    run(main())


def test_session_settings_limit(open_session):
    async def main() -> None:
        ours, theirs = open_session(session_settings=SessionSettings(limit=2))
        for session in (ours, theirs):
            await session.add_items(ITEMS)
        assert await ours.get_items() == await theirs.get_items() == ITEMS[-2:]
        assert await ours.get_items(limit=3) == ITEMS[-3:]

    run(main())


def test_repeated_ids_and_repeated_items_are_all_kept(open_session):
    """Chat Completions and LiteLLM models give every item "__fake_id__"; a provider may reuse call_0."""
    fake = {
        "type": "message",
        "role": "assistant",
        "id": "__fake_id__",
        "content": [{"type": "output_text", "text": "a"}],
    }
    turns = [
        [{"role": "user", "content": "one"}, call("call_0", "/a", "__fake_id__").model_dump(), output("call_0", "x")],
        [fake, fake],  # the same item twice in one batch
        [{"role": "user", "content": "two"}, call("call_0", "/b", "__fake_id__").model_dump(), output("call_0", "y")],
        [fake],
    ]

    async def main() -> None:
        ours, theirs = open_session()
        for batch in turns:
            await ours.add_items(batch)
            await theirs.add_items(batch)
            assert await ours.get_items() == await theirs.get_items()

    run(main())


def test_large_items_are_stored(open_session):
    image = "data:image/png;base64," + "A" * 1_500_000
    big = [
        {"role": "user", "content": [{"type": "input_image", "image_url": image, "detail": "auto"}]},
        call("c1").model_dump(exclude_unset=True),
        output("c1", "row\n" * 500_000),
    ]

    async def main() -> None:
        ours, theirs = open_session()
        await ours.add_items(big)
        await theirs.add_items(big)
        assert await ours.get_items() == await theirs.get_items() == big

    run(main())


def test_a_call_waiting_for_its_output_stays(open_session):
    async def main() -> None:
        ours, theirs = open_session()
        batch = [{"role": "user", "content": "delete it"}, call("c1").model_dump(exclude_unset=True)]
        for session in (ours, theirs):
            await session.add_items(batch)
        assert await ours.get_items() == await theirs.get_items() == batch  # a parked approval, say

    run(main())


HOSTED_CALLS = {
    "parallel calls, before their outputs": [
        call("cA").model_dump(exclude_unset=True),
        call("cB", "/b").model_dump(exclude_unset=True),
    ],
    "a tool search and its output": [
        {"type": "tool_search_call", "call_id": "ts1", "arguments": {"query": "files"}, "execution": "client"},
        {"type": "tool_search_output", "call_id": "ts1", "tools": [], "execution": "client"},
    ],
    "a local shell call and its output, by id": [
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "sh1",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        },
        {"type": "local_shell_call_output", "id": "sh1", "output": "a.csv"},
    ],
}


@pytest.mark.parametrize("items", HOSTED_CALLS.values(), ids=HOSTED_CALLS.keys())
def test_calls_stored_as_items_of_their_own_stay_with_their_outputs(open_session, items):
    """Each call is an item: parallel calls are several, and a call answered by an output of another shape
    (a tool search's, a local shell's by `id`) stays with it, as an SQLiteSession gives them back."""

    async def main() -> None:
        ours, theirs = open_session()
        batch = [{"role": "user", "content": "look around"}, *items]
        for session in (ours, theirs):
            await session.add_items(batch)
        assert await ours.get_items() == await theirs.get_items() == batch
        more = [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "thanks"}]
        for session in (ours, theirs):
            await session.add_items(more)
        if items[-1]["type"].endswith("_output"):  # answered: the conversation goes on with both
            assert await ours.get_items() == await theirs.get_items() == batch + more

    run(main())


def test_a_run_with_parallel_calls_sends_what_an_sqlite_session_sends(open_session):
    """The model asks for two calls at once, one of which needs approval: the run stops with both calls
    stored, and the resumed run and the next one are sent what the SDK's own session sends them."""

    class Parallel(ScriptedModel):
        async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
            self.inputs.append(input)
            return ModelResponse(output=list(self.replies.pop(0)), usage=Usage(), response_id=None)

    async def main() -> None:
        ours, theirs = open_session("agent")
        sent, held = [], []
        for session in (ours, theirs):
            replies = [[removal("rA", "/a/old.csv"), call("cB", "/b")], [say("Done.", "msg_1")], [say("Bye.", "msg_2")]]
            model = Parallel(replies)
            agent = Agent(name="files", instructions="You tidy folders.", model=model, tools=[list_files, remove])
            stopped = await Runner.run(agent, "Tidy both folders.", session=session)
            held.append(await session.get_items())
            state = stopped.to_state()
            state.approve(state.get_interruptions()[0])
            await Runner.run(agent, state, session=session)
            await Runner.run(agent, "Thanks.", session=session)
            sent.append([plain_items(i) for i in model.inputs])
        assert held[0] == held[1] and {"rA", "cB"} <= {i.get("call_id") for i in held[0]}
        assert sent[0] == sent[1]
        assert await ours.get_items() == await theirs.get_items()

    run(main())


def plain_items(items) -> list:
    return [i.model_dump(exclude_unset=True) if hasattr(i, "model_dump") else i for i in items]


# -- pruning -------------------------------------------------------------------------------------


def test_runner_sees_pruned_history_with_calls_paired(open_session):
    async def main() -> None:
        session, _ = open_session("agent")
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

    run(main())


def test_keep_tools_are_never_superseded(open_session):
    async def main() -> None:
        ours, _ = open_session()
        kept = PruneStoreSession("kept", ours.store, keep_tools={"list_files"})
        for session in (ours, kept):
            for n in range(2):
                await session.add_items([call(f"c{n}").model_dump(exclude_unset=True), output(f"c{n}")])
        assert len(await ours.get_items()) == 2 and len(await kept.get_items()) == 4

    run(main())


def test_a_call_and_its_output_through_different_session_objects(open_session):
    async def main() -> None:
        first, _ = open_session()
        second = PruneStoreSession("s", first.store)
        await first.add_items([call("c1").model_dump(exclude_unset=True)])
        await second.add_items([output("c1")])
        await first.add_items([call("c2").model_dump(exclude_unset=True)])
        await second.add_items([output("c2")])
        items = await first.get_items()
        assert [i["call_id"] for i in items] == ["c2", "c2"]  # the same call again: the first went

    run(main())


# -- pruning inside a run --------------------------------------------------------------------


def test_a_run_is_pruned_between_its_own_model_calls(open_session):
    """The SDK reads the session once per run; the filter sends each of the run's calls the session's prompt."""

    async def main() -> None:
        session, theirs = open_session("loop")
        sent: list[list] = []

        async def recorded(data):
            chosen = await session.model_input_filter(data)
            sent.append(await session.get_items())
            return chosen

        script = [call("c1"), call("c2"), call("c3"), say("Done."), call("c4", "/logs"), say("Logs listed.")]
        pruned, whole = ScriptedModel(script), ScriptedModel(script)
        for model, used, config in (
            (pruned, session, RunConfig(call_model_input_filter=recorded)),
            (whole, theirs, RunConfig()),
        ):
            agent = Agent(name="files", instructions="You list files.", model=model, tools=[list_files])
            await Runner.run(agent, "List the files.", session=used, run_config=config)
            await Runner.run(agent, "And the logs?", session=used, run_config=config)
        assert [_calls_sent(i) for i in whole.inputs[:4]] == [[], ["c1"], ["c1", "c2"], ["c1", "c2", "c3"]]
        assert [_calls_sent(i) for i in pruned.inputs] == [[], ["c1"], ["c2"], ["c3"], ["c3"], ["c3", "c4"]]
        assert [list(i) for i in pruned.inputs] == sent  # each call got the session's prompt of that moment
        for model_input in pruned.inputs:
            assert_paired(model_input)
        store = session.store
        report = await store.verify("loop") if isinstance(store, AsyncPruneStore) else store.verify("loop")
        assert report.ok

    run(main())


def test_with_nothing_to_prune_the_filter_sends_what_the_sdk_sends(open_session):
    async def main() -> None:
        session, theirs = open_session("plain")
        script = [call("c1", "/a"), call("c2", "/b"), say("Two folders."), say("Hello.")]
        ours, sdk = ScriptedModel(script), ScriptedModel(script)
        for model, used, config in (
            (ours, session, RunConfig(call_model_input_filter=session.model_input_filter)),
            (sdk, theirs, RunConfig()),
        ):
            agent = Agent(name="files", instructions="You list files.", model=model, tools=[list_files])
            await Runner.run(agent, "List /a and /b.", session=used, run_config=config)
            await Runner.run(agent, "Hi.", session=used, run_config=config)
        assert len(ours.inputs) == len(sdk.inputs) == 4
        for got, expected in zip(ours.inputs, sdk.inputs, strict=True):
            assert json.loads(json.dumps(got)) == json.loads(json.dumps(expected))

    run(main())


def test_a_step_the_session_does_not_hold_yet_goes_as_given(open_session):
    async def main() -> None:
        session, _ = open_session("behind")
        await session.add_items([{"role": "user", "content": "Hi"}, call("c1").model_dump(exclude_unset=True)])
        await session.add_items([output("c1")])
        stored = await session.get_items()
        agent = Agent(name="files")
        newer: list[Any] = [*map(dict, stored), {"role": "user", "content": "not stored yet"}]
        given = ModelInputData(input=newer, instructions="x")
        chosen = await session.model_input_filter(CallModelData(model_data=given, agent=agent, context=None))
        assert chosen is given
        older: list[Any] = [{"role": "user", "content": "an old copy"}, *map(dict, stored)]
        held = ModelInputData(input=older, instructions="x")
        chosen = await session.model_input_filter(CallModelData(model_data=held, agent=agent, context=None))
        assert chosen.input == stored and chosen.instructions == "x"

    run(main())


# -- reasoning --------------------------------------------------------------------------------


def reasoning(item_id: str) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": f"enc-{item_id}"}


def test_a_reasoning_item_is_sent_only_with_the_item_after_it(open_session):
    async def main() -> None:
        session, _ = open_session()

        async def kinds() -> list:
            return [i.get("id") or i.get("call_id") or i.get("role") for i in await session.get_items()]

        await session.add_items([{"role": "user", "content": "List."}, reasoning("rs_1")])
        assert await kinds() == ["user"]  # what it preceded is not stored yet
        await session.add_items([call("c1").model_dump(exclude_unset=True)])
        assert await kinds() == ["user", "rs_1", "fc_c1"]  # its call, waiting for its output
        await session.add_items([output("c1"), {"role": "assistant", "content": "One file."}])
        await session.add_items([{"role": "user", "content": "Again."}, reasoning("rs_2")])
        await session.add_items([call("c2").model_dump(exclude_unset=True), output("c2")])
        # c2 lists /data again: c1 and its output go, and rs_1, which preceded c1, with them
        assert await kinds() == ["user", "assistant", "user", "rs_2", "fc_c2", "c2"]
        await session.pop_item()
        await session.pop_item()
        assert await kinds() == ["user", "rs_1", "fc_c1", "c1", "assistant", "user"]  # c1 is back, c2 gone

    run(main())


def test_parallel_calls_share_their_reasoning_item_until_the_last_goes(open_session):
    async def main() -> None:
        session, _ = open_session()

        async def kinds() -> list:
            return [i.get("id") or i.get("call_id") or i.get("role") for i in await session.get_items()]

        parallel = [call("c1", "/a").model_dump(exclude_unset=True), call("c2", "/b").model_dump(exclude_unset=True)]
        await session.add_items([{"role": "user", "content": "List both."}, reasoning("rs_1"), *parallel])
        await session.add_items([output("c1"), output("c2"), {"role": "assistant", "content": "Two folders."}])
        again = [reasoning("rs_2"), call("c3", "/a").model_dump(exclude_unset=True), output("c3")]
        await session.add_items([{"role": "user", "content": "The first again."}, *again])
        # c3 lists /a again: c1 and its output go; rs_1 preceded c2 too, which stays, so it stays
        assert await kinds() == ["user", "rs_1", "fc_c2", "c2", "assistant", "user", "rs_2", "fc_c3", "c3"]
        await session.add_items([reasoning("rs_3"), call("c4", "/b").model_dump(exclude_unset=True), output("c4")])
        # c4 lists /b again: the last call rs_1 preceded goes, and rs_1 with it
        assert await kinds() == ["user", "assistant", "user", "rs_2", "fc_c3", "c3", "rs_3", "fc_c4", "c4"]

    run(main())


@st.composite
def agent_batches(draw: Any) -> list:
    out: list = []
    made: list[str] = []
    for n in range(draw(st.integers(1, 10))):
        batch: list = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["user", "reasoning", "reasoning", "call", "output", "output", "say"]))
            if kind == "user":
                batch.append({"role": "user", "content": draw(st.sampled_from(["go", "DEFINE:k x", "REF:k y"]))})
            elif kind == "reasoning":
                batch.append(reasoning(f"rs_{n}_{len(batch)}"))
            elif kind == "say":
                batch.append({"role": "assistant", "content": "ok"})
            elif kind == "call":
                call_id = draw(st.sampled_from(["c1", "c2", "c3"]))
                batch.append(call(call_id, draw(st.sampled_from(["/a", "/b"]))).model_dump(exclude_unset=True))
                made.append(call_id)
            elif made:
                batch.append(output(draw(st.sampled_from(made)), draw(st.sampled_from(["x", "y"]))))
        out.append((draw(st.integers(0, 2)), batch))
        step = draw(st.sampled_from(["none"] * 4 + ["pop", "truncate"]))
        if step == "pop":
            out.append((draw(st.integers(0, 2)), "pop"))
        elif step == "truncate":
            out.append((draw(st.integers(0, 2)), ("truncate", draw(st.integers(1, 3)))))
    return out


@settings(max_examples=20)
@given(script=agent_batches())
def test_the_cached_items_equal_a_cold_read(store_url, script):
    """With reasoning items, calls, outputs, pops and truncates: the patched view is what a cold read gives,
    and no reasoning item is sent without the item stored after it."""

    def read(session: PruneStoreSession) -> list:
        items = run(session.get_items())
        assert all(i.get("type") != "reasoning" for i in items[-1:]), items
        assert_sendable(items)
        return items

    cached_prompt_equals_cold(store_url, PruneStoreSession, lambda s, batch: run(s.add_items(batch)), read, script)


def test_a_session_on_an_in_memory_store():
    """An in-memory SQLite database is one thread's connection: the session must not call it from a worker."""
    with PruneStore("sqlite://") as store:
        session = PruneStoreSession("s", store)
        run(session.add_items([{"role": "user", "content": "Hi"}, call("c1").model_dump(exclude_unset=True)]))
        assert [i.get("call_id") for i in run(session.get_items())] == [None, "c1"]


# -- concurrency ---------------------------------------------------------------------------------


def test_concurrent_adds_and_pops_lose_nothing(store_url):
    with PruneStore(store_url) as store:
        session = PruneStoreSession("s", store)
        threads = [
            threading.Thread(target=run, args=(session.add_items([{"role": "user", "content": f"m{n}"}]),))
            for n in range(10)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(i["content"] for i in run(session.get_items())) == sorted(f"m{n}" for n in range(10))

        async def pops() -> list:
            return await asyncio.gather(*(session.pop_item() for _ in range(4)))

        popped = run(pops())
        assert len({p["content"] for p in popped}) == 4  # each pop took a different item
        assert len(run(session.get_items())) == 6 and store.verify().ok


def test_gathered_tasks_on_the_async_store_lose_nothing(store_url):
    async def main() -> None:
        async with AsyncPruneStore(store_url) as store:
            session = PruneStoreSession("s", store)
            await asyncio.gather(*(session.add_items([{"role": "user", "content": f"m{n}"}]) for n in range(25)))
            assert len(await session.get_items()) == 25

    run(main())


# -- an approval: the run stops, and another process resumes it ---------------------------------


@function_tool(needs_approval=True)
def remove(path: str) -> str:
    """Remove a path."""
    return f"removed {path}"


def removal(call_id: str, path: str) -> ResponseFunctionToolCall:
    arguments = json.dumps({"path": path})
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=call_id,
        name="remove",
        arguments=arguments,
        id=f"fc_{call_id}",
        status="completed",
    )


APPROVAL_SCRIPT = [call("c1", "/a"), call("c2", "/a"), removal("r1", "/a/old.csv"), say("Removed.", "msg_done")]

_RESUME = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[4])  # the tests' folder: the scripted model and the tools
    from agents import Agent, RunConfig, Runner, SQLiteSession
    from agents.run_state import RunState
    from test_openai_agents import APPROVAL_SCRIPT, ScriptedModel, list_files, remove
    from prunestore import AsyncPruneStore
    from prunestore.integrations.openai_agents import PruneStoreSession

    async def main(kind, where, state_file):
        model = ScriptedModel(APPROVAL_SCRIPT[3:])
        agent = Agent(name="files", instructions="You tidy folders.", model=model, tools=[list_files, remove])
        state = await RunState.from_json(agent, json.loads(Path(state_file).read_text()))
        state.approve(state.get_interruptions()[0])
        if kind == "ours":
            store = AsyncPruneStore(where)
            session = PruneStoreSession("tidy", store)
            config = RunConfig(call_model_input_filter=session.model_input_filter)
        else:
            store, session, config = None, SQLiteSession("tidy", where), RunConfig()
        result = await Runner.run(agent, state, session=session, run_config=config)
        print(json.dumps({"output": result.final_output, "inputs": model.inputs, "items": await session.get_items()}))
        if store is not None:
            await store.close()

    asyncio.run(main(*sys.argv[1:4]))
    """
)


@pytest.mark.parametrize("kind", ["ours", "sdk"])
def test_an_approval_resumed_in_another_process(store_url, tmp_path, kind):
    """The run stops for an approval; another process resumes it from the serialized state. Each item is
    stored once, every model call is sent the session's prompt, and the SDK's own session agrees where
    nothing was pruned."""

    async def first_half(where: str):
        model = ScriptedModel(APPROVAL_SCRIPT[:3])
        agent = Agent(name="files", instructions="You tidy folders.", model=model, tools=[list_files, remove])
        if kind == "ours":
            store = AsyncPruneStore(where)
            session: Any = PruneStoreSession("tidy", store)
            config = RunConfig(call_model_input_filter=session.model_input_filter)
        else:
            store, session, config = None, SQLiteSession("tidy", where), RunConfig()
        result = await Runner.run(agent, "List /a twice, then remove /a/old.csv.", session=session, run_config=config)
        assert [getattr(i.raw_item, "call_id", None) for i in result.interruptions] == ["r1"]
        if store is not None:
            await store.close()
        return model.inputs, result.to_state().to_json()

    where = store_url if kind == "ours" else str(tmp_path / "sdk.db")
    before, state = run(first_half(where))
    (tmp_path / "state.json").write_text(json.dumps(state))
    script = tmp_path / "resume.py"
    script.write_text(_RESUME)
    tests = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, str(script), kind, where, str(tmp_path / "state.json"), tests],
        capture_output=True,
        text=True,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    after = json.loads(done.stdout.splitlines()[-1])
    assert after["output"] == "Removed."
    kinds = [i.get("call_id") or i.get("role") for i in after["items"]]
    sent = [[i.get("call_id") or i.get("role") for i in model_input] for model_input in [*before, *after["inputs"]]]
    if kind == "sdk":  # the SDK's own session: everything, every item once
        assert kinds == ["user", "c1", "c1", "c2", "c2", "r1", "r1", "assistant"]
        assert sent[-1] == kinds[:-1]
        return
    # c2 lists /a again: c1 and its output went, from the store and from every model call after
    assert kinds == ["user", "c2", "c2", "r1", "r1", "assistant"]
    assert sent == [["user"], ["user", "c1", "c1"], ["user", "c2", "c2"], ["user", "c2", "c2", "r1", "r1"]]
    assert after["inputs"][-1] == after["items"][:-1]  # the resumed call was sent the session's prompt
    with PruneStore(store_url) as store:
        assert len(store.messages("tidy")) == 8  # every item stored once, the approved call and its output too
        assert store.verify("tidy").ok


def test_the_recall_tool_gives_the_model_back_a_pruned_output(open_session):
    """`session.recall_tool()` answers from the session's items out of the prompt: here, the superseded output."""

    async def main() -> None:
        session, _ = open_session("agent")
        recall_call = ResponseFunctionToolCall(
            type="function_call", call_id="r1", name="recall", arguments=json.dumps({"words": "A.CSV"}), id="fc_r1"
        )
        model = ScriptedModel([call("c1"), call("c2"), recall_call, say("Found it.")])
        tools = [list_files, session.recall_tool()]
        agent = Agent(name="files", instructions="You list files.", model=model, tools=tools)
        await Runner.run(agent, "List twice, then recall.", session=session)
        items = await session.get_items()
        (answer,) = [i["output"] for i in items if i.get("type") == "function_call_output" and i["call_id"] == "r1"]
        assert answer == "[tool_output, turn 1] a.csv b.csv"
        assert_paired(items)

    run(main())
