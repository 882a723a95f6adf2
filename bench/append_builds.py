"""Append latency of several builds of prunestore side by side: one process per build in turn, rounds alternated.

Each build is a checkout (``git worktree add /tmp/old <commit>``); its
process imports prunestore from there (``PYTHONPATH``) and uses only the
public API (`PruneStore`, `Message`, `Policy`), so any commit runs it. A
process fills a fresh SQLite file with a session of ``--history`` messages
(user, assistant and tool messages, some defining and referring to keys,
tools called again), then times ``--samples`` single-message appends, each
in its own transaction, and prints its p50 and p99. The builds take turns
within a round, in an order that flips every round, so the machine's drift
falls on all of them; the median of the rounds' p50s is printed per build.

    python bench/append_builds.py DIR [DIR ...] [--rounds 6] [--history 1000] [--samples 2000]
        [--budget N --clear N]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ["alpha", "beta", "gamma", "delta", "rows", "csv", "42", "report", "file", "sent"]


def child(url: str, history: int, samples: int, budget: int | None, clear: int) -> None:
    """One build's run: fill the session, time the appends, print ``p50 p99`` in ms."""
    from prunestore import Message, Policy, PruneStore

    rng = random.Random(7)
    count = 0

    def turn_messages(turn: int) -> list:
        nonlocal count
        out = []
        for role in ("user", "assistant", "tool_output"):
            count += 1
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))
            if role == "user" and rng.random() < 0.2:
                text += f" DEFINE:k{count % 50}"
            if role == "user" and rng.random() < 0.2:
                text += f" REF:k{rng.randint(0, 49)}"
            tool_key = f"tool{rng.randint(0, 20)}" if role == "tool_output" else None
            out.append(Message(f"m{count}", role, text, turn, tool_key=tool_key))
        return out

    policy = Policy() if budget is None else Policy(budget=budget, clear_at_least=clear)
    with PruneStore(url, policy=policy) as store:
        turn, batch = 0, []
        while count < history:
            turn += 1
            batch += turn_messages(turn)
            if len(batch) >= 500:
                store.append("s", batch)
                batch = []
        if batch:
            store.append("s", batch)
        times = []
        for _ in range(samples):
            turn += 1
            message = turn_messages(turn)[0]
            started = time.perf_counter()
            store.append("s", message)
            times.append(time.perf_counter() - started)
    times.sort()
    print(f"{statistics.median(times) * 1000:.4f} {times[int(len(times) * 0.99)] * 1000:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="*", type=Path, help="Checkouts of prunestore, one per build.")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--budget", type=int)
    parser.add_argument("--clear", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the URL of one build's run
    args = parser.parse_args()
    if args.child:
        child(args.child, args.history, args.samples, args.budget, args.clear)
        return
    if not args.builds:
        parser.error("name at least one checkout")
    p50s: dict[Path, list[float]] = {build: [] for build in args.builds}
    options = ["--history", str(args.history), "--samples", str(args.samples), "--clear", str(args.clear)]
    options += ["--budget", str(args.budget)] if args.budget is not None else []
    with tempfile.TemporaryDirectory() as folder:
        for round_number in range(args.rounds):
            order = args.builds if round_number % 2 == 0 else args.builds[::-1]
            for n, build in enumerate(order):
                url = f"sqlite:///{Path(folder) / f'round{round_number}-{n}.db'}"
                env = {**os.environ, "PYTHONPATH": str(build.resolve())}
                command = [sys.executable, __file__, "--child", url, *options]
                out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
                p50, p99 = map(float, out.split())
                p50s[build].append(p50)
                print(f"round {round_number + 1}: {build}  p50 {p50:.4f} ms  p99 {p99:.4f} ms", file=sys.stderr)
    first = statistics.median(p50s[args.builds[0]])
    print(f"{'build':<40} {'median p50 ms':>14} {'/ first':>8}   p50 of each round")
    for build, values in p50s.items():
        median = statistics.median(values)
        rounds = " ".join(f"{v:.3f}" for v in values)
        print(f"{str(build):<40} {median:>14.4f} {median / first:>8.3f}   {rounds}")


if __name__ == "__main__":
    main()
