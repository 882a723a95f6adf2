"""Per-turn cost of prunestore against what users do today, side by side in one run.

For a tool-agent conversation, at each measured length, the cost of one turn:

* ``incremental``: `PruneStore.append` of the turn's messages (SQLite file, WAL);
* ``incremental_patch``: the same append, then keeping a client's prompt up to
  date from the returned `Delta` (`messages(ids=delta.live_added)`);
* ``incremental_live``: the same append, then `PruneStore.live` for the whole prompt (served from
  the store's live cache: it reads the rows the append wrote, not the session);
* ``batch``: keep the full history in memory and rerun `prune` over all of it;
* ``sql_batch``: store the turn in a SQL chat-history table (JSON rows, as
  LangChain's SQL chat history does), read the whole history back, rerun `prune`.

Each figure is the median over the few turns that end at the measured length.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from ..jsonl import parse_line, to_json
from ..model import Message, StoredMessage
from ..prune import prune
from ..store import PruneStore
from .workloads import generate

WINDOW = 5  # turns measured at each length


def compare_per_turn(sizes: tuple[int, ...], seed: int = 0) -> list[dict[str, float]]:
    turns = generate("agent", max(sizes), seed)
    measured = {t for n in sizes for t in range(max(1, n - WINDOW + 1), n + 1)}
    costs: dict[str, dict[int, float]] = {
        "incremental": {},
        "incremental_patch": {},
        "incremental_live": {},
        "batch": {},
        "sql_batch": {},
    }
    prompt: dict[str, StoredMessage] = {}  # the client's copy, kept from the deltas
    with tempfile.TemporaryDirectory() as tmp:
        store = PruneStore(f"sqlite:///{Path(tmp) / 'prunestore.db'}")
        history_db = sa.create_engine(f"sqlite:///{Path(tmp) / 'history.db'}")
        table = sa.Table(
            "chat_history",
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("session_id", sa.Text, index=True),
            sa.Column("message", sa.Text),
        )
        table.metadata.create_all(history_db)
        history: list[Message] = []
        try:
            for messages in turns.by_turn():
                turn = messages[0].turn
                timed = turn in measured

                start = time.perf_counter()
                delta = store.append("bench", messages)
                appended = time.perf_counter() - start
                for message_id in delta.live_removed:
                    del prompt[message_id]
                prompt.update((m.id, m) for m in store.messages("bench", ids=delta.live_added))
                patched = time.perf_counter() - start
                if timed:
                    start = time.perf_counter()
                    live = store.live("bench")
                    costs["incremental_live"][turn] = appended + time.perf_counter() - start
                    costs["incremental"][turn], costs["incremental_patch"][turn] = appended, patched
                    if sorted(prompt) != sorted(m.id for m in live):
                        raise AssertionError(f"turn {turn}: the prompt kept from deltas differs from live()")

                history.extend(messages)
                if timed:
                    start = time.perf_counter()
                    prune(history)
                    costs["batch"][turn] = time.perf_counter() - start

                start = time.perf_counter()
                with history_db.begin() as conn:
                    rows = [{"session_id": "bench", "message": json.dumps(to_json(m))} for m in messages]
                    conn.execute(table.insert(), rows)
                if timed:
                    with history_db.connect() as conn:
                        query = sa.select(table.c.message).where(table.c.session_id == "bench").order_by(table.c.id)
                        texts = enumerate(conn.execute(query).scalars(), 1)
                        loaded = [parse_line(text, n, session_field=False)[1] for n, text in texts]
                    prune(loaded)
                    costs["sql_batch"][turn] = time.perf_counter() - start
        finally:
            store.close()
            history_db.dispose()
    result = []
    for n in sizes:
        window = [t for t in range(max(1, n - WINDOW + 1), n + 1)]
        row: dict[str, float] = {"turns": n, "messages": sum(1 for m in turns.messages if m.turn <= n)}
        for name, per_turn in costs.items():
            row[f"{name}_ms"] = statistics.median(per_turn[t] for t in window) * 1000
        result.append(row)
    return result


def plotting():
    """matplotlib's pyplot on a file backend; a clear error when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        from ..errors import PruneStoreError

        raise PruneStoreError("--plot needs matplotlib: pip install '.[plot]'") from exc
    return plt


def draw(result: list[dict], path: Path) -> None:
    """Cost per turn against conversation length (needs matplotlib: pip install '.[plot]')."""
    plt = plotting()
    turns = [r["turns"] for r in result]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label in (
        ("incremental_ms", "prunestore append"),
        ("batch_ms", "rerun batch prune"),
        ("sql_batch_ms", "SQL history read + rerun"),
    ):
        ax.plot(turns, [r[key] for r in result], marker="o", label=label)
    ax.set_xlabel("conversation length (turns)")
    ax.set_ylabel("cost per turn (ms)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
