"""Listing and removing sessions as their number grows, on SQLite (file, WAL) and PostgreSQL.

For each count of sessions (two messages each, written with `append_many`
1,000 sessions a transaction), times, 50 times each, alternated:

* the first page, ``sessions(limit=100)``;
* a page in the middle, ``sessions(limit=100, after=<the middle name>)``;
* a page of a prefix, ``sessions("user-5", limit=100)``.

Then a tenth of the sessions is aged by 100 days (an UPDATE behind the
store's back) and ``gc(timedelta(days=30))`` removes them while another
thread appends to the other sessions; it prints the gc's time and the
appends' p50 and p99 while it ran, beside the same appends without it.

    python bench/sessions.py [--counts 1000,10000,100000]
        [--postgres URL]   (default: $PRUNESTORE_TEST_POSTGRES_URL; "" skips it)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa

from prunestore import Message, PruneStore
from prunestore.sql import db, partitions


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def fill(store: PruneStore, count: int) -> list[str]:
    names = [f"user-{i}" for i in range(count)]
    for start in range(0, count, 1000):
        if start in (1000, 10_000) or start % 50_000 == 0:
            db.analyze(store.engine)  # this machine's PostgreSQL runs without autovacuum: plans need statistics
        store.append_many(
            {
                name: [Message("q", "user", f"question of {name}", 0), Message("a", "assistant", "an answer", 0)]
                for name in names[start : start + 1000]
            }
        )
    return names


def time_pages(store: PruneStore, names: list[str], rounds: int = 50) -> dict[str, float]:
    middle = store.sessions()[len(names) // 2]
    calls = {
        "first page": lambda: store.sessions(limit=100),
        "middle page": lambda: store.sessions(limit=100, after=middle),
        "prefix page": lambda: store.sessions("user-5", limit=100),
    }
    timings: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(rounds):
        for label, call in calls.items():
            start = time.perf_counter()
            page = call()
            timings[label].append((time.perf_counter() - start) * 1000)
            assert len(page) == 100 or len(names) < 1000
    return {label: statistics.median(values) for label, values in timings.items()}


def appends_while(store: PruneStore, names: list[str], work) -> tuple[list[float], float]:
    """Append to `names` one message at a time in a thread while `work()` runs; (latencies in ms, work's seconds)."""
    latencies: list[float] = []
    done = threading.Event()

    def writer() -> None:
        turn = 1
        while not done.is_set():
            for name in names:
                start = time.perf_counter()
                store.append(name, Message(f"w{turn}", "user", f"more {turn}", turn))
                latencies.append((time.perf_counter() - start) * 1000)
                if done.is_set():
                    break
            turn += 1

    thread = threading.Thread(target=writer)
    thread.start()
    start = time.perf_counter()
    work()
    took = time.perf_counter() - start
    done.set()
    thread.join()
    return latencies, took


def measure(url: str, count: int) -> tuple:
    """Fill an empty store with `count` sessions, time pages, then gc a tenth of them under appends."""
    with PruneStore(url) as store:
        start = time.perf_counter()
        names = fill(store, count)
        print(f"  {count:,} sessions written in {time.perf_counter() - start:.1f} s", flush=True)
        db.analyze(store.engine)
        pages = time_pages(store, names)
        idle, active = names[::10], names[1::10][:50]
        with store.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE prunestore_sessions SET updated_at = updated_at - 8640000 WHERE name IN :names"
                ).bindparams(sa.bindparam("names", expanding=True)),
                {"names": idle},
            )
        quiet, _ = appends_while(store, active, lambda: time.sleep(2))
        reports = []
        during, took = appends_while(store, active, lambda: reports.append(store.gc(timedelta(days=30))))
        assert len(reports[0].sessions) == len(idle)
        assert store.verify().ok
    return count, pages, took, len(idle), quiet, during


@contextmanager
def empty_database(kind: str, base: str, tmp: Path, partition_count: int = 0) -> Iterator[str]:
    """A URL of an empty database: a new SQLite file, or a new PostgreSQL schema dropped afterwards.

    With `partition_count`, the PostgreSQL tables are made hash partitions of it (`prunestore db partition`).
    """
    name = f"bench_{uuid.uuid4().hex[:8]}"
    if kind == "sqlite":
        yield f"sqlite:///{tmp / name}.db"
        return
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {name}")
    url = f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={name}')}"
    try:
        if partition_count:
            engine = db.make_engine(url)
            partitions.partition(engine, partition_count)
            engine.dispose()
        yield url
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {name} CASCADE")
        admin.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,10000,100000")
    parser.add_argument("--postgres", default=os.environ.get("PRUNESTORE_TEST_POSTGRES_URL", ""))
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    results: dict[str, list[tuple]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        backends = {"SQLite (file, WAL)": ("sqlite", "")}
        if args.postgres:
            backends["PostgreSQL"] = ("postgresql", args.postgres)
        for label, (kind, base) in backends.items():
            print(f"{label}:", flush=True)
            results[label] = []
            for count in counts:
                with empty_database(kind, base, Path(tmp)) as url:
                    results[label].append(measure(url, count))
    print()
    print(
        f"{'backend':<20} {'sessions':>9} {'first ms':>9} {'middle ms':>10} {'prefix ms':>10} "
        f"{'gc s':>6} {'removed':>8} {'append p50/p99 ms':>18} {'during gc':>14}"
    )
    for label, rows in results.items():
        for count, pages, took, removed, quiet, during in rows:
            print(
                f"{label:<20} {count:>9,} {pages['first page']:>9.2f} {pages['middle page']:>10.2f} "
                f"{pages['prefix page']:>10.2f} {took:>6.2f} {removed:>8,} "
                f"{statistics.median(quiet):>8.2f}/{percentile(quiet, 0.99):<9.2f} "
                f"{statistics.median(during):>6.2f}/{percentile(during, 0.99):.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
