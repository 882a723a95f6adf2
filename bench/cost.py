"""What sending the prompt every turn costs when the provider caches prompt prefixes, per strategy.

Each workload (`prunestore.showcase.workloads`: the tool agent, the fact-heavy agent and
the chat; a name with ``+idle`` is that workload with times, see below) is played
turn by turn. After each turn every strategy gives the prompt it would send;
the turn's cost under the price model below is summed over the conversation.

Price model (`prunestore.showcase.costs`), per input token: read from the cache 0.1,
written to the cache 1.25, fresh (no cache at all) 1.0. A turn's cached part
is the longest common prefix of its prompt with the previous turn's prompt;
the rest is written to the cache (the prompt is cached up to its end every
turn), or all of it when the turn comes more than 5 minutes after the one before
(the cache has expired; only ``+idle`` workloads have times). The "no cache"
column prices every prompt token at 1.0. A message's tokens are those of its
OpenAI Chat Completions form (`prunestore.render`, as JSON), counted by the
store's tokenizer; a prompt is the concatenation of its messages, so two
prompts share a prefix up to the first message that differs.

Facts: at each turn, every message a user message refers to (``REF:key``:
the last message defining the key) must be in that turn's prompt, with its
content, for the fact to be kept.

Strategies:
* send everything;
* prunestore, the passes only (``Policy()``: every removal at once);
* prunestore with a budget and removal events (``Policy(budget=B, clear_at_least=C)``);
* the same, evicting the messages that define no key in use first (``evict="definers_last"``);
* that prompt priced as if every message joining before its end (a comeback) were re-sent at the
  end instead (not a policy the store has: the prompt would leave append order, and a result could
  be parted from its call);
* Anthropic's clear-tool-uses rule, re-implemented: when the input exceeds
  the trigger (B), every tool result but the last 3 is replaced by a
  placeholder, provided that clears at least C tokens; the client resends the
  whole history, so the rule is applied to it afresh every turn;
* the last messages within B tokens (LangChain ``trim_messages``,
  strategy="last", include_system=True, start_on="human");
* on ``+idle`` workloads, the definers-last budget with ``cache_ttl=300``: a turn
  after a gap longer than the cache keeps a prompt clears what is pending;
* the definers-last budget with summaries: after each turn, `PruneStore.summarize`
  writes one summary per evicted span that nothing stands for yet, by a stand-in
  summarizer of a fixed size (``--summary-words``, 200 words: no model is called), and
  each summary stands in the prompt where its span began while its span is out.
  "evicted represented" is the share of the messages evicted at the last turn that
  a summary in the prompt stands for (directly, or through an evicted summary that
  one in the prompt stands for).

A ``+idle`` workload gives each turn a time: 20 to 90 seconds after the one
before, and one turn in 30 (seeded) after a 15-minute pause, when the
provider's 5-minute cache has expired.

Breaks (turns whose prompt does not begin with the previous one) are counted by
cause: an event (a message left the prompt), a comeback (a message that was in an
earlier prompt came back before the end), a new entry (a message joined before the
end for the first time: a restored definer the passes had dropped, a new surviving
copy of a passage).

    python bench/cost.py [--turns 200,1000,2000] [--workloads agent,facts,chat,agent+idle,facts+idle]
        [--budget 32000] [--clear 16000] [--summary-words 200] [--plot cost.png] [--json]

With ``--db URL``, the sessions a store holds (``--sessions a,b``; default
all) are played instead, turn by turn as they were stored, each message
counting the tokens stored with it, under three strategies: sending
everything, the store's policy, and the store's policy with ``--budget`` and
``--clear``. Those are the figures ``prunestore cost SESSION --budget B
--clear-at-least C --prices anthropic-5m`` gives for the same session.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from prunestore import Message, Policy, PruneStore
from prunestore.formats import render
from prunestore.model import StoredMessage, effective_defines, effective_refs
from prunestore.showcase.costs import prompt_costs
from prunestore.showcase.workloads import GeneratedSession, generate
from prunestore.text import count_tokens

KEEP_TOOL_RESULTS = 3
PLACEHOLDER = "[Old tool result content cleared]"

# A prompt: (message id, whether its content was replaced) per message, in order.
Prompt = list[tuple[str, bool]]


@dataclass
class Row:
    workload: str
    turns: int
    strategy: str
    cost: float
    uncached: float
    peak: int
    mean: float
    breaks: int
    event_breaks: int
    comeback_breaks: int
    facts: int
    facts_kept: int
    seconds: float
    represented: float | None = None  # with summaries: the share of evicted messages a summary stands for

    @property
    def kept_share(self) -> float:
        return self.facts_kept / self.facts if self.facts else 1.0


def rendered_tokens(message: Message) -> int:
    """Tokens of the message as one Chat Completions message (JSON)."""
    stored = StoredMessage(**(vars(message) | {"tokens": 0}), seq=1, verdict="kept", base="kept")
    return sum(count_tokens(json.dumps(m, ensure_ascii=False)) for m in render([stored], "openai").messages)


def sent_tokens(content: str) -> int:
    """The store's tokenizer for these runs: a message's tokens as sent, so its budget is the one billed."""
    return count_tokens(json.dumps({"role": "user", "content": content}, ensure_ascii=False))


def everything(turns: Sequence[list[Message]], tokens: dict, budget: int, clear: int) -> Iterator[Prompt]:
    prompt: Prompt = []
    for batch in turns:
        prompt = prompt + [(m.id, False) for m in batch]
        yield prompt


def prunestore_with(policy: Policy) -> Callable[..., Iterator[Prompt]]:
    def strategy(turns: Sequence[list[Message]], tokens: dict, budget: int, clear: int) -> Iterator[Prompt]:
        with PruneStore("sqlite://", policy=policy, tokenizer=sent_tokens) as store:
            for batch in turns:
                store.append("s", batch)
                yield [(m.id, False) for m in store.live("s")]

    return strategy


def with_summaries(policy: Policy, words: int, represented: dict[str, float]) -> Callable[..., Iterator[Prompt]]:
    """The store's prompts under `policy`, summarizing each evicted span after each turn (a fixed-size text).

    Sets ``represented["share"]`` once the last turn is played.
    """
    text = "Summary of earlier messages: " + "detail " * words

    def strategy(turns: Sequence[list[Message]], tokens: dict, budget: int, clear: int) -> Iterator[Prompt]:
        with PruneStore("sqlite://", policy=policy, tokenizer=sent_tokens) as store:
            for batch in turns:
                store.append("s", batch)
                written = store.summarize("s", lambda span: text).written
                for summary in store.messages("s", written):
                    tokens[summary.id] = rendered_tokens(summary.to_message())
                yield [(m.id, False) for m in store.live("s")]
            represented["share"] = represented_share(store.messages("s"))

    return strategy


def represented_share(messages: list[StoredMessage]) -> float:
    """Of the evicted messages, the share a summary in the prompt stands for, directly or through evicted ones."""
    covering: dict[str, list[StoredMessage]] = {}
    for m in messages:
        for covered in m.summarizes:
            covering.setdefault(covered, []).append(m)

    def stands(m: StoredMessage) -> bool:
        return any(s.live or (s.verdict == "evicted" and stands(s)) for s in covering.get(m.id, []))

    evicted = [m for m in messages if m.verdict == "evicted" and not m.summarizes]
    return sum(map(stands, evicted)) / len(evicted) if evicted else 1.0


def comebacks_at_the_end(policy: Policy) -> Callable[..., Iterator[Prompt]]:
    """The store's prompts under `policy`, reordered as if a message coming back were re-sent at the end.

    Priced only, not a policy: each message keeps its place in the previous
    prompt; a message that joins other than as one of the turn's new ones (a
    comeback, a restored definer, a promoted copy) goes after them, in
    append order, before the turn's new messages. Same messages each turn,
    so the same facts kept.
    """
    inner = prunestore_with(policy)

    def strategy(turns: Sequence[list[Message]], tokens: dict, budget: int, clear: int) -> Iterator[Prompt]:
        order: list[str] = []
        for batch, prompt in zip(turns, inner(turns, tokens, budget, clear), strict=True):
            present, new = {i for i, _ in prompt}, {m.id for m in batch}
            order = [i for i in order if i in present]
            placed = set(order)
            order += [i for i, _ in prompt if i not in placed and i not in new]
            order += [i for i, _ in prompt if i in new and i not in placed]
            yield [(i, False) for i in order]

    return strategy


def clear_tool_uses(turns: Sequence[list[Message]], tokens: dict, budget: int, clear: int) -> Iterator[Prompt]:
    history: list[Message] = []
    placeholder = rendered_tokens(Message("p", "tool_output", PLACEHOLDER, 0))
    total = 0
    for batch in turns:
        history.extend(batch)
        total += sum(tokens[m.id] for m in batch)
        cleared: set[str] = set()
        if total > budget:
            results = [m.id for m in history if m.role == "tool_output"][:-KEEP_TOOL_RESULTS]
            if sum(tokens[i] - placeholder for i in results) >= clear:
                cleared = set(results)
        yield [(m.id, m.id in cleared) for m in history]


def trim_last(turns: Sequence[list[Message]], tokens: dict, budget: int, clear: int) -> Iterator[Prompt]:
    history: list[Message] = []
    for batch in turns:
        history.extend(batch)
        system = [m for m in history if m.role == "system"][:1]
        room = budget - sum(tokens[m.id] for m in system)
        window: list[Message] = []
        for m in reversed(history):
            if m.role == "system":
                continue
            if tokens[m.id] > room:
                break
            room -= tokens[m.id]
            window.append(m)
        window.reverse()
        while window and window[0].role != "user":  # start_on="human"
            window.pop(0)
        yield [(m.id, False) for m in system + window]


IDLE_START = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


def with_times(session: GeneratedSession) -> GeneratedSession:
    """The session with a time on every message: turns 20 to 90 s apart, one in 30 after a 15-minute pause."""
    rng = random.Random(f"idle:{session.workload.name}:{session.turns}:{session.seed}")
    at, timed = IDLE_START, []
    for batch in session.by_turn():
        at += timedelta(seconds=900 if rng.random() < 1 / 30 else rng.randint(20, 90))
        timed.extend(replace(m, at=at) for m in batch)
    return replace(session, messages=tuple(timed))


def measure(workload: str, turns: int, strategy: str, prompts: Iterator[Prompt], tokens: dict, session) -> Row:
    """Price the prompts and count the facts each turn's prompt keeps."""
    placeholder = rendered_tokens(Message("p", "tool_output", PLACEHOLDER, 0))
    definer: dict[str, str] = {}
    facts = kept = 0
    priced: list[list[tuple[tuple[str, bool], int]]] = []
    times = []  # when each turn's prompt is sent: after its last message
    previous: Prompt = []
    seen: set[tuple[str, bool]] = set()
    events = comebacks = 0
    started = time.perf_counter()
    for batch, prompt in zip(session.by_turn(), prompts, strict=True):
        priced.append([((i, cleared), placeholder if cleared else tokens[i]) for i, cleared in prompt])
        times.append(batch[-1].at)
        if prompt[: len(previous)] != previous:
            if set(previous) - set(prompt):
                events += 1
            else:
                comebacks += any(entry in seen for entry in prompt[: len(prompt) - len(batch)] if entry not in previous)
        seen.update(prompt)
        previous = prompt
        present = {i for i, cleared in prompt if not cleared}
        for m in batch:
            if m.role == "user":
                needed = {definer[k] for k in effective_refs(m) if k in definer}
                facts += len(needed)
                kept += len(needed & present)
            for key in effective_defines(m):
                definer[key] = m.id
    costs = prompt_costs(priced, times=times)
    seconds = time.perf_counter() - started
    return Row(
        workload,
        turns,
        strategy,
        costs.cost,
        costs.uncached,
        costs.peak,
        costs.mean,
        costs.breaks,
        events,
        comebacks,
        facts,
        kept,
        seconds,
    )


