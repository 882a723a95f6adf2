"""How long `live()` takes for a session with 7,500 live messages out of 10,000.

On SQLite (a file in WAL mode), and PostgreSQL when given. Alternated in
one loop, so that all see the same machine, it times 25 of each:

* cold: a store without the live cache (``live_cache_bytes=0``), which reads
  and builds every row, as any store does after another process wrote;
* after another writer's append: the cache notices the new stamp, and the
  undo journal names the rows that append changed, which it reads;
* after its own append (a tool result superseding the last one, and a user
  message): the cache reads the rows that append wrote;
* again, with nothing written since;
* a bare driver fetch of the same rows' 14 fields as plain tuples (no
  objects built): what any cold reader of these rows pays at least;
* the Chat Completions view (`store.view`, what the integrations read),
  cold and after another writer's append.

The cyclic garbage collector runs before each timed call, outside the timing:
otherwise its full collections (tens of ms in a process holding a few hundred
thousand objects) land on whichever call happens to trigger one.

    python bench/live_read.py [--postgres URL]   (default: $PRUNESTORE_TEST_POSTGRES_URL; "" skips it)
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from prunestore import Message, PruneStore
from prunestore.integrations.openai_chat import OPENAI_CHAT
from prunestore.sql import db


def build(store: PruneStore, name: str = "big") -> None:
    """10,000 messages: every fourth is a tool output that a later call of the same tool supersedes."""
    messages = []
    for i in range(10_000):
        if i % 4 == 3:
            messages.append(
                Message(f"m{i}", "tool_output", f"result {i} " + "data " * 30, i // 4, tool_key=f"tool{(i // 4) % 2}")
            )
        else:
            messages.append(Message(f"m{i}", "user" if i % 2 else "assistant", f"message {i} " + "text " * 40, i // 4))
    for start in range(0, len(messages), 1000):
        store.append(name, messages[start : start + 1000])


_BARE = (
    "SELECT seq, id, role, content, content_escaped, turn, tool_key, expires_after_turn, defines, refs, metadata, "
    "tokens, base, verdict FROM prunestore_messages WHERE session_id = {sid} AND verdict IN ('kept', 'restored') "
    "ORDER BY seq"
)


def measure(url: str) -> dict[str, list[float]]:
    name = f"live-{uuid.uuid4().hex[:8]}"
    store, other, cold = PruneStore(url), PruneStore(url), PruneStore(url, live_cache_bytes=0)
    build(store, name)
    db.analyze(store.engine)  # PostgreSQL plans from statistics: as a maintained database has them
    live = store.live(name)
    print(f"  session: {len(store.messages(name)):,} messages, {len(live):,} live", flush=True)
    raw = store.engine.raw_connection()
    sid = raw.driver_connection.execute(
        "SELECT session_id FROM prunestore_sessions WHERE name = %s"
        if url.startswith("postgresql")
        else "SELECT session_id FROM prunestore_sessions WHERE name = ?",
        (name,),
    ).fetchone()[0]
    bare_sql = _BARE.format(sid=int(sid))
    times: dict[str, list[float]] = {case: [] for case in _CASES}

    def timed(case: str, call) -> None:
        gc.collect()  # a collection falls on whichever call triggers it: keep them out of every figure
        start = time.perf_counter()
        call()
        times[case].append((time.perf_counter() - start) * 1000)

    turn = 2_500
    for i in range(25):
        timed("cold", lambda: cold.live(name))
        other.append(name, Message(f"o{i}", "user", f"from another process {i}", turn))
        timed("after another writer's append", lambda: store.live(name))
        turn += 1
        store.append(
            name,
            [
                Message(f"t{i}", "tool_output", f"result {i} " + "data " * 30, turn, tool_key="tool0"),
                Message(f"u{i}", "user", f"message {i} " + "text " * 40, turn),
            ],
        )
        timed("after its own append", lambda: store.live(name))
        timed("nothing written since", lambda: store.live(name))
        timed("bare driver fetch", lambda: raw.driver_connection.execute(bare_sql).fetchall())
        timed("view, cold", lambda: cold.view(name, OPENAI_CHAT))
        other.append(name, Message(f"v{i}", "user", f"from another process again {i}", turn))
        timed("view after another writer's append", lambda: store.view(name, OPENAI_CHAT))
    assert store.live(name) == cold.live(name)
    assert store.view(name, OPENAI_CHAT) == cold.view(name, OPENAI_CHAT)
    raw.close()
    store.delete_session(name)
    for s in (store, other, cold):
        s.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get("PRUNESTORE_TEST_POSTGRES_URL", ""))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backends = [("SQLite (file, WAL)", f"sqlite:///{Path(tmp) / 'live.db'}")]
        if args.postgres:
            backends.append(("PostgreSQL", args.postgres))
        for label, url in backends:
            print(f"{label}:", flush=True)
            times = measure(url)
            bare = statistics.median(times["bare driver fetch"])
            print(f"  {'live(), ms over 25 reads each':<38} {'median':>8} {'best':>8} {'/ bare':>8}")
            for case, values in times.items():
                median = statistics.median(values)
                print(f"  {case:<38} {median:>8.2f} {min(values):>8.2f} {median / bare:>8.2f}")
    return 0


_CASES = [
    "cold",
    "after another writer's append",
    "after its own append",
    "nothing written since",
    "bare driver fetch",
    "view, cold",
    "view after another writer's append",
]


if __name__ == "__main__":
    sys.exit(main())
