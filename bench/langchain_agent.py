"""Per model call cost of PruneStoreMiddleware in a LangChain `create_agent` agent, beside LangChain's own paths.

For each size (100, 1,000 and 10,000 messages in the thread: questions, tool
calls of a few tools whose results go stale, answers), three agents with one
scripted model, each on its own thread and checkpointer: plain
`create_agent`; with LangChain's `ContextEditingMiddleware` (its default
`ClearToolUsesEdit`); with `PruneStoreMiddleware` on a SQLite store. A turn is
one `invoke`: a question, a tool call, its result, an answer (two model
calls). Turns are taken round robin across sizes and agents, each run with
``durability="sync"``: LangGraph then writes each checkpoint before the next
step instead of in a background thread, which would otherwise hold the GIL
while a hook runs and be counted as the hook's time. Prints the p50 ms per
model call of each agent's whole call, and of the time spent in each
middleware's own hooks (the model and the rest of the agent not counted);
the messages the model got; and with ``--checkpointer sqlite`` the bytes a
turn adds to the checkpointer's database and to the store's (pages in
use).

    python bench/langchain_agent.py [--sizes 100,1000,10000] [--turns 20] [--checkpointer memory|sqlite]
"""

from __future__ import annotations

import argparse
import gc
import platform
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing
from datetime import date
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ContextEditingMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from prunestore import PruneStore
from prunestore.integrations.langchain import PruneStoreMiddleware

TOOLS = ["search", "read_file", "run_sql", "weather"]
KINDS = ("plain", "context editing", "prunestore")


class ScriptedModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def make_tool(name: str) -> Any:
    @tool(name)
    def run(q: str) -> str:
        """A tool whose result a later identical call supersedes."""
        return f"{name} result for {q} " * 30

    return run


def turn(n: int) -> tuple[list[BaseMessage], list[AIMessage]]:
    """Turn `n`: the messages it leaves in the thread, and the model's two replies in it."""
    call = {"name": TOOLS[n % 4], "args": {"q": f"topic {n % 7}"}, "id": f"call-{n}"}
    replies = [AIMessage("Let me look.", tool_calls=[call]), AIMessage(f"Answer {n}, from the result.")]
    result = ToolMessage(f"{call['name']} result for topic {n % 7} " * 30, tool_call_id=call["id"])
    return [HumanMessage(f"Question {n}: what about topic {n % 7}?"), replies[0], result, replies[1]], replies


class Timed(AgentMiddleware):
    """Runs `inner`'s model-call hook (its only hook), adding up the time spent in it but not in the model call."""

    def __init__(self, inner: AgentMiddleware) -> None:
        super().__init__()
        self.inner = inner
        self.spent = 0.0

    @property
    def name(self) -> str:
        return f"Timed{self.inner.name}"

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        inside = 0.0

        def timed(request: Any) -> Any:
            nonlocal inside
            started = time.perf_counter()
            try:
                return handler(request)
            finally:
                inside += time.perf_counter() - started

        started = time.perf_counter()
        response = self.inner.wrap_model_call(request, timed)
        self.spent += time.perf_counter() - started - inside
        return response


