"""AnthropicHistory with the Anthropic SDK's own client, its HTTP answered by a script (no network).

Each model call goes through ``client.messages.create``; the test checks the
body the SDK sent: it is the history's prompt, valid for the API, and where
nothing was pruned it is what the caller's own list would have sent.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator

import pytest
from helpers import tool_loop_turns
from hypothesis import given, settings
from hypothesis import strategies as st
from providers import ScriptedAPI, validate_anthropic

from prunestore import AsyncPruneStore, Delta, InvalidMessageError, Policy, PruneStore
from prunestore.integrations.anthropic_messages import AnthropicHistory

anthropic = pytest.importorskip("anthropic")
httpx = pytest.importorskip("httpx2")  # the SDK's HTTP library (a fork of httpx, with the same MockTransport)


def tool_use(call_id: str, city: str) -> dict:
    return {"type": "tool_use", "id": call_id, "name": "weather", "input": {"city": city}}


def reply(*blocks: dict) -> dict:
    """A Messages API response with these content blocks."""
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(blocks),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


THINKING = {"type": "thinking", "thinking": "The user wants the weather.", "signature": "c2lnbmF0dXJl"}
SCRIPT = [  # the model's answers, in order: two turns ask for Paris, so the first result is superseded
    reply(THINKING, tool_use("t1", "Paris")),
    reply({"type": "text", "text": "Sunny in Paris."}),
    reply(tool_use("t2", "Oslo")),
    reply({"type": "text", "text": "Snow in Oslo."}),
    reply({"type": "text", "text": "Let me look again."}, tool_use("t3", "Paris")),
    reply({"type": "text", "text": "Rain in Paris now."}),
]


def scripted(script: list[dict]) -> ScriptedAPI:
    return ScriptedAPI(script, httpx.Response)


def client(model: ScriptedAPI):
    return anthropic.Anthropic(api_key="test", http_client=httpx.Client(transport=httpx.MockTransport(model)))


def without_breakpoint(messages: list[dict]) -> list[dict]:
    """The messages without the breakpoint on the last one (which needs blocks: a string becomes a text block)."""
    *earlier, last = copy.deepcopy(messages)
    (*blocks, final) = last["content"]
    final.pop("cache_control")
    if not blocks and final["type"] == "text" and set(final) == {"type", "text"}:
        return [*earlier, {**last, "content": final["text"]}]
    return [*earlier, {**last, "content": [*blocks, final]}]


def converse(history: AnthropicHistory, model: ScriptedAPI, questions: list[str]) -> list[dict]:
    """The tool loop a caller writes; returns the list of messages it would keep without prunestore."""
    sdk, plain = client(model), []
    for question in questions:
        step: list[dict] = [{"role": "user", "content": question}]
        while step:
            history.add(step)
            plain.extend(step)
            sent = history.messages()
            response = sdk.messages.create(model="claude-test", max_tokens=100, messages=sent)
            assert model.bodies[-1]["messages"] == sent  # what went over the wire is the history's prompt
            validate_anthropic(None, sent)
            assert sent[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
            history.add([response])  # the SDK's Message, as create returns it
            plain.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]})
            uses = [b for b in response.content if b.type == "tool_use"]
            results = [
                {"type": "tool_result", "tool_use_id": u.id, "content": f"weather in {u.input['city']}"} for u in uses
            ]
            step = [{"role": "user", "content": results}] if results else []
    return plain


def test_with_nothing_pruned_the_sdk_sends_what_the_callers_list_holds(store):
    model = scripted(SCRIPT[:4])
    history = AnthropicHistory("s", store)
    plain = converse(history, model, ["Weather in Paris?", "And Oslo?"])
    for body, upto in zip(model.bodies, (1, 3, 5, 7), strict=True):
        assert without_breakpoint(body["messages"]) == plain[:upto]  # field by field, thinking and signature too
    assert store.verify().ok


def test_a_superseded_result_goes_with_its_call_and_its_reasoning(store):
    model = scripted(SCRIPT)
    history = AnthropicHistory("s", store)
    converse(history, model, ["Weather in Paris?", "And Oslo?", "Paris again?"])
    last = model.bodies[-1]["messages"]
    blocks = [b for m in last if isinstance(m["content"], list) for b in m["content"]]
    assert {b["id"] for b in blocks if b["type"] == "tool_use"} == {"t2", "t3"}  # t1's result was superseded
    assert not any(b["type"] == "thinking" for b in blocks)  # its reasoning went with it, never alone
    assert {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"} == {"t2", "t3"}
    assert "Sunny in Paris." in json.dumps(last)  # the answer stays
    # Another store on the session (another process) sends the same prompt.
    with PruneStore(store.url) as other:
        assert AnthropicHistory("s", other).messages() == history.messages()
    assert store.verify().ok


def test_with_extended_thinking_the_last_assistant_turn_starts_with_its_thinking(store):
    """The model says a word before its call and calls the same tool again in the same loop: the first call
    is superseded, its thinking stays with its text, and the merged last turn still starts with thinking."""
    again = {"type": "thinking", "thinking": "Check once more.", "signature": "c2ln"}
    model = scripted(
        [
            reply(THINKING, {"type": "text", "text": "Let me look."}, tool_use("t1", "Paris")),
            reply(again, tool_use("t2", "Paris")),
            reply({"type": "text", "text": "Sunny in Paris."}),
        ]
    )
    history = AnthropicHistory("s", store)
    converse(history, model, ["Weather in Paris?"])  # each request validated: thinking leads its turn
    last = model.bodies[-1]["messages"]
    assert [b["type"] for b in last[1]["content"]] == ["thinking", "text", "thinking", "tool_use"]
    assert last[1]["content"][3]["id"] == "t2"


def test_the_reasoning_of_a_call_still_in_the_prompt_is_sent_with_it(store):
    history = AnthropicHistory("s", store, cache=False)
    history.add(
        [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [THINKING, tool_use("t1", "Paris")]},
        ]
    )
    sent = history.messages()  # the call waits for its result: it stays, with its reasoning
    assert sent == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [THINKING, tool_use("t1", "Paris")]},
    ]
    validate_anthropic(None, sent, waiting_at_end=True)


def test_bad_messages_are_refused_by_name(store):
    history = AnthropicHistory("s", store)
    with pytest.raises(InvalidMessageError, match="messages\\[0\\]"):
        history.add([{"role": "system", "content": "x"}])
    with pytest.raises(InvalidMessageError, match="messages="):
        history.add({"role": "user", "content": "x"})
    with pytest.raises(InvalidMessageError, match="tool_use_id"):
        history.add([{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}])
    assert history.messages() == [] and history.add([]) == Delta()
    assert history.add([{"role": "user", "content": "x"}]).appended == 1  # each add gives its append's Delta


def test_on_the_async_store_and_the_async_client(store_url):
    async def main() -> None:
        model = scripted(SCRIPT[:2])
        sdk = anthropic.AsyncAnthropic(
            api_key="test", http_client=httpx.AsyncClient(transport=httpx.MockTransport(model))
        )
        async with AsyncPruneStore(store_url) as store:
            history = AnthropicHistory("a", store)
            added = await history.aadd([{"role": "user", "content": "Weather in Paris?"}])
            assert (added.appended, len(added.live_added), await history.aadd([])) == (1, 1, Delta())
            while True:
                sent = await history.amessages()
                response = await sdk.messages.create(model="claude-test", max_tokens=100, messages=sent)
                assert model.bodies[-1]["messages"] == sent
                await history.aadd([response])
                uses = [b for b in response.content if b.type == "tool_use"]
                if not uses:
                    break
                await history.aadd(
                    [
                        {
                            "role": "user",
                            "content": [{"type": "tool_result", "tool_use_id": u.id, "content": "sun"} for u in uses],
                        }
                    ]
                )
            validate_anthropic(None, await history.amessages())
            assert len(await history.amessages()) == 4 and (await store.verify()).ok
            with pytest.raises(TypeError, match="aadd"):
                history.messages()

    asyncio.run(main())


def test_the_merge_kept_between_calls_equals_a_fresh_one(store):
    """`messages()` merges only the items that changed since the session's last call: the result is a fresh merge's."""
    from prunestore.integrations.anthropic_messages import ANTHROPIC_MESSAGES, alternating

    history = AnthropicHistory("s", store)

    def check() -> None:
        sent = history.messages()
        # the same messages; breakpoints aside (a call after a change marks where the previous prompt held)
        assert unmarked(sent) == unmarked(alternating(store.view("s", ANTHROPIC_MESSAGES), True))
        assert sent[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        validate_anthropic(None, sent, waiting_at_end=True)

    for n in range(12):
        city = ["Paris", "Oslo", "Rome"][n % 3]  # every third turn supersedes an earlier result
        history.add([{"role": "user", "content": f"Weather in {city}?"}])
        check()
        history.add([{"role": "assistant", "content": [{"type": "text", "text": "Looking."}, tool_use(f"t{n}", city)]}])
        check()
        history.add([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "sun"}]}])
        check()
        history.add([{"role": "assistant", "content": f"Answer {n}."}])
        check()
        if n % 2 == 0:
            history.add([{"role": "assistant", "content": "One more thing."}])  # merges into the answer
            check()
        if n % 4 == 3:
            store.pop("s")  # the items change at the end
            check()
            store.truncate("s", store.messages("s")[5].id)  # and in the middle
            check()
    sent = history.messages()
    with pytest.raises(TypeError, match="read-only"):  # shared with the cache: a change is refused
        sent[0]["content"] = "changed by the caller"
    mine = copy.deepcopy(sent)
    mine[0]["content"] = "changed by the caller"
    assert history.messages() == sent


def unmarked(messages: list[dict]) -> list[dict]:
    """The messages without breakpoints, each content as blocks."""
    return [{"role": m["role"], "content": [b for _, b, _ in cached_blocks([m])]} for m in messages]


def breakpoints(body: dict) -> int:
    return json.dumps(body).count('"cache_control"')


def test_a_request_sends_the_system_prompt_with_a_breakpoint_of_its_own(store):
    model = scripted(SCRIPT[:2])
    sdk = client(model)
    history = AnthropicHistory("s", store, system="You answer about the weather.")
    history.add([{"role": "user", "content": "Weather in Paris?"}])
    while True:
        request = history.request()
        response = sdk.messages.create(model="claude-test", max_tokens=100, **request)
        body = model.bodies[-1]
        assert body["system"] == [
            {"type": "text", "text": "You answer about the weather.", "cache_control": {"type": "ephemeral"}}
        ]
        assert body["messages"] == history.messages() == request["messages"]
        assert breakpoints(body) == 2  # the system's and the prompt's last block: two of the API's four
        validate_anthropic(None, body["messages"])
        history.add([response])
        uses = [b for b in response.content if b.type == "tool_use"]
        if not uses:
            break
        results = [{"type": "tool_result", "tool_use_id": u.id, "content": "sun"} for u in uses]
        history.add([{"role": "user", "content": results}])
    assert len(model.bodies) == 2 and store.verify().ok
    # The system prompt is not stored: another history on the session sends its own, or none.
    assert "system" not in AnthropicHistory("s", store).request()
    assert "You answer" not in json.dumps([m.content for m in store.messages("s")])


def test_the_system_prompt_as_blocks_keeps_a_breakpoint_the_caller_set(store):
    hour = {"type": "ephemeral", "ttl": "1h"}
    blocks = [{"type": "text", "text": "Rules."}, {"type": "text", "text": "Tools.", "cache_control": hour}]
    history = AnthropicHistory("s", store, system=blocks)
    history.add([{"role": "user", "content": "Hello"}])
    assert history.request()["system"] == blocks
    plain = AnthropicHistory("s", store, system=[{"type": "text", "text": "Rules."}], cache=False)
    assert plain.request() == {"system": [{"type": "text", "text": "Rules."}], "messages": plain.messages()}
    assert breakpoints(plain.request()) == 0
    assert blocks[1]["cache_control"] is hour and "cache_control" not in blocks[0]  # the caller's list unchanged
    assert AnthropicHistory("s", store, system="").request() == {"messages": history.messages()}


@pytest.mark.parametrize("marked", [0, 1, 2, 3])
def test_a_request_leaves_one_of_the_four_breakpoints_for_tools_whatever_the_system_prompt_holds(store, marked):
    """The caller's own breakpoints in the system prompt count: ours give way (the system's end first, then the
    end of what the next event leaves), but the prompt's last block keeps its breakpoint."""
    system = [{"type": "text", "text": f"Rule {n}.", "cache_control": {"type": "ephemeral"}} for n in range(marked)]
    history = AnthropicHistory("s", store, system=[*system, {"type": "text", "text": "Be brief."}])
    history.add([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Where?"}])
    history.request()  # the first call: the next one finds it cached
    uses = [tool_use(f"t{n}", f"City {n}") for n in range(20)]
    results = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "sun"} for n in range(20)]
    asked = {"role": "user", "content": "In twenty cities."}
    history.add([asked, {"role": "assistant", "content": uses}, {"role": "user", "content": results}])
    body = history.request()
    assert breakpoints(body) == min(marked + 3, 3 if marked < 3 else marked + 1)
    assert "cache_control" in body["messages"][-1]["content"][-1]
    if marked == 0:  # room for all of ours: the system's end, and where the previous call's prompt ended
        assert "cache_control" in body["system"][-1] and breakpoints({"m": body["messages"]}) == 2


