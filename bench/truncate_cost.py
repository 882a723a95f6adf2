"""What `truncate` costs at growing session sizes: the undo journal against a batch recompute.

Builds one session per size (appended in batches with `AgentTraffic` from
`append_latency.py`), then, taking the sessions in turn, cuts the last ten
messages off and appends them again, many times. The cut is timed twice on
each session: with the undo journal (the normal path) and after a `rebuild`,
which clears the journal so the cut is recomputed as a batch over the prefix,
as it would be without one. Prints p50 per size and path, and the ratio of
the largest size's journal p50 to the smallest's.

    python bench/truncate_cost.py [--sizes 1000,10000,100000] [--samples 30]
        [--postgres URL]   (default: $PRUNESTORE_TEST_POSTGRES_URL; "" skips it)

The journal path should not grow with the session's length.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from append_latency import AgentTraffic

from prunestore import PruneStore
from prunestore.sql import db

CUT = 10


def measure(store: PruneStore, sizes: list[int], samples: int) -> dict[int, tuple[float, float]]:
    """p50 ms per size of (cut with the journal, cut recomputed as a batch)."""
    sessions = {}
    for size in sizes:
        name = f"truncate-{size}-{uuid.uuid4().hex[:6]}"
        traffic = AgentTraffic(seed=size)
        for _ in range(size // 1000):
            store.append(name, traffic.batch(1000))
        anchor = store.messages(name)[-1].id
        sessions[size] = (name, anchor, traffic.batch(CUT))
        store.append(name, sessions[size][2])
        print(f"  built {size:,} messages", flush=True)
    db.analyze(store.engine)  # PostgreSQL plans from statistics: as a maintained database has them
    timings: dict[int, dict[str, list[float]]] = {size: {"journal": [], "batch": []} for size in sizes}
    for sample in range(samples):
        for size, (name, anchor, tail) in sessions.items():  # interleaved, so noise falls on every size alike
            path = "batch" if sample % 2 else "journal"
            if path == "batch":
                store.rebuild(name)  # clears the journal
            start = time.perf_counter()
            store.truncate(name, anchor)
            timings[size][path].append((time.perf_counter() - start) * 1000)
            store.append(name, tail)
    for name, _, _ in sessions.values():
        assert store.verify(name).ok
        store.delete_session(name)
    return {size: (statistics.median(t["journal"]), statistics.median(t["batch"])) for size, t in timings.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--postgres", default=os.environ.get("PRUNESTORE_TEST_POSTGRES_URL", ""))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        backends = [("SQLite (file, WAL)", f"sqlite:///{Path(tmp) / 'bench.db'}")]
        if args.postgres:
            backends.append(("PostgreSQL", args.postgres))
        for label, url in backends:
            print(f"{label}:", flush=True)
            with PruneStore(url) as store:
                results = measure(store, sizes, args.samples)
            print(f"  truncate of the last {CUT} messages, p50 ms")
            print(f"  {'messages':>9}  {'journal':>9}  {'batch':>9}")
            for size, (journal, batch) in results.items():
                print(f"  {size:>9,}  {journal:>9.3f}  {batch:>9.3f}")
            first, last = results[sizes[0]][0], results[sizes[-1]][0]
            print(f"  journal ratio {sizes[-1]:,} / {sizes[0]:,}: {last / first:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
