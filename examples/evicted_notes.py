"""A running note of what the budget evicted, sent in the system prompt.

Under a budget the store evicts the oldest messages the prompt cannot hold;
the append that evicted them names them (`Delta.evicted`). This loop folds
them into a short note, with a stand-in for the model call a real summary
costs, and sends the note in the system prompt. The note changes only on an
append that evicted something: that append's event already rewrote the
provider's prompt cache from the first evicted message on, the oldest one,
right after the system prompt, so a new note costs its own tokens, not a
cold cache. The evicted messages stay stored: `recall` gives any of them back
word for word.

    python examples/evicted_notes.py
"""

from __future__ import annotations

from collections.abc import Sequence

from prunestore import Message, Policy, PruneStore, StoredMessage

SESSION = "notes-demo"
INSTRUCTIONS = "You are a trip planner."
NOTE_ENTRIES = 8  # the note's size stays bounded, however long the session


def updated_note(note: list[str], evicted: Sequence[StoredMessage]) -> list[str]:
    """A stand-in summarizer: the first words of each evicted message, the latest entries kept.

    In real use, a model call: "update this summary with these messages"."""
    entries = [f"turn {m.turn} ({m.role}): {' '.join(m.content.split()[:6])}" for m in evicted]
    return (note + entries)[-NOTE_ENTRIES:]


def system_prompt(note: list[str]) -> str:
    if not note:
        return INSTRUCTIONS
    return INSTRUCTIONS + "\nEarlier in this conversation, no longer shown:\n" + "\n".join(f"- {e}" for e in note)


def main() -> None:
    policy = Policy(budget=150, clear_at_least=50)
    with PruneStore("sqlite://", policy=policy) as store:
        note: list[str] = []
        systems = set()
        for turn in range(1, 31):
            delta = store.append(
                SESSION,
                [
                    Message(f"u{turn}", "user", f"Day {turn}: which museum opens early near stop {turn}?", turn),
                    Message(f"a{turn}", "assistant", f"On day {turn}, the museum by stop {turn} opens at 8.", turn),
                ],
            )
            if delta.evicted:
                note = updated_note(note, store.messages(SESSION, ids=delta.evicted))
            system = system_prompt(note)
            systems.add(system)
            prompt = [{"role": "system", "content": system}] + [
                {"role": m.role, "content": m.content} for m in store.live(SESSION)
            ]  # what goes to the model this turn
        stats = store.stats(SESSION)
        evicted = [m for m in store.messages(SESSION) if m.verdict == "evicted"]
        print(f"{len(prompt) - 1} of 60 messages in the prompt, {stats.live_tokens} tokens of a budget of 150")
        print(f"{len(evicted)} evicted; the system prompt changed {len(systems) - 1} times, at {stats.events} events")
        print(system)
        for message in store.recall(SESSION, first="u1", last="a1"):  # the first turn, word for word
            print(f"recalled: {message.content}")


if __name__ == "__main__":
    main()
