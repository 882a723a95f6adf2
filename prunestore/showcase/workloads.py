"""Synthetic sessions for three workloads, with the facts a later turn depends on labeled.

The parameters are fixed in advance (they are the workloads the published
figures were measured on); the generator is seeded, deterministic and
linear in the number of turns. Ground truth comes from what the generator
created, never from running the pruner: when a user message refers to a key,
the message that last defined it is recorded as required.

Every workload has a system message at turn 0 and, each turn, a user and an
assistant message; a user preference that defines a key (probability 0.08
by default); a user message referring to an open key, any of those defined
so far, so often one from hundreds of turns before (0.3); tool calls at the
workload's rate, repeating an earlier call (same tool and arguments, so the
same tool key) at its repeat rate, and some tool outputs defining a key
(15%); and retrieved passages, each a copy of one of the 8 most recent new
passages at the overlap rate. The facts workload is the tool agent with
three times the definitions and twice the references.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby

from ..model import Message

__all__ = ["Workload", "WORKLOADS", "GeneratedSession", "generate"]

_WORDS = (
    "data order customer report week region total revenue table query result value file page "
    "model note index entry account invoice status record field metric chart summary detail"
).split()


@dataclass(frozen=True)
class Workload:
    """The parameters of one workload."""

    name: str
    passages_per_turn: int
    overlap_rate: float
    overlap_window: int
    tool_call_rate: float
    tool_repeat_rate: float
    tools: tuple[str, ...]
    preference_rate: float = 0.08
    reference_rate: float = 0.3
    tool_define_rate: float = 0.15


_AGENT_TOOLS = ("search", "sql_query", "calculator", "filesystem", "web_fetch")
WORKLOADS = {
    "chat": Workload("chat", 0, 0.0, 8, 0.05, 0.3, ("search",)),
    "rag": Workload("rag", 3, 0.45, 8, 0.10, 0.4, ("search", "sql_query")),
    "agent": Workload("agent", 2, 0.35, 8, 0.65, 0.7, _AGENT_TOOLS),
    "facts": Workload("facts", 2, 0.35, 8, 0.65, 0.7, _AGENT_TOOLS, 0.24, 0.6, 0.45),
}


@dataclass(frozen=True)
class GeneratedSession:
    """A generated conversation and the ids of the messages later turns depend on."""

    workload: Workload
    turns: int
    seed: int
    messages: tuple[Message, ...]
    required: frozenset[str]

    def by_turn(self) -> Iterator[list[Message]]:
        """The messages grouped by turn, as a chatbot appends them."""
        for _, group in groupby(self.messages, key=lambda m: m.turn):
            yield list(group)


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def generate(workload: str | Workload, turns: int, seed: int = 0) -> GeneratedSession:
    """A session of `turns` turns of the workload (a name from `WORKLOADS` or a `Workload`)."""
    spec = WORKLOADS[workload] if isinstance(workload, str) else workload
    rng = random.Random(f"{spec.name}:{turns}:{seed}")
    messages: list[Message] = [Message("sys", "system", "You are a helpful assistant. " + _text(rng, 40), 0)]
    definer: dict[str, str] = {}  # open key -> id of the message that defined it last
    open_keys: list[str] = []
    required: set[str] = set()
    calls: list[str] = []  # tool keys called so far
    recent_passages: list[int] = []  # the newest new passages, at most overlap_window
    passages = 0

    for turn in range(1, turns + 1):
        parts = [f"Question {turn}: " + _text(rng, 12)]
        if rng.random() < spec.preference_rate:
            key = f"pref{turn}"
            parts.append(f"Please remember this preference: {_text(rng, 6)} DEFINE:{key}")
            definer[key] = f"u{turn}"
            open_keys.append(key)
        if open_keys and rng.random() < spec.reference_rate:
            key = rng.choice(open_keys)
            parts.append(f"As agreed before, REF:{key}")
            required.add(definer[key])
        messages.append(Message(f"u{turn}", "user", " ".join(parts), turn))

        if rng.random() < spec.tool_call_rate:
            if calls and rng.random() < spec.tool_repeat_rate:
                tool_key = rng.choice(calls)
            else:
                tool_key = f"{rng.choice(spec.tools)}:{len(calls)}"
                calls.append(tool_key)
            content = f"{tool_key} returned: " + _text(rng, 100)
            if rng.random() < spec.tool_define_rate:
                key = f"fact{turn}"
                content += f" DEFINE:{key}"
                definer[key] = f"t{turn}"
                open_keys.append(key)
            messages.append(Message(f"t{turn}", "tool_output", content, turn, tool_key=tool_key))

        for slot in range(spec.passages_per_turn):
            if recent_passages and rng.random() < spec.overlap_rate:
                number = rng.choice(recent_passages)
            else:
                number = passages = passages + 1
                recent_passages = (recent_passages + [number])[-spec.overlap_window :]
            text = f"Passage {number}. " + _text(random.Random(f"{spec.name}:{seed}:passage:{number}"), 45)
            if rng.random() < 0.5:  # retrievers differ in case and whitespace; normalization sees through it
                text = text.upper().replace(" ", "  ")
            messages.append(Message(f"d{turn}.{slot}", "retrieved_doc", text, turn))

        messages.append(Message(f"a{turn}", "assistant", "Answer: " + _text(rng, 40), turn))
    return GeneratedSession(spec, turns, seed, tuple(messages), frozenset(required))
