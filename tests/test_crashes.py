"""A writer killed with SIGKILL at random moments loses nothing it committed and leaves nothing partial.

A child process appends batches of BATCH messages in a loop and is killed
at a random moment, KILLS times, on each backend. After every kill the store
opens, `verify` is ok, only whole batches are there, and the next run
(which starts over, so every stored batch is a no-op retry) carries on.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import sqlalchemy as sa

from prunestore import PruneStore

KILLS = 20
BATCH = 7
BATCHES = 400

CHILD = f"""
import sys
from prunestore import Message, PruneStore
store = PruneStore(sys.argv[1])
for b in range({BATCHES}):
    store.append("crash", [
        Message(f"b{{b}}m{{i}}", "tool_output" if i % 3 == 0 else "retrieved_doc",
                f"result {{b % 11}} DEFINE:k{{b % 5}} REF:k{{(b + 1) % 5}}" if i % 3 == 0
                else f"passage {{(b + i) % 9}}",
                b, tool_key=f"tool{{b % 4}}" if i % 3 == 0 else None,
                expires_after_turn=b + 3 if i == 1 else None)
        for i in range({BATCH})
    ])
    print(b, flush=True)
"""


def stored_count(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM prunestore_messages")).scalar_one()
    finally:
        engine.dispose()


def test_kill_9_at_random_moments(store, store_url):
    rng = random.Random(7)
    progress = []
    for _ in range(KILLS):
        child = subprocess.Popen([sys.executable, "-c", CHILD, store_url], stdout=subprocess.PIPE, text=True)
        # Let it redo what is stored (no-op retries) and commit a few new batches, then kill it
        # at a random moment inside a later append.
        assert child.stdout is not None
        for _ in range(stored_count(store_url) // BATCH + rng.randint(1, 15)):
            child.stdout.readline()
        time.sleep(rng.uniform(0, 0.004))
        child.send_signal(signal.SIGKILL)
        child.wait()
        count = stored_count(store_url)
        assert count % BATCH == 0, f"a partial batch is visible: {count} messages"
        with PruneStore(store_url) as reopened:
            report = reopened.verify()
            assert report.ok, report.mismatches[:3]
        progress.append(count)
    assert progress == sorted(progress)  # nothing committed was lost
    assert 0 < progress[0] and progress[-1] < BATCH * BATCHES, progress  # the kills landed part way
    finished = subprocess.run([sys.executable, "-c", CHILD, store_url], capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    assert stored_count(store_url) == BATCH * BATCHES
    assert store.verify().ok