def test_a_system_prompt_that_is_not_text_is_refused_by_name(store):
    for bad in (5, [{"type": "image", "source": {}}], ["Rules."]):
        with pytest.raises(InvalidMessageError, match="system="):
            AnthropicHistory("s", store, system=bad)


def test_an_async_request_sends_the_system_prompt(store_url):
    async def main() -> None:
        async with AsyncPruneStore(store_url) as store:
            history = AnthropicHistory("a", store, system="Be brief.")
            await history.aadd([{"role": "user", "content": "Hi"}])
            request = await history.arequest()
            assert request["system"][0]["text"] == "Be brief." and request["messages"] == await history.amessages()
            assert breakpoints(request) == 2

    asyncio.run(main())


# -- the breakpoint before the pending messages: an event leaves the part before it cached ------


def cached_blocks(messages: list[dict]) -> list[tuple[str, dict, bool]]:
    """The prompt's blocks in order: role, block without its breakpoint, whether it had one."""
    out = []
    for m in messages:
        for block in [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]:
            out.append((m["role"], {k: v for k, v in block.items() if k != "cache_control"}, "cache_control" in block))
    return out


def before_the_pending(messages: list[dict]) -> list[tuple[str, dict, bool]] | None:
    """The blocks up to the breakpoint that is not the last one; None when the prompt has only the last."""
    blocks = cached_blocks(messages)
    marks = [n for n, (_, _, marked) in enumerate(blocks) if marked]
    return [(role, block, False) for role, block, _ in blocks[: marks[0] + 1]] if len(marks) == 2 else None


