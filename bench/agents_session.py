"""Per-turn cost of prunestore's Agents SDK session against the SDK's own SQLiteSession.

For each size (100, 1,000 and 10,000 items of history, and 100,000 for
prunestore alone: user messages, tool calls whose outputs go stale, answers),
one session per class on one SQLite file each. Three operations, each timed
side by side, round robin across sizes and classes:

- a turn as the Runner makes it: ``get_items()``, then ``add_items`` of four
  items (a user message, a call, its output, an answer);
- ``get_items(limit=50)``;
- ``pop_item()`` and adding the popped item back (an undo);
- ``pop_item()`` and then ``get_items()``, the read a retry makes after
  taking a turn back (the item is added back after, untimed);

and last, once, a full read after all of that. Prints the p50 ms of each and
the items a turn's ``get_items()`` returns.

    pip install '.[openai-agents]'
    python bench/agents_session.py [--sizes 100,1000,10000] [--solo-sizes 100000] [--turns 30]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agents import SQLiteSession

from prunestore import AsyncPruneStore
from prunestore.integrations.openai_agents import PruneStoreSession


def turn_items(n: int) -> list[dict]:
    """One agent turn: four items; the listing call repeats, so older outputs go stale."""
    folder = f"/data/{n % 5}"
    return [
        {"role": "user", "content": f"Question {n}: what changed in folder {n % 5}?"},
        {
            "type": "function_call",
            "call_id": f"call-{n}",
            "name": "list_files",
            "arguments": json.dumps({"path": folder}),
            "id": "__fake_id__",
        },
        {
            "type": "function_call_output",
            "call_id": f"call-{n}",
            "output": f"files in {folder}: " + " ".join(f"f{i}.csv" for i in range(n % 7 + 3)),
        },
        {"role": "assistant", "content": f"Folder {n % 5} now has {n % 7 + 3} files."},
    ]


async def timed(operation) -> float:
    gc.collect()  # so that one run's garbage is not collected in another's timing
    start = time.perf_counter()
    await operation()
    return (time.perf_counter() - start) * 1000


async def main(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",")]
    solo = [int(s) for s in args.solo_sizes.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        # A session of 100,000 items takes about 150 MB of cache (the default holds 64 MiB).
        store = AsyncPruneStore(f"sqlite:///{Path(tmp) / 'prunestore.db'}", live_cache_bytes=args.cache_mib * 2**20)
        factories = {
            "prunestore": lambda session: PruneStoreSession(session, store),
            "SQLiteSession": lambda session: SQLiteSession(session, Path(tmp) / "sdk.db"),
        }
        runs = [(size, name) for size in sizes for name in factories] + [(size, "prunestore") for size in solo]
        sessions, turn_of = {}, {}
        for size, name in runs:
            session = sessions[size, name] = factories[name](f"s{size}")
            for start in range(0, size // 4, 250):
                await session.add_items([i for n in range(start, min(start + 250, size // 4)) for i in turn_items(n)])
            turn_of[size, name] = size // 4
            await session.get_items()  # as a running agent would have
            print(f"  built {size:,} items for {name}", flush=True)
        kinds = ("turn", "get_items(limit=50)", "pop_item + re-add", "pop_item + get_items()")
        timings: dict[tuple, list[float]] = {(run, kind): [] for run in runs for kind in kinds}
        sent = {}
        for kind in kinds:
            for _ in range(args.turns):
                for run in runs:
                    session = sessions[run]

                    async def turn(session=session, run=run) -> None:
                        sent[run] = len(await session.get_items())
                        await session.add_items(turn_items(turn_of[run]))
                        turn_of[run] += 1

                    async def window(session=session) -> None:
                        await session.get_items(limit=50)

                    async def undo(session=session) -> None:
                        await session.add_items([await session.pop_item()])

                    popped: list = []

                    async def pop_and_read(session=session, popped=popped) -> None:
                        popped.append(await session.pop_item())
                        await session.get_items()

                    operation = {
                        "turn": turn,
                        "get_items(limit=50)": window,
                        "pop_item + re-add": undo,
                        "pop_item + get_items()": pop_and_read,
                    }[kind]
                    timings[run, kind].append(await timed(operation))
                    if popped:
                        await session.add_items(popped)
        for run in runs:  # after all of it
            timings[run, "get_items()"] = [await timed(sessions[run].get_items)]
        kinds += ("get_items()",)
        for session in sessions.values():
            if isinstance(session, SQLiteSession):
                session.close()
        await store.close()
    p50 = {key: statistics.median(times) for key, times in timings.items()}
    head = f"{'items':>9} {'session':<14} {'turn ms':>8} {'limit=50 ms':>12} {'pop+add ms':>11} {'pop+read ms':>12}"
    print(f"{head} {'read ms':>8} {'items sent':>11}")
    widths = (8, 12, 11, 12, 8)
    for run in runs:
        cells = " ".join(f"{p50[run, kind]:>{w}.2f}" for kind, w in zip(kinds, widths, strict=True))
        print(f"{run[0]:>9,} {run[1]:<14} {cells} {sent[run]:>11,}")
    for size in sizes:
        ratio = p50[(size, "SQLiteSession"), "turn"] / p50[(size, "prunestore"), "turn"]
        print(f"SQLiteSession / prunestore per turn at {size:,}: {ratio:.1f}x")
    smallest = min(sizes)
    for size in sorted(set(sizes + solo) - {smallest}):
        for kind in kinds[:4]:
            ratio = p50[(size, "prunestore"), kind] / p50[(smallest, "prunestore"), kind]
            print(f"prunestore {kind} at {size:,} / at {smallest:,}: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--solo-sizes", default="100000", help="Sizes measured for prunestore alone.")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--cache-mib", type=int, default=512, help="prunestore's live_cache_bytes, in MiB.")
    sys.exit(asyncio.run(main(parser.parse_args())))