def run(workloads: list[str], sizes: list[int], budget: int, clear: int, words: int) -> list[Row]:
    represented: dict[str, float] = {}
    strategies: list[tuple[str, Callable[..., Iterator[Prompt]]]] = [
        ("send everything", everything),
        ("prunestore, passes only", prunestore_with(Policy())),
        (
            f"prunestore, budget {budget}, events >= {clear}",
            prunestore_with(Policy(budget=budget, clear_at_least=clear)),
        ),
        (
            f"prunestore, budget {budget}, events >= {clear}, definers last",
            prunestore_with(Policy(budget=budget, clear_at_least=clear, evict="definers_last")),
        ),
        (
            f"prunestore, budget {budget}, events >= {clear}, definers last, comebacks at the end (priced)",
            comebacks_at_the_end(Policy(budget=budget, clear_at_least=clear, evict="definers_last")),
        ),
        (
            f"prunestore, budget {budget}, events >= {clear}, definers last, summaries of {words} words",
            with_summaries(Policy(budget=budget, clear_at_least=clear, evict="definers_last"), words, represented),
        ),
        (f"clear tool uses (trigger {budget}, keep {KEEP_TOOL_RESULTS}, >= {clear})", clear_tool_uses),
        (f"last messages within {budget}", trim_last),
    ]
    ttl = (
        f"prunestore, budget {budget}, events >= {clear}, definers last, cache_ttl 300",
        prunestore_with(Policy(budget=budget, clear_at_least=clear, evict="definers_last", cache_ttl=300)),
    )
    rows = []
    for workload, turns in itertools.product(workloads, sizes):
        base, idle = workload.removesuffix("+idle"), workload.endswith("+idle")
        session = with_times(generate(base, turns)) if idle else generate(base, turns)
        tokens = {m.id: rendered_tokens(m) for m in session.messages}
        by_turn = list(session.by_turn())
        for name, strategy in [*strategies, ttl] if idle else strategies:
            prompts = strategy(by_turn, tokens, budget, clear)
            rows.append(measure(workload, turns, name, prompts, tokens, session))
            if represented:
                rows[-1].represented = represented.pop("share")
            print(f"  {workload} {turns}: {name} done", file=sys.stderr)
    return rows


