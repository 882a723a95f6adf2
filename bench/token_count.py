"""What an exact token count costs an append, and how far word pieces are from it.

Two SQLite stores (file, WAL) side by side, one counting word pieces (the
default), one counting each message as OpenAI is sent it (``o200k_base``,
the ``openai-tokens`` extra); their single-message appends alternate, so the
machine's noise falls on both alike. Prints each store's append p50 and p99,
the ratio of the p50s, and, per kind of message, the word-piece count over
the exact one.

    python bench/token_count.py [--samples 3000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from prunestore import Message, PruneStore, count_tokens, from_openai
from prunestore.tokens import message_tokens, o200k_base

PROSE = "The quarterly report shows revenue of 4.2M, up 12% from last quarter; see table 3 for details. " * 4
KINDS = {
    "prose": Message("p", "user", PROSE, 1),
    "code": Message("c", "tool_output", "def f(x):\n    return {k: v for k, v in x.items() if v}\n" * 8, 1),
    "base64": Message("b", "tool_output", "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk" * 20, 1),
    "tool call": from_openai(
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "search", "arguments": json.dumps({"query": "revenue by quarter 2026"})},
                    }
                ],
            }
        ]
    )[0],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3000)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    stores = {
        "word pieces": PruneStore(f"sqlite:///{folder}/words.db"),
        "o200k_base": PruneStore(f"sqlite:///{folder}/o200k.db", tokenizer="o200k_base"),
    }
    times: dict[str, list[float]] = {name: [] for name in stores}
    for i in range(args.samples):
        for name, store in stores.items():
            message = Message(f"m{i}", "tool_output", f"{i}: {PROSE}", i, tool_key=f"k{i % 50}")
            started = time.perf_counter()
            store.append("s", message)
            times[name].append(time.perf_counter() - started)
    print(f"appends of a {count_tokens(PROSE)}-word-piece message, {args.samples} each, alternated")
    print(f"{'counter':14s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for name, taken in times.items():
        taken.sort()
        print(f"{name:14s} {statistics.median(taken) * 1000:8.3f} {taken[int(len(taken) * 0.99)] * 1000:8.3f}")
    ratio = statistics.median(times["o200k_base"]) / statistics.median(times["word pieces"])
    print(f"p50 o200k_base / p50 word pieces = {ratio:.2f}")
    print()
    print(f"{'message':10s} {'word pieces':>12s} {'o200k_base':>11s} {'ratio':>6s}")
    for kind, message in KINDS.items():
        words, exact = message_tokens(count_tokens, message), message_tokens(o200k_base, message)
        print(f"{kind:10s} {words:12d} {exact:11d} {words / exact:6.2f}")


if __name__ == "__main__":
    main()
