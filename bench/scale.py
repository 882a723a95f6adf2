"""A store of many sessions: appends, reads, pages and retention as it fills, per layout.

Layouts: SQLite (file, WAL), PostgreSQL, and PostgreSQL hash-partitioned by
session (``prunestore db partition``). For each, on an empty database:

1. the baseline: appends of one message to 50 probe sessions, round robin
   (p50, p99), and a first page of ``sessions(limit=100)``;
2. loads agent sessions of about ``--messages`` messages each with
   ``prunestore import`` (JSON Lines written beforehand), in steps of a
   tenth, a third and all of ``--sessions``, then VACUUM ANALYZE on
   PostgreSQL (what autovacuum does after a load); after each step the probe
   appends and the first page again, so the figures show how they follow
   the store's size;
3. after the load: ``live()`` of loaded sessions cold (an empty live cache)
   and warm, and ``verify()`` of the whole store;
4. ages a tenth of the sessions by 100 days (an UPDATE behind the store's
   back) and times ``gc`` removing them while a thread appends to the probe
   sessions (their p50 and p99 while it runs), then ``verify()`` again.

    python bench/scale.py [--sessions 100000] [--messages 100]
        [--layouts sqlite,postgres,partitioned] [--partitions 16] [--samples 1000]
        [--postgres URL]   (default: $PRUNESTORE_TEST_POSTGRES_URL)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

import sqlalchemy as sa
from sessions import appends_while, empty_database, percentile

from prunestore import Message, PruneStore
from prunestore.jsonl import to_json
from prunestore.showcase.workloads import generate

PROBES = [f"probe-{i}" for i in range(50)]
TEMPLATES = 40  # distinct generated sessions; loaded sessions reuse them under their own names


def templates(messages: int) -> list[list[str]]:
    """JSON lines (without the session field) of agent sessions of about `messages` messages."""
    turns = messages // 3 + 1  # an agent turn has 4 to 5 messages: cut at `messages`
    out = []
    for seed in range(TEMPLATES):
        session = generate("agent", turns, seed=seed).messages[:messages]
        out.append([json.dumps(to_json(m))[1:] for m in session])
    return out


def write_jsonl(path: Path, names: range, lines: list[list[str]]) -> int:
    """Write the sessions `user-<n>` for n in `names`; returns the number of messages."""
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for n in names:
            prefix = '{"session": "user-' + str(n) + '", '
            for line in lines[n % len(lines)]:
                out.write(prefix + line + "\n")
                count += 1
    return count


def probe_appends(store: PruneStore, samples: int, turn: int) -> list[float]:
    latencies = []
    for i in range(samples):
        name = PROBES[i % len(PROBES)]
        start = time.perf_counter()
        store.append(name, Message(f"t{turn}-{i}", "user", f"probe question {i % 7}", turn))
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def first_page_ms(store: PruneStore, rounds: int = 30) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        store.sessions(limit=100)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def live_ms(url: str, names: list[str]) -> tuple[float, float]:
    """p50 of live() of each name with an empty cache, then again warm."""
    with PruneStore(url) as store:
        cold, warm = [], []
        for timings in (cold, warm):
            for name in names:
                start = time.perf_counter()
                store.live(name)
                timings.append((time.perf_counter() - start) * 1000)
    return statistics.median(cold), statistics.median(warm)


def vacuum(store: PruneStore) -> None:
    """VACUUM ANALYZE the tables on PostgreSQL, as autovacuum would after a load (some servers run without it)."""
    if store.engine.dialect.name != "postgresql":
        return
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        tables = conn.execute(sa.text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")).scalars()
        names = ", ".join(t for t in tables if t.startswith("prunestore_") and not t.rpartition("_p")[2].isdigit())
        conn.exec_driver_sql(f"VACUUM (ANALYZE) {names}")


def timed(call) -> tuple[object, float]:
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def measure(url: str, args: argparse.Namespace, tmp: Path) -> dict:
    row: dict = {"steps": []}
    lines = templates(args.messages)
    with PruneStore(url) as store:
        probe_appends(store, len(PROBES), 0)  # the probe sessions exist before the baseline
        base = probe_appends(store, args.samples, 1)
        row["steps"].append((0, 0, statistics.median(base), percentile(base, 0.99), first_page_ms(store)))
        loaded = 0
        messages = 0
        for step, target in enumerate(sorted({args.sessions // 10, args.sessions // 3, args.sessions}), start=2):
            path = tmp / f"load-{step}.jsonl"
            messages += write_jsonl(path, range(loaded, target), lines)
            command = [sys.executable, "-m", "prunestore.cli", "--db", url, "import", str(path)]
            _, took = timed(partial(subprocess.run, command, check=True, stdout=subprocess.DEVNULL))
            path.unlink()
            vacuum(store)
            print(f"  {target:,} sessions, {messages:,} messages: imported a step in {took:.0f} s", flush=True)
            row.setdefault("load_s", 0.0)
            row["load_s"] += took
            loaded = target
            appended = probe_appends(store, args.samples, step)
            row["steps"].append(
                (loaded, messages, statistics.median(appended), percentile(appended, 0.99), first_page_ms(store))
            )
        sample = [f"user-{n}" for n in random.Random(1).sample(range(loaded), 200)]
        row["live"] = live_ms(url, sample)
        report, row["verify_s"] = timed(store.verify)
        assert report.ok, report
        idle = [f"user-{n}" for n in range(0, loaded, 10)]
        with store.engine.begin() as conn:
            age = sa.text("UPDATE prunestore_sessions SET updated_at = updated_at - 8640000 WHERE name IN :names")
            for start in range(0, len(idle), 5000):
                conn.execute(
                    age.bindparams(sa.bindparam("names", expanding=True)), {"names": idle[start : start + 5000]}
                )
        vacuum(store)
        writers = [f"writer-{i}" for i in range(50)]  # appends_while counts turns from 1
        store.append_many({name: Message("w0", "user", "first", 0) for name in writers})
        gc_reports: list = []
        during, row["gc_s"] = appends_while(store, writers, lambda: gc_reports.append(store.gc(timedelta(days=30))))
        assert len(gc_reports[0].sessions) == len(idle), len(gc_reports[0].sessions)
        row["gc_removed"] = len(idle)
        row["during_gc"] = (statistics.median(during), percentile(during, 0.99))
        report, row["verify_after_gc_s"] = timed(store.verify)
        assert report.ok, report
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--layouts", default="sqlite,postgres,partitioned")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--postgres", default=os.environ.get("PRUNESTORE_TEST_POSTGRES_URL", ""))
    args = parser.parse_args()
    layouts = args.layouts.split(",")
    if not args.postgres:
        layouts = [layout for layout in layouts if layout == "sqlite"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layout in layouts:
            label = f"partitioned ({args.partitions})" if layout == "partitioned" else layout
            print(f"{label}:", flush=True)
            kind = "sqlite" if layout == "sqlite" else "postgresql"
            count = args.partitions if layout == "partitioned" else 0
            with empty_database(kind, args.postgres, Path(tmp), count) as url:
                results[label] = measure(url, args, Path(tmp))
    print()
    print("Probe appends and the first page of sessions(limit=100) as the store fills (ms):")
    print(f"{'layout':<18} {'sessions':>9} {'messages':>11} {'append p50':>11} {'p99':>7} {'x empty':>8} {'page':>6}")
    for label, row in results.items():
        empty = row["steps"][0][2]
        for sessions, messages, p50, p99, page in row["steps"]:
            print(
                f"{label:<18} {sessions:>9,} {messages:>11,} {p50:>11.2f} {p99:>7.2f} {p50 / empty:>8.2f} {page:>6.2f}"
            )
    print()
    print(
        f"{'layout':<18} {'load s':>7} {'live cold':>10} {'warm':>6} {'verify s':>9} "
        f"{'gc s':>6} {'removed':>8} {'appends during gc p50/p99':>26} {'verify after gc s':>18}"
    )
    for label, row in results.items():
        cold, warm = row["live"]
        p50, p99 = row["during_gc"]
        print(
            f"{label:<18} {row['load_s']:>7.0f} {cold:>10.2f} {warm:>6.3f} {row['verify_s']:>9.1f} "
            f"{row['gc_s']:>6.1f} {row['gc_removed']:>8,} {f'{p50:.2f}/{p99:.2f}':>26} "
            f"{row['verify_after_gc_s']:>18.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