@dataclass(frozen=True)
class StoredSession:
    """A stored session's messages, each with the tokens stored with it, grouped by turn as `measure` reads them."""

    messages: tuple[Message, ...]

    def by_turn(self) -> Iterator[list[Message]]:
        for _, group in itertools.groupby(self.messages, key=lambda m: m.turn):
            yield list(group)


def run_stored(url: str, names: list[str] | None, budget: int, clear: int) -> list[Row]:
    """Play the sessions a store holds: sending everything, the store's policy, and that policy with the budget."""
    with PruneStore(url) as store:
        policy = store.policy
        sessions = {
            name: StoredSession(tuple(replace(m.to_message(), tokens=m.tokens) for m in store.messages(name)))
            for name in names or store.sessions()
        }
    strategies: list[tuple[str, Callable[..., Iterator[Prompt]]]] = [
        ("send everything", everything),
        ("prunestore, the store's policy", prunestore_with(policy)),
        (
            f"prunestore, the store's policy, budget {budget}, events >= {clear}",
            prunestore_with(replace(policy, budget=budget, clear_at_least=clear)),
        ),
    ]
    rows = []
    for name, session in sessions.items():
        tokens = {m.id: m.tokens for m in session.messages}
        by_turn = list(session.by_turn())
        for strategy_name, strategy in strategies:
            prompts = strategy(by_turn, tokens, budget, clear)
            rows.append(measure(name, len(by_turn), strategy_name, prompts, tokens, session))
    return rows


