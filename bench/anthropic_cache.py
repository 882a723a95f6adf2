"""What Anthropic's prompt cache reads and writes for AnthropicHistory's breakpoints, against the last one alone.

An agent's tool loop under a budget with removal events (tools listed again
and again, so results go stale and wait as pending until an event), sent
through `AnthropicHistory` with ``cache=True``. Each request is scored as the
Messages API caches: a request reads the longest prefix, ending at a block,
that an earlier request wrote at one of its breakpoints (looked up at each of
its own breakpoints and up to 20 blocks before it), and writes the prefix up
to each of its breakpoints. Tokens are the store's own count of each block's
JSON. The same prompts are scored twice: with the breakpoints the history
places (the last block, and while messages are pending the end of what the
next event leaves in place), and with the last block's alone.

Prints, per policy, the tokens sent, read from the cache, written to it and
sent fresh, and the cost in units of a fresh input token at Anthropic's
multipliers (a read 0.1, a 5-minute write 1.25).

    python bench/anthropic_cache.py [--steps 300]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import tempfile
from datetime import date
from pathlib import Path

from prunestore import Policy, PruneStore
from prunestore.integrations.anthropic_messages import AnthropicHistory
from prunestore.text import count_tokens

LOOKBACK = 20  # blocks the API looks back from a breakpoint for an earlier write
READ, WRITE = 0.1, 1.25


def blocks(messages: list[dict]) -> list[tuple[str, bool, int]]:
    """Each block of the prompt: the hash of the prompt up to it, whether it has a breakpoint, its tokens."""
    out, digest = [], hashlib.sha256()
    for m in messages:
        content = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        for block in content:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            text = json.dumps([m["role"], plain], sort_keys=True)
            digest.update(text.encode())
            out.append((digest.hexdigest(), "cache_control" in block, count_tokens(text)))
    return out


def score(prompts: list[list[dict]], last_only: bool) -> dict[str, int]:
    cache: set[str] = set()
    totals = {"sent": 0, "read": 0, "written": 0, "fresh": 0}
    for messages in prompts:
        seen = blocks(messages)
        marks = [n for n, (_, marked, _) in enumerate(seen) if marked]
        if last_only:
            marks = marks[-1:]
        sizes = [0]
        for _, _, tokens in seen:
            sizes.append(sizes[-1] + tokens)
        hit = 0  # blocks read from the cache
        for mark in marks:
            for end in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                if seen[end][0] in cache:
                    hit = max(hit, end + 1)
                    break
        written = max(marks, default=-1) + 1
        cache.update(seen[m][0] for m in marks)
        totals["sent"] += sizes[-1]
        totals["read"] += sizes[hit]
        totals["written"] += max(0, sizes[written] - sizes[hit])
        totals["fresh"] += sizes[-1] - max(sizes[hit], sizes[written])
    return totals


def folder_at(step: int) -> str:
    return f"/once/{step}" if step % 4 == 0 else f"/often/{step % 6}"


def agent_prompts(steps: int, budget: int, clear: int) -> list[list[dict]]:
    """The prompts of an agent that lists a few folders again and again (their older listings go stale) and,
    every fourth step, a folder it never lists again (that listing stays), one tool call a step."""
    with tempfile.TemporaryDirectory() as folder:
        with PruneStore(f"sqlite:///{folder}/bench.db", policy=Policy(budget=budget, clear_at_least=clear)) as store:
            history = AnthropicHistory("agent", store)
            prompts = []
            history.add([{"role": "user", "content": "Keep these folders tidy and tell me what changes."}])
            for n in range(steps):
                call = {"type": "tool_use", "id": f"toolu_{n}", "name": "ls", "input": {"path": folder_at(n)}}
                history.add([{"role": "assistant", "content": [{"type": "text", "text": f"Step {n}."}, call]}])
                prompts.append(history.messages())
                listing = " ".join(f"{folder_at(n)}/file{k}.csv" for k in range(12))
                result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": listing}
                history.add([{"role": "user", "content": [result]}])
                prompts.append(history.messages())
            return prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"python bench/anthropic_cache.py --steps {args.steps}  {date.today()}  commit {commit or '?'}")
    print(f"{platform.machine()}, Python {platform.python_version()}; {Path(__file__).name}")
    print()
    print("| budget, clear_at_least | breakpoints | tokens sent | read | written | fresh | cost (fresh units) |")
    print("|---|---|---|---|---|---|---|")
    for budget, clear in ((6000, 1500), (20000, 1500), (20000, 4000)):
        prompts = agent_prompts(args.steps, budget, clear)
        for last_only in (True, False):
            t = score(prompts, last_only)
            cost = t["read"] * READ + t["written"] * WRITE + t["fresh"]
            name = "the last alone" if last_only else "as the history places them"
            print(
                f"| {budget:,}, {clear:,} | {name} | {t['sent']:,} | {t['read']:,} | {t['written']:,} | "
                f"{t['fresh']:,} | {cost:,.0f} |"
            )


if __name__ == "__main__":
    main()