class Seen(AgentMiddleware):
    """Innermost: how many messages the model got."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.sent = len(request.messages)
        return handler(request)


def replies_for(script: list[AIMessage]) -> Iterator[AIMessage]:
    while True:
        yield script.pop(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--checkpointer", choices=["memory", "sqlite"], default="memory")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    times: dict[tuple[int, str], list[float]] = {(s, k): [] for s in sizes for k in KINDS}
    hooks: dict[tuple[int, str], list[float]] = {(s, k): [] for s in sizes for k in KINDS}
    sent: dict[tuple[int, str], int] = {}
    grown: dict[tuple[int, str], float] = {}  # (size, "checkpoints" or "store"): bytes before, then a turn's
    tools = [make_tool(name) for name in TOOLS]
    config: Any = {"configurable": {"thread_id": "thread"}}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        agents: dict[tuple[int, str], tuple[Any, list[AIMessage], Seen, Timed | None, Path]] = {}
        for size in sizes:
            for kind in KINDS:
                files = Path(tmp) / f"{size}-{kind.replace(' ', '-')}"
                files.mkdir()
                saver: Any = (
                    stack.enter_context(SqliteSaver.from_conn_string(str(files / "checkpoints.db")))
                    if args.checkpointer == "sqlite"
                    else InMemorySaver()
                )
                script: list[AIMessage] = [AIMessage("Ready.")]
                seen = Seen()
                timed = None
                if kind == "prunestore":
                    store = stack.enter_context(PruneStore(f"sqlite:///{files / 'store.db'}"))
                    timed = Timed(PruneStoreMiddleware(store, session="thread"))
                elif kind == "context editing":
                    timed = Timed(ContextEditingMiddleware())
                middleware: list[Any] = [timed, seen] if timed is not None else [seen]
                agent = create_agent(
                    ScriptedModel(messages=replies_for(script)), tools=tools, middleware=middleware, checkpointer=saver
                )
                history = [m for n in range(size // 4) for m in turn(n)[0]]
                agent.invoke({"messages": history[:-1]}, config)  # the last answer is the model's "Ready."
                agents[size, kind] = (agent, script, seen, timed, files)
        for t in range(args.turns):
            for size in sizes:
                for kind in KINDS:
                    agent, script, seen, timed, folder = agents[size, kind]
                    messages, replies = turn(size // 4 + t)
                    script.extend(replies)
                    if t == 0 and kind == "prunestore":
                        grown[size, "checkpoints"] = _bytes(folder, "checkpoints")
                        grown[size, "store"] = _bytes(folder, "store")
                    gc.collect()
                    started = time.perf_counter()
                    spent = timed.spent if timed is not None else 0.0
                    agent.invoke({"messages": [messages[0]]}, config, durability="sync")
                    times[size, kind].append((time.perf_counter() - started) / 2)
                    hooks[size, kind].append((timed.spent - spent if timed is not None else 0.0) / 2)
                    sent[size, kind] = seen.sent
        for size in sizes:
            for part in ("checkpoints", "store"):
                after = _bytes(agents[size, "prunestore"][4], part)
                grown[size, part] = (after - grown[size, part]) / args.turns
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    options = f"--sizes {args.sizes} --turns {args.turns} --checkpointer {args.checkpointer}"
    print(f"`python bench/langchain_agent.py {options}`")
    print(f"{date.today()}, commit {commit or 'unknown'}, {platform.machine()}, Python {platform.python_version()}")
    print()
    head = ["messages in the thread"] + [f"{k} agent ms / call" for k in KINDS]
    head += ["context editing's hooks ms", "prunestore's hooks ms"]
    head += [f"{k}: messages sent" for k in KINDS]
    if args.checkpointer == "sqlite":
        head += ["checkpoints KB / turn", "store KB / turn"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for size in sizes:
        p50 = {k: statistics.median(times[size, k]) * 1e3 for k in KINDS}
        row = [f"{size:,}"] + [f"{p50[k]:.2f}" for k in KINDS]
        row += [f"{statistics.median(hooks[size, k]) * 1e3:.2f}" for k in KINDS[1:]]
        row += [f"{sent[size, k]:,}" for k in KINDS]
        if args.checkpointer == "sqlite":
            row += [f"{grown[size, 'checkpoints'] / 1e3:,.1f}", f"{grown[size, 'store'] / 1e3:,.1f}"]
        print("| " + " | ".join(row) + " |")


def _bytes(folder: Path, name: str) -> float:
    """Bytes of the pages in use in the SQLite database `name` in `folder`: the checkpointer's or the store's."""
    with closing(sqlite3.connect(folder / f"{name}.db")) as db:
        pages, free, size = (
            db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size")
        )
    return (pages - free) * size


if __name__ == "__main__":
    main()
