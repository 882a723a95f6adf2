"""How long each page of ``prunestore serve`` takes to answer, for a session of 10,000 messages on SQLite.

The store holds the session (the agent workload appended turn by turn, as a
chatbot would, until it has 10,000 messages) among 1,000 small ones. The
server runs as the command, in its own process; each page is fetched over
HTTP, in turn, `--rounds` times, and the table gives the median and the
95th percentile of the whole request as the client sees it:

* the sessions page (the first page, and a prefix search);
* the session's first, middle and last window of messages, folded and with everything shown;
* a restored message's explanation (which reads the session's references), and a kept one's;
* the chart of tokens per turn (one point per turn of the session);
* the prompt as sent (what `render` gives, and the calls it leaves out).

With `--budget N` the store's policy holds the prompt to N tokens (removal
events of at least N/4), so the prompt stays the same size as the session grows.

    python bench/web_pages.py [--messages 10000] [--rounds 30] [--budget N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date
from pathlib import Path
from urllib.parse import quote, urlencode

from prunestore import Message, Policy, PruneStore
from prunestore.showcase.workloads import generate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from webpages import serving  # noqa: E402  (the tests' way of running the command)


def fill(url: str, messages: int, policy: Policy) -> str:
    with PruneStore(url, policy=policy) as store:
        turns = generate("agent", messages // 4)
        stored = 0
        for batch in turns.by_turn():
            store.append("agent-long", batch)
            stored += len(batch)
            if stored >= messages:
                break
        for i in range(1000):
            store.append(f"user-{i:04}", [Message("q", "user", f"question {i}", 0), Message("a", "assistant", "ok", 0)])
        session = store.messages("agent-long")
        return next((m.id for m in session if m.verdict == "restored"), session[0].id)  # under a budget: perhaps none


def fetch(address: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(address) as response:
        response.read()
        assert response.status == 200
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--budget", type=int, help="the store's budget, in tokens (default: none)")
    args = parser.parse_args()
    policy = Policy(budget=args.budget, clear_at_least=args.budget // 4) if args.budget else Policy()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'web.db'}"
        restored = fill(url, args.messages, policy)
        with PruneStore(url) as store:
            summary = store.summary("agent-long")
            kept = store.messages("agent-long")[-1].id
        middle = summary.messages // 2 // 100 * 100
        last = (summary.messages - 1) // 100 * 100

        def q(**params: object) -> str:
            return urlencode(params, quote_via=quote)

        pages = {
            "sessions, first page": "/",
            "sessions, prefix search": "/?" + q(prefix="user-05"),
            "session, first window": "/session?" + q(name="agent-long"),
            "session, middle window": "/session?" + q(name="agent-long", after=middle),
            "session, last window": "/session?" + q(name="agent-long", after=last),
            "session, everything shown": "/session?" + q(name="agent-long", after=middle, show="all"),
            "message, restored": "/message?" + q(session="agent-long", id=restored),
            "message, kept": "/message?" + q(session="agent-long", id=kept),
            "chart": "/chart?" + q(session="agent-long"),
            "prompt as sent": "/prompt?" + q(session="agent-long"),
        }
        with serving(url) as (base, _):
            for path in pages.values():  # warm up: the first request of each page compiles its template
                fetch(base + path)
            times: dict[str, list[float]] = {name: [] for name in pages}
            for _ in range(args.rounds):
                for name, path in pages.items():
                    times[name].append(fetch(base + path))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    budget = f" --budget {args.budget}" if args.budget else ""
    print(f"python bench/web_pages.py --messages {args.messages} --rounds {args.rounds}{budget}")
    print(
        f"{date.today()}, commit {commit or 'unknown'}, {platform.machine()}, {platform.system()}, "
        f"Python {platform.python_version()}"
    )
    print(
        f"session agent-long: {summary.messages:,} messages, turn {summary.current_turn}, "
        f"{summary.live_tokens:,} of {summary.tokens:,} tokens in the prompt, beside 1,000 others\n"
    )
    print(f"{'page':28} {'p50 ms':>8} {'p95 ms':>8}")
    for name, values in times.items():
        values.sort()
        p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
        print(f"{name:28} {statistics.median(values):8.1f} {p95:8.1f}")


if __name__ == "__main__":
    main()
