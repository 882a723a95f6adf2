"""What an erasure costs: erasing one message of a long session, beside a rebuild of the same session.

A session of the tool-agent workload is appended turn by turn under
``Policy(budget=B, clear_at_least=C)``; then one message in its middle is
erased, and the session is rebuilt, each timed once, in turn, for each size.
An erasure recomputes the session's state from its messages (docs/operations.md,
"What an erasure costs"), so the two columns should stay close.

    python bench/erase.py [--sizes 1000,4000] [--budget 32000] [--clear 16000] [--url sqlite:///x.db]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
import time
from datetime import date

from prunestore import Policy, PruneStore
from prunestore.showcase.workloads import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000", help="turns of each session, comma-separated")
    parser.add_argument("--budget", type=int, default=32000)
    parser.add_argument("--clear", type=int, default=16000)
    parser.add_argument("--url", help="an empty store to fill (default: a new SQLite file)")
    args = parser.parse_args()
    url = args.url or f"sqlite:///{tempfile.mkdtemp()}/erase.db"
    rows = []
    with PruneStore(url, policy=Policy(budget=args.budget, clear_at_least=args.clear)) as store:
        for turns in (int(t) for t in args.sizes.split(",")):
            name = f"agent-{turns}"
            session = generate("agent", turns)
            for batch in session.by_turn():
                store.append(name, batch)
            middle = session.messages[len(session.messages) // 2].id
            started = time.perf_counter()
            store.erase(name, middle)
            erased = time.perf_counter() - started
            started = time.perf_counter()
            store.rebuild(name)
            rebuilt = time.perf_counter() - started
            rows.append((len(session.messages), erased, rebuilt))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"`python bench/erase.py --sizes {args.sizes} --budget {args.budget} --clear {args.clear}`")
    print(f"{date.today()}, commit {commit or 'unknown'}, {platform.machine()}, Python {platform.python_version()}")
    print(f"store: {url.split(':', 1)[0]}")
    print()
    print("| messages | erase one, s | rebuild, s |")
    print("|---|---|---|")
    for messages, erased, rebuilt in rows:
        print(f"| {messages:,} | {erased:.2f} | {rebuilt:.2f} |")


if __name__ == "__main__":
    main()
