"""What `recall` costs at growing session sizes: a recent match, and one near the start.

Builds one session per size with `AgentTraffic` (from `append_latency.py`),
with two readings of a planted tool near the start and near the end, both
superseded by a third, so both are out of the prompt. Then, taking the
sessions in turn, times four recalls: by key and by words, each for the
recent reading (found after a short read back) and for the early one (read
back through the whole session). Prints p50 per size and query, on SQLite
and PostgreSQL, each without and with the recall index (``prunestore db
recall-index``).

    python bench/recall.py [--sizes 1000,100000] [--samples 20]
        [--postgres URL]   (default: $PRUNESTORE_TEST_POSTGRES_URL; "" skips it)
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

from prunestore import Message, PruneStore
from prunestore.sql import db, recall_index

QUERIES = {
    "key, recent": {"key": "late-reading"},
    "words, recent": {"text": "ZEBRA ledger 2"},
    "key, at the start": {"key": "early-reading"},
    "words, at the start": {"text": "zebra LEDGER 1"},
}


def planted(traffic: AgentTraffic, n: int) -> Message:
    key = {1: "early-reading", 2: "late-reading"}.get(n)
    content = f"zebra ledger {n}" + (f" DEFINE:{key}" if key else "")
    return Message(f"planted-{n}", "tool_output", content, traffic.turn, tool_key="ledger")


def build(store: PruneStore, size: int) -> str:
    name = f"recall-{size}-{uuid.uuid4().hex[:6]}"
    traffic = AgentTraffic(seed=size)
    store.append(name, [planted(traffic, 1), *traffic.batch(min(size, 1000) - 1)])
    for _ in range(size // 1000 - 1):
        store.append(name, traffic.batch(1000))
    store.append(name, [planted(traffic, 2), *traffic.batch(50), planted(traffic, 3)])
    return name


def measure(store: PruneStore, sizes: list[int], samples: int) -> dict[int, dict[str, float]]:
    sessions = {}
    for size in sizes:
        sessions[size] = build(store, size)
        print(f"  built {size:,} messages", flush=True)
    db.analyze(store.engine)
    timings: dict[int, dict[str, list[float]]] = {size: {q: [] for q in QUERIES} for size in sizes}
    for _ in range(samples):
        for size, name in sessions.items():  # interleaved, so noise falls on every size alike
            for label, query in QUERIES.items():
                start = time.perf_counter()
                found = store.recall(name, limit=1, **query)
                timings[size][label].append((time.perf_counter() - start) * 1000)
                assert [m.id for m in found] == ["planted-2" if "recent" in label else "planted-1"], found
    for name in sessions.values():
        store.delete_session(name)
    return {size: {q: statistics.median(t) for q, t in by_query.items()} for size, by_query in timings.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--postgres", default=os.environ.get("PRUNESTORE_TEST_POSTGRES_URL", ""))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        backends = [
            ("SQLite (file, WAL)", f"sqlite:///{Path(tmp) / 'bench.db'}"),
            ("SQLite (file, WAL), recall index", f"sqlite:///{Path(tmp) / 'indexed.db'}"),
        ]
        if args.postgres:
            backends += [("PostgreSQL", args.postgres), ("PostgreSQL, recall index", args.postgres)]
        for label, url in backends:
            print(f"{label}:", flush=True)
            with PruneStore(url) as store:
                if label.endswith("recall index"):
                    recall_index.create(store.engine)
                results = measure(store, sizes, args.samples)
                recall_index.drop(store.engine)  # a database given is left as it was
            print("  recall(limit=1), p50 ms")
            print(f"  {'messages':>9}" + "".join(f"  {q:>20}" for q in QUERIES))
            for size, by_query in results.items():
                print(f"  {size:>9,}" + "".join(f"  {by_query[q]:>20.2f}" for q in QUERIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
