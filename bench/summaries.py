"""What summaries cost a store: an append, `unsummarized` and `summarize`, with and without them.

Two sessions of the chat workload are built side by side, under
``Policy(budget=B, clear_at_least=C)``, each turn appended as it comes: one
plain, one summarized after every turn by a stand-in summarizer of a fixed
size (``summarize``, no model). Then single-message appends are timed on
both, in turn, and ``unsummarized`` on the summarized one (nothing left to
summarize) and on the plain one (every evicted message, in spans). Prints
p50 of each, in milliseconds.

    python bench/summaries.py [--turns 2000] [--budget 2000] [--clear 500] [--samples 200] [--url sqlite:///x.db]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import tempfile
import time
from datetime import date

from prunestore import Message, Policy, PruneStore
from prunestore.showcase.workloads import generate


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--clear", type=int, default=500)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--url", help="a store to fill (default: a new SQLite file)")
    args = parser.parse_args()
    url = args.url or f"sqlite:///{tempfile.mkdtemp()}/summaries.db"
    text = "Summary of earlier messages: " + "detail " * 60
    session = generate("chat", args.turns)
    with PruneStore(url, policy=Policy(budget=args.budget, clear_at_least=args.clear)) as store:
        written = 0
        for batch in session.by_turn():
            store.append("plain", batch)
            store.append("summarized", batch)
            written += len(store.summarize("summarized", lambda span: text).written)
        stored = store.summary("plain").messages
        appends: dict[str, list[float]] = {"plain": [], "summarized": []}
        turn = session.messages[-1].turn + 1
        for i in range(args.samples):
            for name in appends:
                message = Message(f"x{i}", "user", f"one more question, number {i}", turn + i)
                appends[name].append(timed(lambda: store.append(name, message)))  # noqa: B023 (called at once)
        reads = {
            "unsummarized, plain (every evicted message)": [
                timed(lambda: store.unsummarized("plain")) for _ in range(20)
            ],
            "unsummarized, summarized (nothing left)": [
                timed(lambda: store.unsummarized("summarized")) for _ in range(20)
            ],
        }
        evicted = sum(len(span) for span in store.unsummarized("plain"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"`python bench/summaries.py --turns {args.turns} --budget {args.budget} --clear {args.clear}`")
    print(f"{date.today()}, commit {commit or 'unknown'}, {platform.machine()}, Python {platform.python_version()}")
    print(f"{stored:,} messages a session before the timed appends; {written:,} summaries written; {evicted:,} evicted")
    print()
    print("| what | p50 ms |")
    print("|---|---|")
    for name, samples in appends.items():
        print(f"| append, {name} | {statistics.median(samples):.2f} |")
    for name, samples in reads.items():
        print(f"| {name} | {statistics.median(samples):.2f} |")


if __name__ == "__main__":
    main()