def tool_loop(history: AnthropicHistory, turns: list[list[list[tuple[str, str]]]], listing: int = 40) -> Iterator:
    """Add an agent's turns to the history a message at a time (results of a step together, as the API
    sends them), yielding after each add."""
    for t, steps in enumerate(turns):
        history.add([{"role": "user", "content": f"Question {t}: what is in these folders?"}])
        yield
        for step in steps:
            history.add([{"role": "assistant", "content": [tool_use(c, path) for c, path in step]}])
            yield
            results = [
                {"type": "tool_result", "tool_use_id": c, "content": f"{path}: " + "x " * listing} for c, path in step
            ]
            history.add([{"role": "user", "content": results}])
            yield
        history.add([{"role": "assistant", "content": f"Answer {t}."}])
        yield


def events_keep_the_part_before_the_pending(store: PruneStore, turns) -> int:
    """Drive the loop; at each event that takes out what was pending and only messages after those (the
    append's own drops), bringing back nothing, the prompt after it begins with the blocks up to the earlier
    breakpoint of the prompt before it, and has a breakpoint where the API looks that part up. Returns how
    many such events had that breakpoint."""
    history = AnthropicHistory("s", store)
    checked, before, pending, seqs, events = 0, None, set(), {}, 0
    for _ in tool_loop(history, turns):
        sent = history.messages()
        validate_anthropic(None, sent, waiting_at_end=True)
        assert sum(marked for _, _, marked in cached_blocks(sent)) <= 2
        rows = store.messages("s")
        in_prompt = {m.id for m in rows if m.live}
        now = store.stats("s").events
        if before is not None and before[0] is not None and now > events:
            gone, back = before[1] - in_prompt, in_prompt - before[1]
            last_pending = max((seqs[p] for p in pending), default=None)
            after_pending = last_pending is not None and all(
                seqs.get(i, 1 << 62) > last_pending for i in gone - pending
            )
            if after_pending and not back & seqs.keys():
                after = [(role, block, False) for role, block, _ in cached_blocks(sent)]
                assert after[: len(before[0])] == before[0]
                # and the API finds it: a breakpoint at its end, or up to 20 blocks after (the API's look-back)
                marks = [n for n, (_, _, marked) in enumerate(cached_blocks(sent)) if marked]
                assert any(0 <= n - (len(before[0]) - 1) < 20 for n in marks), (marks, len(before[0]))
                checked += 1
        before, events = (before_the_pending(sent), in_prompt), now
        pending, seqs = {m.id for m in rows if m.verdict == "pending"}, {m.id: m.seq for m in rows}
    assert store.verify("s").ok
    return checked


