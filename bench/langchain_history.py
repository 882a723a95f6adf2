"""Per-turn cost of prunestore's LangChain history against LangChain's own SQL chat message history.

For each size (100, 1,000 and 10,000 messages of history, an agent-like mix
of user turns, tool calls whose results go stale and answers), one session
per history class on one SQLite file each. A turn appends a human message,
an AI message with a tool call, its result and an answer, then reads the
history the model gets (`history.messages`). Turns are taken round robin
across sizes and classes, so noise falls on all alike. Prints the p50 ms of a
turn and the messages the model gets.

    pip install langchain-community      # for SQLChatMessageHistory (not a prunestore dependency)
    python bench/langchain_history.py [--sizes 100,1000,10000] [--turns 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

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
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        store = PruneStore(f"sqlite:///{Path(tmp) / 'prunestore.db'}")
        histories = {}
        for size in sizes:
            ours = PrunedChatMessageHistory(f"s{size}", store)
            theirs = SQLChatMessageHistory(f"s{size}", connection=f"sqlite:///{Path(tmp) / 'langchain.db'}")
            for n in range(size // 4):
                batch = turn_messages(n)
                ours.add_messages(batch)
                theirs.add_messages(batch)
            histories[size] = {"prunestore": [ours, size // 4], "langchain SQL": [theirs, size // 4]}
            print(f"  built {size:,} messages", flush=True)
        timings = {(size, name): [] for size in sizes for name in ("prunestore", "langchain SQL")}
        sent = {}
        for _ in range(args.turns):
            for size in sizes:
                for name, entry in histories[size].items():
                    history, n = entry
                    start = time.perf_counter()
                    history.add_messages(turn_messages(n))
                    prompt = history.messages
                    timings[(size, name)].append((time.perf_counter() - start) * 1000)
                    sent[(size, name)] = len(prompt)
                    entry[1] = n + 1
        store.close()
    print(f"{'messages':>9} {'history':<14} {'p50 ms/turn':>12} {'messages sent':>14}")
    for size in sizes:
        for name in ("prunestore", "langchain SQL"):
            p50 = statistics.median(timings[(size, name)])
            print(f"{size:>9,} {name:<14} {p50:>12.2f} {sent[(size, name)]:>14,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
