"""What replaying stored sessions under another policy costs: `PruneStore.what_if`, as `prunestore cost` runs it.

Fills a SQLite file with N sessions of M messages (the tool-agent workload,
each session its own seed, appended a session at a time), then replays every
session under the store's policy and under a budgeted one, one process, one
core, and prints the seconds of each pass and per message.

    python bench/what_if.py [--sessions 1000] [--messages 1000] [--budget 32000 --clear 16000]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
import time
from datetime import date
from pathlib import Path

from prunestore import Policy, PruneStore
from prunestore.showcase.workloads import generate


def fill(store: PruneStore, sessions: int, messages: int) -> int:
    """Append `sessions` sessions of about `messages` messages each; the number of messages stored."""
    turns = max(1, messages * 2000 // 9302)  # the agent workload stores about 4.65 messages a turn
    stored = 0
    for n in range(sessions):
        generated = generate("agent", turns, seed=n).messages[:messages]
        store.append(f"s{n:05d}", list(generated))
        stored += len(generated)
    return stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=32000)
    parser.add_argument("--clear", type=int, default=16000)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"`python bench/what_if.py --sessions {args.sessions} --messages {args.messages}`")
    print(
        f"{date.today()}, commit {commit or 'unknown'}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp, PruneStore(f"sqlite:///{Path(tmp) / 'store.db'}") as store:
        started = time.perf_counter()
        stored = fill(store, args.sessions, args.messages)
        print(f"filled {args.sessions:,} sessions, {stored:,} messages in {time.perf_counter() - started:.1f} s")
        names = store.sessions()
        candidates = [
            ("the store's policy", None),
            (f"budget {args.budget}, events {args.clear}", Policy(budget=args.budget, clear_at_least=args.clear)),
            (
                f"budget {args.budget}, events {args.clear}, definers last",
                Policy(budget=args.budget, clear_at_least=args.clear, evict="definers_last"),
            ),
        ]
        print("\n| policy | seconds | µs a message | everything / cost |\n|---|---|---|---|")
        for label, policy in candidates:
            started = time.perf_counter()
            replays = [store.what_if(name, policy) for name in names]
            seconds = time.perf_counter() - started
            saving = sum(r.cost_everything for r in replays) / sum(r.cost for r in replays)
            print(f"| {label} | {seconds:.1f} | {seconds / stored * 1e6:.1f} | {saving:.2f} |")


if __name__ == "__main__":
    main()
