"""What an operator's and a client's reads of one session cost as the session grows, under a budget.

One session per size, appended 100 messages at a time: each turn a fact
(``DEFINE``, expiring at once), a Chat Completions tool call and its result,
which the next call of the same tool supersedes, and chatter; every tenth turn refers back to the fact of
100 turns before, which comes back restored. The policy's budget keeps the
prompt near the same size at every length, so a read that costs what it
returns is flat. Alternated, so that every size sees the same machine, it
times (median of ``--rounds``, ms):

* ``explain`` of the session's last restored message, which names the
  messages it is needed by;
* ``render(session, "openai")``;
* a cold Chat Completions view (``view`` in a store without the live cache,
  as the first read of a process);
* a cold ``live()``, for comparison.

    python bench/read_paths.py [--sizes 1000,10000,100000] [--rounds 15]
        [--postgres URL]   (default: $PRUNESTORE_TEST_POSTGRES_URL; "" skips it)
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from prunestore import Message, Policy, PruneStore
from prunestore.integrations.openai_chat import OPENAI_CHAT
from prunestore.sql import db

POLICY = Policy(budget=8_000, clear_at_least=2_000)
PER_TURN = 5


def turn_messages(t: int) -> list[Message]:
    """One turn of the session (see the module docstring)."""
    call = {"id": f"call_{t}", "type": "function", "function": {"name": f"tool{t % 3}", "arguments": "{}"}}
    made = {"role": "assistant", "content": None, "tool_calls": [call]}
    result = f"result {t} " + "data " * 30
    answer = {"role": "tool", "tool_call_id": f"call_{t}", "content": result}
    out = [
        Message(f"f{t}", "user", f"fact {t} DEFINE:k{t}", t, expires_after_turn=t),
        Message(f"c{t}", "assistant", f"call {t} " + "args " * 5, t, metadata={"openai": made}),
        Message(f"t{t}", "tool_output", result, t, tool_key=f"tool{t % 3}", metadata={"openai": answer}),
        Message(f"a{t}", "assistant", f"answer {t} " + "text " * 20, t),
    ]
    out.append(Message(f"r{t}", "user", f"as said REF:k{t - 100}" if t % 10 == 0 and t > 100 else f"ok {t}", t))
    return out


def build(store: PruneStore, name: str, size: int) -> str:
    """The session of `size` messages; the id of its last restored message."""
    batch: list[Message] = []
    for t in range(1, size // PER_TURN + 1):
        batch.extend(turn_messages(t))
        if len(batch) >= 100:
            store.append(name, batch)
            batch = []
    if batch:
        store.append(name, batch)
    restored = [m.id for m in store.messages(name) if m.verdict == "restored"]
    return restored[-1]


def record(times: dict[tuple[str, int], list[float]], case: str, size: int, call) -> None:
    """Time `call` into `times`, with the cyclic collector run before it, outside the timing."""
    gc.collect()
    start = time.perf_counter()
    call()
    times.setdefault((case, size), []).append((time.perf_counter() - start) * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--postgres", default=os.environ.get("PRUNESTORE_TEST_POSTGRES_URL", ""))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        backends = [("SQLite (file, WAL)", f"sqlite:///{Path(tmp) / 'reads.db'}")]
        if args.postgres:
            backends.append(("PostgreSQL", args.postgres))
        for label, url in backends:
            with PruneStore(url, policy=POLICY) as store, PruneStore(url, live_cache_bytes=0) as cold:
                for name in store.sessions("reads-"):
                    store.delete_session(name)
                restored = {size: build(store, f"reads-{size}", size) for size in sizes}
                db.analyze(store.engine)
                times: dict[tuple[str, int], list[float]] = {}
                timed = partial(record, times)
                for _ in range(args.rounds):
                    for size in sizes:
                        name = f"reads-{size}"
                        timed("explain, restored", size, partial(store.explain, name, restored[size]))
                        timed("render", size, partial(store.render, name))
                        timed("view, cold", size, partial(cold.view, name, OPENAI_CHAT))
                        timed("live(), cold", size, partial(cold.live, name))
                print(f"{label}:", flush=True)
                for size in sizes:
                    name = f"reads-{size}"
                    explanation = store.explain(name, restored[size])
                    print(
                        f"  {size:,} messages: {len(store.live(name)):,} in the prompt, "
                        f"{store.stats(name).live_tokens:,} tokens; {restored[size]} needed by "
                        f"{', '.join(explanation.needed_by)}"
                    )
                header = "".join(f"{f'{size:,}':>10}" for size in sizes)
                print(f"  {'ms, median of ' + str(args.rounds):<22}{header}{'last / first':>14}")
                for case in ("explain, restored", "render", "view, cold", "live(), cold"):
                    medians = [statistics.median(times[(case, size)]) for size in sizes]
                    cells = "".join(f"{m:>10.2f}" for m in medians)
                    print(f"  {case:<22}{cells}{medians[-1] / medians[0]:>14.2f}")
                for size in sizes:
                    store.delete_session(f"reads-{size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
