"""The demo: the three workloads appended turn by turn, as a chatbot would, with what pruning did.

`run_demo` fills a store and yields one `DemoRow` per workload and size;
the ``prunestore demo`` command prints them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import SessionExistsError
from ..model import effective_defines, effective_refs
from ..policy import EvictOrder, Policy
from ..prune import prune
from ..sql import db
from ..store import PruneStore
from .costs import prompt_costs
from .workloads import generate

DEFAULT_SIZES = (50, 200, 500, 1000, 2000)


@dataclass(frozen=True)
class DemoRow:
    workload: str
    turns: int
    session: str
    messages: int
    tokens_before: int
    tokens_after: int
    superseded: int
    duplicates: int
    expired: int
    restored: int
    required: int
    required_kept: int
    incremental_equals_batch: bool
    idempotent: bool

    @property
    def reduction(self) -> float:
        return 1 - self.tokens_after / self.tokens_before if self.tokens_before else 0.0


def run_demo(
    store: PruneStore,
    sizes: tuple[int, ...] = DEFAULT_SIZES,
    workloads: tuple[str, ...] = ("chat", "rag", "agent"),
    seed: int = 0,
    *,
    replace: bool = False,
) -> Iterator[DemoRow]:
    """Append each workload at each size turn by turn and measure it, one row at a time.

    The sessions are named ``<workload>-<turns>``. Where the store holds one
    already, it raises `SessionExistsError` before writing anything, unless
    `replace` is true (then that session is deleted first).
    """
    names = [f"{name}-{turns}" for name in workloads for turns in sizes]
    existing = sorted(set(names) & set(store.sessions()))
    if existing and not replace:
        raise SessionExistsError(
            f"session={existing[0]!r}: the store at {db.shown_url(store.url)} already holds it"
            f"{f' and {len(existing) - 1} more of the demo' if len(existing) > 1 else ''}; "
            "replace them with prunestore demo --replace, or choose another store with --db"
        )
    return _rows(store, sizes, workloads, seed, existing)


def _rows(
    store: PruneStore, sizes: tuple[int, ...], workloads: tuple[str, ...], seed: int, existing: list[str]
) -> Iterator[DemoRow]:
    for name in workloads:
        for turns in sizes:
            generated = generate(name, turns, seed)
            session = f"{name}-{turns}"
            if session in existing:
                store.delete_session(session)
            for messages in generated.by_turn():
                store.append(session, messages)
            stored = store.messages(session)
            # Under a budget `prune` folds in quadratic time: there the demo leaves the check to `verify`.
            plain = (
                store.policy if not store.policy.gathers else Policy(store.policy.dedupe_roles, store.policy.restore)
            )
            batch = prune(generated.messages, policy=plain)
            live = {m.id for m in stored if m.live}
            again = prune(batch.live, policy=plain, current_turn=batch.current_turn)
            stats = store.stats(session)
            yield DemoRow(
                workload=name,
                turns=turns,
                session=session,
                messages=stats.messages,
                tokens_before=stats.tokens,
                tokens_after=stats.live_tokens,
                superseded=stats.by_verdict["superseded"].messages,
                duplicates=stats.by_verdict["duplicate"].messages,
                expired=stats.by_verdict["expired"].messages,
                restored=stats.by_verdict["restored"].messages,
                required=len(generated.required),
                required_kept=len(generated.required & live),
                incremental_equals_batch=(store.policy.gathers or {m.id: m.verdict for m in stored} == batch.verdicts)
                and store.verify(session).ok,
                idempotent=[m.id for m in again.live] == [m.id for m in batch.live],
            )


@dataclass(frozen=True)
class BudgetRow:
    """A workload played under a budget beside sending everything, priced with a prompt cache (`costs`)."""

    workload: str
    turns: int
    budget: int | None  # None: the rules alone
    clear_at_least: int
    peak: int
    mean: float
    events: int
    facts: int  # (turn, message a user message of that turn refers to) pairs
    facts_kept: int  # of which the message was in that turn's prompt
    cost: float
    cost_everything: float
    over_budget_turns: int = 0  # turns whose prompt was over the budget (what may not be evicted exceeded it)
    evict: str = "oldest"
    comebacks: int = 0  # steps that brought an evicted message back (`Stats.comebacks`)


def budget_run(
    turns: int,
    budget: int | None = 32000,
    clear_at_least: int = 16000,
    workload: str = "agent",
    evict: EvictOrder = "oldest",
) -> BudgetRow:
    """Play the workload turn by turn on a store in memory with a budget (None: the rules alone, removals at
    once); price its prompts and sending everything."""
    generated = generate(workload, turns)
    prompts, everything, history = [], [], []
    definer: dict[str, str] = {}
    facts = kept = 0
    policy = Policy(budget=budget, clear_at_least=clear_at_least, evict=evict) if budget is not None else Policy()
    with PruneStore("sqlite://", policy=policy) as store:
        for messages in generated.by_turn():
            store.append("budget", messages)
            prompt = [(m.id, m.tokens) for m in store.live("budget")]
            history += [(m.id, m.tokens) for m in store.messages("budget", ids=[m.id for m in messages])]
            prompts.append(prompt)
            everything.append(list(history))
            shown = {i for i, _ in prompt}
            for m in messages:
                needed = {definer[k] for k in effective_refs(m) if k in definer} if m.role == "user" else set()
                facts += len(needed)
                kept += len(needed & shown)
                definer.update((key, m.id) for key in effective_defines(m))
        stats = store.stats("budget")
    ours, theirs = prompt_costs(prompts), prompt_costs(everything)
    over = 0 if budget is None else sum(sum(tokens for _, tokens in prompt) > budget for prompt in prompts)
    return BudgetRow(
        workload,
        turns,
        budget,
        clear_at_least,
        ours.peak,
        ours.mean,
        stats.events,
        facts,
        kept,
        ours.cost,
        theirs.cost,
        over,
        evict,
        stats.comebacks or 0,
    )