def table(rows: list[Row]) -> str:
    head = ["workload", "turns", "strategy", "cost", "everything / this", "no cache", "peak", "mean", "breaks"]
    head.append("by event / comeback / new entry")
    head.append("facts kept")
    head.append("evicted represented")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = {(r.workload, r.turns): r.cost for r in rows if r.strategy == "send everything"}
    for r in rows:
        lines.append(
            f"| {r.workload} | {r.turns:,} | {r.strategy} | {r.cost / 1e6:.2f}M | "
            f"{base[r.workload, r.turns] / r.cost:.2f} | {r.uncached / 1e6:.2f}M | {r.peak:,} | {r.mean:,.0f} | "
            f"{r.breaks:,} | {r.event_breaks:,} / {r.comeback_breaks:,} / "
            f"{r.breaks - r.event_breaks - r.comeback_breaks:,} | {r.facts_kept:,}/{r.facts:,} ({r.kept_share:.0%}) | "
            f"{'' if r.represented is None else f'{r.represented:.0%}'} |"
        )
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted({r.workload for r in rows})
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4), squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        for strategy in dict.fromkeys(r.strategy for r in rows):
            points = [(r.turns, r.cost / 1e6) for r in rows if r.workload == workload and r.strategy == strategy]
            ax.plot(*zip(*points, strict=True), marker="o", label=strategy)
        ax.set_title(f"{workload}: input cost with a prompt cache")
        ax.set_xlabel("turns")
        ax.set_ylabel("cost (millions of token-prices)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="200,1000,2000")
    parser.add_argument("--workloads", default="agent,facts,chat")
    parser.add_argument("--budget", type=int, default=32000)
    parser.add_argument("--clear", type=int, default=16000)
    parser.add_argument("--summary-words", type=int, default=200, help="The stand-in summaries' size, in words.")
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--db", help="Play the sessions this store holds instead of the workloads.")
    parser.add_argument("--sessions", help="With --db: comma-separated session names (default: all).")
    args = parser.parse_args()
    if args.db:
        names = args.sessions.split(",") if args.sessions else None
        rows = run_stored(args.db, names, args.budget, args.clear)
    else:
        sizes = [int(t) for t in args.turns.split(",")]
        rows = run(args.workloads.split(","), sizes, args.budget, args.clear, args.summary_words)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        print(f"`{' '.join(['python', 'bench/cost.py', *sys.argv[1:]])}`")
        print(f"{date.today()}, commit {commit or 'unknown'}, {platform.machine()}, Python {platform.python_version()}")
        print("cost: millions of token-prices; breaks: turns whose prompt does not begin with the previous one")
        print()
        print(table(rows))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
