"""How long `live()` takes for a session with 7,500 live messages out of 10,000 (SQLite file, WAL).

Target (issue 3): at most 20 ms. Prints the median and best of 25 reads and,
alternated with them, a bare sqlite3 fetch of the same rows' fields as plain
tuples (no objects built): what any reader of these rows pays at least.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from prunestore import Message, PruneStore


def build(store: PruneStore) -> None:
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
        store.append("big", messages[start : start + 1000])


_BARE = (
    "SELECT seq, id, role, content, content_escaped, turn, tool_key, expires_after_turn, defines, refs, metadata, "
    "tokens, base, verdict FROM prunestore_messages WHERE session_id = 1 AND verdict IN ('kept', 'restored') "
    "ORDER BY seq"
)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        store = PruneStore(f"sqlite:///{Path(tmp) / 'live.db'}")
        build(store)
        live = store.live("big")
        print(f"session: {len(store.messages('big')):,} messages, {len(live):,} live")
        raw = store.engine.raw_connection()
        ours, bare = [], []
        for _ in range(25):  # alternated, so both see the same machine
            start = time.perf_counter()
            store.live("big")
            ours.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            raw.driver_connection.execute(_BARE).fetchall()
            bare.append((time.perf_counter() - start) * 1000)
        raw.close()
        store.close()
    print(
        f"live(): median {statistics.median(ours):.1f} ms, best {min(ours):.1f} ms; target <= 20 ms\n"
        f"bare sqlite3 fetch of the same rows' 14 fields as tuples: median {statistics.median(bare):.1f} ms, "
        f"best {min(bare):.1f} ms\n"
        f"live() / bare fetch: {statistics.median(ours) / statistics.median(bare):.2f} (medians)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
