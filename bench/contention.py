"""Append throughput under contention: several processes appending at once, on SQLite and PostgreSQL.

Each of N worker processes makes M appends of one message, either all to one
shared session (they serialize on its lock) or each to a session of its own
(on PostgreSQL these run in parallel; SQLite has one writer at a time). A
single process doing the same appends alone gives the baseline, measured in
the same run. Every run ends with `verify` and a count of what was stored.

    python bench/contention.py [--workers 4] [--appends 500]
        [--postgres URL]   (default: $PRUNESTORE_TEST_POSTGRES_URL; "" skips it)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from prunestore import Message, PruneStore


def _worker(url: str, session: str, worker: int, appends: int, start, finished) -> None:
    store = PruneStore(url)
    start.wait()
    for i in range(appends):
        store.append(
            session,
            Message(f"w{worker}-{i}", "tool_output", f"result {i % 7} REF:k{i % 5}", 0, tool_key=f"tool{i % 3}"),
        )
    finished.put(time.perf_counter())  # a system-wide monotonic clock: comparable across processes
    store.close()


def run(url: str, workers: int, appends: int, shared: bool) -> float:
    """Appends per second, all workers together."""
    ctx = mp.get_context("spawn")
    start, finished = ctx.Barrier(workers + 1), ctx.Queue()
    run_id = uuid.uuid4().hex[:6]
    sessions = [f"{run_id}-shared" if shared else f"{run_id}-own-{w}" for w in range(workers)]
    procs = [ctx.Process(target=_worker, args=(url, sessions[w], w, appends, start, finished)) for w in range(workers)]
    for p in procs:
        p.start()
    start.wait()
    began = time.perf_counter()
    elapsed = max(finished.get() for _ in procs) - began
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    with PruneStore(url) as store:
        stored = sum(len(store.messages(s)) for s in set(sessions))
        assert stored == workers * appends, (stored, workers * appends)
        for s in set(sessions):
            assert store.verify(s).ok
            store.delete_session(s)
    return workers * appends / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--postgres", default=os.environ.get("PRUNESTORE_TEST_POSTGRES_URL", ""))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backends = [("SQLite (file, WAL)", f"sqlite:///{Path(tmp) / 'bench.db'}")]
        if args.postgres:
            backends.append(("PostgreSQL", args.postgres))
        print(f"{args.workers} processes x {args.appends} appends of one message; appends/s, all processes together")
        print(f"{'backend':<20} {'alone':>8} {'shared session':>15} {'own sessions':>13}")
        for label, url in backends:
            PruneStore(url).close()  # create the schema before the workers race to
            alone = run(url, 1, args.appends, shared=True)
            shared = run(url, args.workers, args.appends, shared=True)
            own = run(url, args.workers, args.appends, shared=False)
            print(f"{label:<20} {alone:>8,.0f} {shared:>15,.0f} {own:>13,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