def test_an_event_leaves_the_prompt_before_the_pending_messages_in_the_cache(open_store):
    store = open_store(Policy(budget=900, clear_at_least=300))
    again = [[[(f"c{i}", f"/d{i % 4}")] for i in range(24)]]  # the same four folders again: superseded results
    folders = [*KEEP, *again]
    assert events_keep_the_part_before_the_pending(store, folders) >= 2


def renamed(run: int, turns: list) -> list:
    return [[[(f"r{run}-{call}", path) for call, path in step] for step in turn] for turn in turns]


KEEP = [[[(f"k{i}", f"/keep{i}")] for i in range(3)]]  # listed once: their results stay
agent_runs = st.lists(tool_loop_turns(), min_size=1, max_size=4).map(
    lambda runs: KEEP + [turn for n, run in enumerate(runs) for turn in renamed(n, run)]
)


@settings(max_examples=25)
@given(turns=agent_runs, budget=st.integers(300, 3000), clear=st.integers(40, 400))
def test_any_event_that_takes_out_only_pending_messages_keeps_the_earlier_breakpoints_part(
    store_url, turns, budget, clear
):
    with PruneStore(store_url) as store:
        for name in store.sessions():  # an empty start for every example
            store.delete_session(name)
        store.rebuild(policy=Policy(budget=budget, clear_at_least=clear))
        events_keep_the_part_before_the_pending(store, turns)


