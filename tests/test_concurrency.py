"""Concurrent appends from several processes to one session serialize and never corrupt the indexes."""

from __future__ import annotations

import multiprocessing as mp

from prunestore import Message, PruneStore

WORKERS = 4
APPENDS = 40


def _worker(url: str, worker: int, start: mp.Barrier) -> None:
    store = PruneStore(url)
    start.wait()
    for i in range(APPENDS):
        # Tool keys, duplicates and dependency keys shared across workers, so the cascades interleave.
        store.append(
            "shared",
            [
                Message(
                    f"w{worker}-{i}", "tool_output", f"DEFINE:k{i % 5} REF:k{(i + 1) % 5}", 0, tool_key=f"tool{i % 3}"
                ),
                Message(f"w{worker}-{i}-doc", "retrieved_doc", f"passage {i % 4}", 0),
            ],
        )
        store.append(f"own-{worker}", Message(f"m{i}", "user", f"hello {i}", i))
        # Every worker sends the same message: the retries race, and exactly one copy is stored.
        store.append("retries", Message(f"r{i}", "user", f"same {i}", i))
    store.close()


def test_concurrent_appends_serialize(store, store_url):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    workers = [ctx.Process(target=_worker, args=(store_url, w, barrier)) for w in range(WORKERS)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=300)
    assert [p.exitcode for p in workers] == [0] * WORKERS
    stored = store.messages("shared")
    assert len(stored) == WORKERS * APPENDS * 2
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
    assert len({m.id for m in stored}) == len(stored)
    assert sorted(store.sessions()) == sorted(["retries", "shared"] + [f"own-{w}" for w in range(WORKERS)])
    assert [m.id for m in store.messages("retries")] == [f"r{i}" for i in range(APPENDS)]
    report = store.verify()
    assert report.ok, report.mismatches[:5]
