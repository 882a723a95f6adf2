"""Concurrent appends from several processes to one session serialize and never corrupt the indexes."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from multiprocessing.synchronize import Barrier

from prunestore import Delta, Message, PruneStore, count_tokens
from prunestore import store as store_module
from prunestore.appending import append_locked
from prunestore.engine.state import new_state
from prunestore.sql import db

WORKERS = 4
APPENDS = 500


def _worker(url: str, worker: int, start: Barrier) -> None:
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


def test_retry_waiting_for_the_lock_sees_what_the_holder_committed(open_store, backend, monkeypatch):
    """A retry that waited for the session lock sees the message the holder committed: a no-op, not a conflict.

    On PostgreSQL the waiter's statement snapshot predates the holder's commit;
    the store must read the ids again rather than insert a second copy (which
    only a retry of the whole transaction would rescue, so retries are off here).
    """
    monkeypatch.setattr(store_module, "_ATTEMPTS", 1)
    holder, waiter = open_store(), open_store()
    holder.append("s", Message("a", "user", "first", 0))
    message = Message("b", "user", "second", 1)
    outcome: dict[str, object] = {}

    def wait_and_retry() -> None:
        try:
            outcome["delta"] = waiter.append("s", message)
        except Exception as exc:  # reported to the test thread below
            outcome["error"] = exc

    with db.transaction(holder.engine, "hold the lock", write=True) as driver:
        append_locked(driver, "s", [new_state(message, count_tokens(message.content))], holder.policy)
        thread = threading.Thread(target=wait_and_retry)
        thread.start()
        _wait_until_blocked(holder, thread)
    thread.join(timeout=60)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["delta"] == Delta()
    assert [m.id for m in waiter.messages("s")] == ["a", "b"]


def _wait_until_blocked(store: PruneStore, thread: threading.Thread) -> None:
    """Return once the thread waits for a lock (PostgreSQL says so; SQLite's busy wait is given time)."""
    if store.engine.dialect.name != "postgresql":
        time.sleep(0.5)
        return
    deadline = time.monotonic() + 30
    with store.engine.connect() as conn:
        while time.monotonic() < deadline:
            waiting = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).scalar()
            conn.rollback()
            if waiting:
                return
            time.sleep(0.01)
    raise AssertionError("the second writer never waited for the lock")