def test_the_first_call_after_a_cut_marks_the_end_of_what_it_kept(store):
    history = AnthropicHistory("s", store)
    for n in range(6):
        history.add([{"role": "user", "content": f"Question {n}"}, {"role": "assistant", "content": f"Answer {n}"}])
    before = history.messages()
    store.truncate("s", store.messages("s")[5].id)  # back to the third answer
    history.add([{"role": "user", "content": "Another question"}])
    after = history.messages()
    marks = [n for n, (_, _, marked) in enumerate(cached_blocks(after)) if marked]
    assert marks == [5, 6]  # the end of the part the previous call sent too (its cache holds it), and the last
    assert unmarked(after[:6]) == unmarked(before[:6])
    history.add([{"role": "assistant", "content": "Answer again"}])
    assert [n for n, (_, _, marked) in enumerate(cached_blocks(history.messages())) if marked] == [7]  # grown only


def test_a_call_that_adds_more_blocks_than_the_api_looks_back_over_marks_where_the_last_ended(store):
    history = AnthropicHistory("s", store)
    history.add([{"role": "user", "content": "List 25 folders."}])
    history.add([{"role": "assistant", "content": [tool_use(f"t{n}", f"/d{n}") for n in range(25)]}])
    first = history.messages()
    results = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "a.csv"} for n in range(25)]
    history.add([{"role": "user", "content": results}])  # 25 blocks: past the 20 the API looks back over
    marks = [n for n, (_, _, marked) in enumerate(cached_blocks(history.messages())) if marked]
    assert marks == [len(cached_blocks(first)) - 1, len(cached_blocks(first)) + 24]
    history.add([{"role": "assistant", "content": "All listed."}])
    assert [n for n, (_, _, m) in enumerate(cached_blocks(history.messages())) if m] == [51]  # a block: the last
