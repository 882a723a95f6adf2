"""Throughput and peak memory of ``prunestore import`` into SQLite.

Writes a JSON Lines file of tool-agent sessions (each session's messages
together, as an export from a chat backend looks), then runs the import in a
child process and reports messages per second and its peak resident memory.
Run at two file sizes to see that memory does not grow with the file.

    python bench/import_throughput.py [--messages 1000000] [--sessions 1000]

It prints messages a second and the peak memory, which should stay flat in the file size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prunestore.jsonl import to_json
from prunestore.showcase.workloads import generate


def write_file(path: Path, messages: int, sessions: int) -> int:
    per_session = messages // sessions
    turns = 1
    while sum(1 for _ in generate("agent", turns).messages) < per_session:
        turns *= 2
    template = generate("agent", turns).messages[:per_session]
    written = 0
    with path.open("w") as out:
        for s in range(sessions):
            name = f"user-{s:05d}"
            for m in template:
                out.write(json.dumps(to_json(m, session=name)) + "\n")
                written += 1
    return written


def run_import(path: Path, db: Path, batch: int) -> tuple[float, float]:
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(
        [
            sys.executable,
            "-m",
            "prunestore.cli",
            "--db",
            f"sqlite:///{db}",
            "import",
            "--batch-size",
            str(batch),
            str(path),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(peak, before) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for fraction in (10, 1):
            n = args.messages // fraction
            path = Path(tmp) / f"import-{n}.jsonl"
            written = write_file(path, n, max(1, args.sessions // fraction))
            db = Path(tmp) / f"import-{n}.db"
            elapsed, peak_mb = run_import(path, db, args.batch_size)
            print(
                f"{written:>9,} messages ({path.stat().st_size / 2**20:,.0f} MiB file): "
                f"{elapsed:6.1f} s, {written / elapsed:,.0f} messages/s, peak RSS {peak_mb:,.0f} MiB",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
