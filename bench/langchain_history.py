"""Per-turn cost of prunestore's LangChain history against LangChain's own SQL chat message history.

For each size (100, 1,000 and 10,000 messages of history, an agent-like mix
of user turns, tool calls whose results go stale and answers; and 100,000 for
prunestore alone), one session per history class on one SQLite file each. A
turn makes a new history object, as a `get_session_history` factory does,
appends a human message, an AI message with a tool call, its result and an
answer, then reads the history the model gets (`history.messages`). Turns
are taken round robin across sizes and classes, so noise falls on all alike.
Prints the p50 ms of a turn, the messages the model gets, and the ratios.

    pip install langchain-community      # for SQLChatMessageHistory (not a prunestore dependency)
    python bench/langchain_history.py [--sizes 100,1000,10000] [--solo-sizes 100000] [--turns 30]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from prunestore import PruneStore
from prunestore.integrations.langchain import PrunedChatMessageHistory

warnings.filterwarnings("ignore", category=DeprecationWarning)


def turn_messages(n: int) -> list:
    """One agent turn: four messages; the listing call repeats, so older results go stale."""
    call = {"name": "list_files", "args": {"path": f"/data/{n % 5}"}, "id": f"call-{n}"}
    return [
        HumanMessage(f"Question {n}: what changed in folder {n % 5}?"),
        AIMessage("", tool_calls=[call]),
        ToolMessage(
            f"files in /data/{n % 5}: " + " ".join(f"f{i}.csv" for i in range(n % 7 + 3)), tool_call_id=f"call-{n}"
        ),
        AIMessage(f"Folder {n % 5} now has {n % 7 + 3} files."),
    ]


def main() -> int:
    from langchain_community.chat_message_histories import SQLChatMessageHistory

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--solo-sizes", default="100000", help="Sizes measured for prunestore alone.")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--cache-mib", type=int, default=512, help="prunestore's live_cache_bytes, in MiB.")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    solo = [int(s) for s in args.solo_sizes.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        # A session of 100,000 messages takes about 150 MB of cache (the default holds 64 MiB).
        store = PruneStore(f"sqlite:///{Path(tmp) / 'prunestore.db'}", live_cache_bytes=args.cache_mib * 2**20)
        theirs_url = f"sqlite:///{Path(tmp) / 'langchain.db'}"
        factories: dict[str, Callable[[str], BaseChatMessageHistory]] = {
            "prunestore": lambda session: PrunedChatMessageHistory(session, store),
            "langchain SQL": lambda session: SQLChatMessageHistory(session, connection=theirs_url),
        }
        runs = [(size, name) for size in sizes for name in factories] + [(size, "prunestore") for size in solo]
        turn_of = {}
        for size, name in runs:
            history = factories[name](f"s{size}")
            for start in range(0, size // 4, 250):  # history built in batches of 1,000 messages
                history.add_messages([m for n in range(start, min(start + 250, size // 4)) for m in turn_messages(n)])
            turn_of[size, name] = size // 4
            print(f"  built {size:,} messages for {name}", flush=True)
        timings: dict[tuple[int, str], list[float]] = {run: [] for run in runs}
        sent = {}
        for _ in range(args.turns):
            for run in runs:
                size, name = run
                gc.collect()  # so that one run's garbage is not collected in another's turn
                start = time.perf_counter()
                history = factories[name](f"s{size}")  # a new object per turn, as get_session_history makes
                history.add_messages(turn_messages(turn_of[run]))
                prompt = history.messages
                timings[run].append((time.perf_counter() - start) * 1000)
                sent[run] = len(prompt)
                del prompt, history  # freed here, not in the next run's timed turn
                turn_of[run] += 1
        store.close()
    p50 = {run: statistics.median(times) for run, times in timings.items()}
    print(f"{'messages':>9} {'history':<14} {'p50 ms/turn':>12} {'messages sent':>14}")
    for run in runs:
        print(f"{run[0]:>9,} {run[1]:<14} {p50[run]:>12.2f} {sent[run]:>14,}")
    for size in sizes:
        print(f"langchain SQL / prunestore at {size:,}: {p50[size, 'langchain SQL'] / p50[size, 'prunestore']:.1f}x")
    smallest = min(sizes)
    for size in sorted(set(sizes + solo) - {smallest}):
        ratio = p50[size, "prunestore"] / p50[smallest, "prunestore"]
        print(f"prunestore at {size:,} / at {smallest:,}: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
