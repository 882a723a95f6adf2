"""Append latency at growing session sizes, on SQLite (file, WAL) and PostgreSQL.

Builds one session per size (1,000, 10,000 and 100,000 messages of history,
with batched appends of 1,000 messages a transaction), then times
single-message appends, each in its own transaction, taking the sessions in
turn, one append each, so that the machine's noise falls on every size alike.
Prints p50 and p99 per size and the ratio of the largest size's p50 to the
smallest's. Beside the appends, in the same rotation, it times the floor of a
durable write on the same database: a one-row INSERT committed on its own
(one round trip and the log flush on PostgreSQL; the WAL write on SQLite), and
prints each append p50 over that p50. With --partitioned, a second
PostgreSQL database (emptied, then made 16 hash partitions) runs too. With
--budget, two more SQLite stores with ``Policy(budget=..., clear_at_least=...)``,
evicting the oldest first and ``evict="definers_last"``, run beside the default
one, their appends interleaved with its, so the three compare in one run; with
--cache-ttl too, a fourth: definers last with that ``cache_ttl`` (each append then
stores its time and reads the time of the message before it). With --calls,
each tool result carries the Chat Completions message it came as, naming its
call, as the integrations store results (the index of tool calls then gets a
row for it). With --recall-index, one more store on each backend, with the
recall index (``prunestore db recall-index``), runs beside the default one
(on PostgreSQL in a schema of its own, dropped and made again).

    python bench/append_latency.py [--sizes 1000,10000,100000] [--samples 1000] [--calls] [--recall-index]
        [--postgres URL]   (default: $PRUNESTORE_TEST_POSTGRES_URL; "" skips it)
        [--partitioned URL]   (a PostgreSQL database this may empty)
        [--budget 2000 --clear 500 [--cache-ttl 300]]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

from prunestore import Message, Policy, PruneStore
from prunestore.sql import db, partitions, recall_index


class AgentTraffic:
    """A tool-agent-like stream: user and assistant turns, tool calls that repeat, passages that recur."""

    TOOLS = ["search", "sql_query", "calculator", "filesystem", "web_fetch"]

    def __init__(self, seed: int = 7, calls: bool = False) -> None:
        self.rng = random.Random(seed)
        self.calls = calls
        self.n = 0
        self.turn = 0
        self.open_keys: list[str] = []

    def _id(self) -> str:
        self.n += 1
        return f"m{self.n}"

    def next(self) -> Message:
        r = self.rng.random()
        if r < 0.25:
            self.turn += 1
            if self.rng.random() < 0.08:
                key = f"pref{self.n}"
                self.open_keys.append(key)
                return Message(self._id(), "user", f"Remember this preference DEFINE:{key}", self.turn)
            if self.open_keys and self.rng.random() < 0.3:
                key = self.rng.choice(self.open_keys)
                return Message(self._id(), "user", f"Use what I said before REF:{key}", self.turn)
            return Message(self._id(), "user", f"question {self.n} about the data", self.turn)
        if r < 0.5:
            return Message(self._id(), "assistant", f"answer {self.n} with some explanation", self.turn)
        if r < 0.8:
            tool = self.rng.choice(self.TOOLS)
            resource = self.rng.randrange(20)
            message_id, content = self._id(), f"{tool} result {self.n}"
            result = {"role": "tool", "tool_call_id": f"call_{message_id}", "content": content}
            return Message(
                message_id,
                "tool_output",
                content,
                self.turn,
                tool_key=f"{tool}:{resource}",
                expires_after_turn=self.turn + 50,
                metadata={"openai": result} if self.calls else None,
            )
        passage = self.rng.randrange(400)
        return Message(self._id(), "retrieved_doc", f"Passage number {passage} of the handbook.", self.turn)

    def batch(self, size: int) -> list[Message]:
        return [self.next() for _ in range(size)]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


BENCH_SCHEMA = "prunestore_bench_indexed"  # where PostgreSQL's store with the recall index runs


class InsertFloor:
    """A one-row INSERT committed on its own, on the store's database: the least a durable append can cost."""

    def __init__(self, store: PruneStore) -> None:
        self.raw = store.engine.raw_connection()
        self.table = f"bench_floor_{uuid.uuid4().hex[:8]}"
        self._run(f"CREATE TABLE {self.table} (n INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        self.n = 0

    def _run(self, sql: str, params: tuple = ()) -> None:
        cursor = self.raw.cursor()
        cursor.execute(sql, params)
        cursor.close()
        self.raw.commit()

    def insert(self) -> None:
        self.n += 1
        marker = "%s" if "psycopg" in type(self.raw.dbapi_connection).__module__ else "?"
        self._run(f"INSERT INTO {self.table} (n, body) VALUES ({marker}, {marker})", (self.n, "answer with some text"))

    def close(self) -> None:
        self._run(f"DROP TABLE {self.table}")
        self.raw.close()


def measure(
    stores: dict[str, PruneStore], sizes: list[int], samples: int, calls: bool = False
) -> tuple[dict[str, list[tuple[int, float, float]]], dict[str, float]]:
    """Build one session per size in each store, then time single appends, interleaved across stores and sizes,
    and each store's insert floor in the same rotation."""
    run = uuid.uuid4().hex[:8]
    sessions = {
        (label, size): (f"bench-{run}-{size}", AgentTraffic(seed=size, calls=calls))
        for label in stores
        for size in sizes
    }
    for (label, size), (session, traffic) in sessions.items():
        for start in range(0, size, 1000):
            stores[label].append(session, traffic.batch(min(1000, size - start)))
        print(f"  {label}: built {size:,} messages", flush=True)
    for store in stores.values():
        db.analyze(store.engine)  # PostgreSQL plans from statistics: as a maintained database has them
    timings: dict[tuple[str, int], list[float]] = {key: [] for key in sessions}
    floors = {label: InsertFloor(store) for label, store in stores.items()}
    floor_timings: dict[str, list[float]] = {label: [] for label in stores}
    for _ in range(samples):
        for key, (session, traffic) in sessions.items():  # interleaved: one append per store and size in turn
            message = traffic.next()
            start = time.perf_counter()
            stores[key[0]].append(session, message)
            timings[key].append((time.perf_counter() - start) * 1000)
        for label, floor in floors.items():
            start = time.perf_counter()
            floor.insert()
            floor_timings[label].append((time.perf_counter() - start) * 1000)
    for floor in floors.values():
        floor.close()
    rows = {
        label: [
            (size, statistics.median(timings[label, size]), percentile(timings[label, size], 0.99)) for size in sizes
        ]
        for label in stores
    }
    for (label, _), (session, _) in sessions.items():
        assert stores[label].verify(session).ok
        stores[label].delete_session(session)
    return rows, {label: statistics.median(values) for label, values in floor_timings.items()}


def own_schema(url: str) -> str:
    """`url` with a schema of its own (emptied first) on its search path: a second store in the database."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {BENCH_SCHEMA} CASCADE; CREATE SCHEMA {BENCH_SCHEMA}")
    engine.dispose()
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{BENCH_SCHEMA}"


def empty_and_partition(url: str) -> None:
    """Drop prunestore's tables from the database at `url`, then create them as 16 hash partitions."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    partitions.partition(engine, 16)
    engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--postgres", default=os.environ.get("PRUNESTORE_TEST_POSTGRES_URL", ""))
    parser.add_argument("--partitioned", default="", help="A PostgreSQL database to empty and partition.")
    parser.add_argument("--budget", type=int, help="Also run a store with this budget, side by side.")
    parser.add_argument("--clear", type=int, default=0, help="Its clear_at_least.")
    parser.add_argument("--cache-ttl", type=int, help="With --budget, also a store with this cache_ttl.")
    parser.add_argument("--calls", action="store_true", help="Tool results name their calls, as adapters store them.")
    parser.add_argument(
        "--recall-index", action="store_true", help="Also run a SQLite store with the recall index, side by side."
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    policies = {"default": Policy()}
    if args.budget:
        policies[f"budget {args.budget}/{args.clear}"] = Policy(budget=args.budget, clear_at_least=args.clear)
        policies[f"budget {args.budget}/{args.clear}, definers last"] = Policy(
            budget=args.budget, clear_at_least=args.clear, evict="definers_last"
        )
        if args.cache_ttl:
            policies[f"budget {args.budget}/{args.clear}, definers last, cache_ttl {args.cache_ttl}"] = Policy(
                budget=args.budget, clear_at_least=args.clear, evict="definers_last", cache_ttl=args.cache_ttl
            )
    indexed = "default, recall index"
    if args.recall_index:
        policies[indexed] = Policy()
    results: dict[str, list[tuple[int, float, float]]] = {}
    floors: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        backends = [("SQLite (file, WAL)", lambda label: f"sqlite:///{Path(tmp) / label.replace('/', '-')}.db")]
        if args.postgres:
            backends.append(
                ("PostgreSQL", lambda label: own_schema(args.postgres) if label == indexed else args.postgres)
            )
        if args.partitioned:
            empty_and_partition(args.partitioned)
            backends.append(("PostgreSQL, 16 partitions", lambda label: args.partitioned))
        for name, url in backends:
            print(f"{name}:", flush=True)
            # A database records one policy: on PostgreSQL (one database given) only the default runs,
            # and the store with the recall index in a schema of its own.
            if name.startswith("SQLite"):
                chosen = policies
            else:
                chosen = {"default": Policy(), **({indexed: Policy()} if args.recall_index else {})}
            stores = {label: PruneStore(url(label), policy=policy) for label, policy in chosen.items()}
            if indexed in stores:
                recall_index.create(stores[indexed].engine)
            measured, floor = measure(stores, sizes, args.samples, args.calls)
            for label, rows in measured.items():
                results[f"{name}, {label}"] = rows
                floors[f"{name}, {label}"] = floor[label]
            for store in stores.values():
                store.close()
    print()
    width = max(len(name) for name in results)
    head = "backend, policy"
    print(f"{head:<{width}} {'messages':>9} {'p50 ms':>8} {'p99 ms':>8} {'insert p50':>11} {'/ insert':>9}")
    for name, rows in results.items():
        for size, p50, p99 in rows:
            floor = floors[name]
            print(f"{name:<{width}} {size:>9,} {p50:>8.3f} {p99:>8.3f} {floor:>11.3f} {p50 / floor:>8.2f}x")
        print(f"{name:<{width}} ratio p50({sizes[-1]:,}) / p50({sizes[0]:,}) = {rows[-1][1] / rows[0][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
