"""Per-turn cost of prunestore's Anthropic history against keeping the messages in a list, as SDK users do.

For each size (100, 1,000 and 10,000 messages of history: user turns, tool
calls of a few tools whose results go stale, answers), one session on one
SQLite file. A turn makes a new `AnthropicHistory` (as a request handler
would), adds a user message, an assistant message with a tool call, its
result and an answer, and reads `messages()`, the prompt for
``client.messages.create``; the list does the same with ``list.extend``.
Both then serialize the prompt as the SDK sends it (JSON), which is where a
longer prompt costs the caller before the provider bills it. Turns are
taken round robin across sizes. Prints the p50 ms of a turn (without and
then of the JSON alone) and the messages and bytes sent.

    python bench/anthropic_history.py [--sizes 100,1000,10000] [--turns 30]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import subprocess
import tempfile
import time
from datetime import date
from pathlib import Path

from prunestore import PruneStore
from prunestore.integrations.anthropic_messages import AnthropicHistory

TOOLS = ["search", "read_file", "run_sql", "weather"]


def turn_messages(n: int) -> list[dict]:
    """One turn: a question, a call (a few tools, a few arguments: results go stale), its result, an answer."""
    call = {"type": "tool_use", "id": f"toolu_{n}", "name": TOOLS[n % 4], "input": {"q": f"topic {n % 7}"}}
    return [
        {"role": "user", "content": f"Question {n}: what about topic {n % 7}?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, call]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"result {n} " * 30}],
        },
        {"role": "assistant", "content": f"Answer {n}, from the result."},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = ("prunestore", "prunestore json", "list", "list json")
    times: dict[tuple[int, str], list[float]] = {(s, k): [] for s in sizes for k in kinds}
    sent: dict[tuple[int, str], tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {s: PruneStore(f"sqlite:///{Path(tmp) / f'{s}.db'}", live_cache_bytes=512 * 2**20) for s in sizes}
        lists: dict[int, list[dict]] = {}
        for size in sizes:
            history = [m for n in range(size // 4) for m in turn_messages(n)]
            AnthropicHistory("s", stores[size]).add(history)
            AnthropicHistory("s", stores[size]).messages()  # the view is built once, as a running service has it
            lists[size] = history
        for t in range(args.turns):
            for size in sizes:
                new = turn_messages(size // 4 + t)
                gc.collect()
                started = time.perf_counter()
                history = AnthropicHistory("s", stores[size])
                history.add(new[:2])
                history.add(new[2:])
                prompt = history.messages()
                read = time.perf_counter()
                body = json.dumps(prompt)
                times[size, "prunestore"].append(read - started)
                times[size, "prunestore json"].append(time.perf_counter() - read)
                sent[size, "prunestore"] = (len(history.messages()), len(body))
                gc.collect()
                started = time.perf_counter()
                lists[size].extend(new)
                read = time.perf_counter()
                body = json.dumps(lists[size])
                times[size, "list"].append(read - started)
                times[size, "list json"].append(time.perf_counter() - read)
                sent[size, "list"] = (len(lists[size]), len(body))
        for store in stores.values():
            store.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"`python bench/anthropic_history.py --sizes {args.sizes} --turns {args.turns}`")
    print(f"{date.today()}, commit {commit or 'unknown'}, {platform.machine()}, Python {platform.python_version()}")
    print()
    head = ["messages of history", "prunestore ms / turn", "+ JSON ms", "messages sent", "KB sent"]
    print("| " + " | ".join([*head, "list ms / turn", "+ JSON ms", "messages sent", "KB sent"]) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        p50 = {k: statistics.median(times[size, k]) * 1e3 for k in kinds}
        (m1, b1), (m2, b2) = sent[size, "prunestore"], sent[size, "list"]
        ours = f"| {size:,} | {p50['prunestore']:.2f} | {p50['prunestore json']:.2f} | {m1:,} | {b1 / 1e3:,.0f} |"
        print(f"{ours} {p50['list']:.2f} | {p50['list json']:.2f} | {m2:,} | {b2 / 1e3:,.0f} |")


if __name__ == "__main__":
    main()
