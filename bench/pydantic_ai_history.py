"""Per model request cost of PruneStoreHistory in a Pydantic AI agent, beside keeping the history in a list.

For each size (100, 1,000 and 10,000 messages of history: questions, tool
calls of a few tools whose returns go stale, answers), two agents with one
scripted `FunctionModel`: one given the history as a list
(``message_history=result.all_messages()``, as Pydantic AI's docs do), one
with `PruneStoreHistory` on a SQLite store and a conversation id. A turn is
one ``run``: a question, a tool call, its return, an answer (two model
requests). Turns are taken round robin across sizes. Prints the p50 ms per
model request of each agent's whole run, the time spent in prunestore's
hooks per request (the model not counted), and the messages the model got.

    python bench/pydantic_ai_history.py [--sizes 100,1000,10000] [--turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import statistics
import subprocess
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from prunestore import PruneStore
from prunestore.integrations.pydantic_ai import PruneStoreHistory

TOOLS = ["search", "read_file", "run_sql", "weather"]


def history(turns: int) -> list[ModelMessage]:
    """`turns` turns of four messages: a question, a call (a few tools, a few arguments), its return, an answer."""
    out: list[ModelMessage] = []
    for n in range(turns):
        name, query, call_id = TOOLS[n % 4], f"topic {n % 7}", f"call-{n}"
        out += [
            ModelRequest(parts=[UserPromptPart(f"Question {n}: what about {query}?")]),
            ModelResponse(parts=[ToolCallPart(name, {"q": query}, tool_call_id=call_id)]),
            ModelRequest(parts=[ToolReturnPart(name, f"{name} result for {query} " * 30, tool_call_id=call_id)]),
            ModelResponse(parts=[TextPart(f"Answer {n}, from the result.")]),
        ]
    return out


class Script:
    """Answers with a call of turn `n`'s tool, then with an answer; remembers how many messages it was sent."""

    def __init__(self) -> None:
        self.turn = 0
        self.sent = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.sent = len(messages)
        if not any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            n = self.turn
            return ModelResponse(parts=[ToolCallPart(TOOLS[n % 4], {"q": f"topic {n % 7}"}, tool_call_id=f"c-{n}")])
        return ModelResponse(parts=[TextPart(f"Answer {self.turn}.")])


class TimedHistory(PruneStoreHistory):
    """PruneStoreHistory, adding up the time spent in its hooks."""

    spent = 0.0

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        started = time.perf_counter()
        try:
            return await super().before_model_request(ctx, request_context)
        finally:
            self.spent += time.perf_counter() - started

    async def after_run(self, ctx: Any, *, result: Any) -> Any:
        started = time.perf_counter()
        try:
            return await super().after_run(ctx, result=result)
        finally:
            self.spent += time.perf_counter() - started


def tool_named(name: str) -> Any:
    def run(q: str) -> str:
        return f"{name} result for {q} " * 30

    return run


def agent_for(script: Script, *capabilities: Any) -> Agent:
    agent = Agent(FunctionModel(script), instructions="Answer from the tools.", capabilities=list(capabilities))
    for name in TOOLS:
        agent.tool_plain(name=name)(tool_named(name))
    return agent


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = ("list", "prunestore", "hooks")
    times: dict[tuple[int, str], list[float]] = {(s, k): [] for s in sizes for k in kinds}
    sent: dict[tuple[int, str], int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {s: PruneStore(f"sqlite:///{Path(tmp) / f'{s}.db'}") for s in sizes}
        lists: dict[int, list[ModelMessage]] = {}
        agents: dict[tuple[int, str], tuple[Agent, Script]] = {}
        timed: dict[int, TimedHistory] = {}
        for size in sizes:
            script = Script()
            lists[size] = history(size // 4)
            agents[size, "list"] = (agent_for(script), script)
            timed[size] = TimedHistory(stores[size], session="conversation")
            ours = Script()
            agents[size, "prunestore"] = (agent_for(ours, timed[size]), ours)
            ours.turn = script.turn = size // 4
            await agents[size, "prunestore"][0].run("Hello.", message_history=lists[size])  # the store takes it
            lists[size] = (await agents[size, "list"][0].run("Hello.", message_history=lists[size])).all_messages()
        for t in range(args.turns):
            for size in sizes:
                for kind in ("list", "prunestore"):
                    agent, script = agents[size, kind]
                    script.turn = size // 4 + t
                    gc.collect()
                    spent = timed[size].spent
                    started = time.perf_counter()
                    if kind == "list":
                        result = await agent.run(f"Question {script.turn}.", message_history=lists[size])
                        lists[size] = result.all_messages()
                    else:
                        await agent.run(f"Question {script.turn}.")
                        times[size, "hooks"].append((timed[size].spent - spent) / 2)
                    times[size, kind].append((time.perf_counter() - started) / 2)
                    sent[size, kind] = script.sent
        for store in stores.values():
            store.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"`python bench/pydantic_ai_history.py --sizes {args.sizes} --turns {args.turns}`")
    print(f"{date.today()}, commit {commit or 'unknown'}, {platform.machine()}, Python {platform.python_version()}")
    print()
    head = ["messages of history", "list ms / request", "prunestore ms / request", "prunestore's hooks ms"]
    head += ["list: messages sent", "prunestore: messages sent"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for size in sizes:
        p50 = {k: statistics.median(times[size, k]) * 1e3 for k in kinds}
        row = [f"{size:,}", f"{p50['list']:.2f}", f"{p50['prunestore']:.2f}", f"{p50['hooks']:.2f}"]
        row += [f"{sent[size, 'list']:,}", f"{sent[size, 'prunestore']:,}"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    asyncio.run(main())
