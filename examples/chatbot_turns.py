"""A chatbot's turn loop on the embedded SQLite default.

Each turn appends what happened (user message, tool calls, retrieved
passages, the answer) and asks the store what goes into the next prompt.
Run it twice: the history is on disk, and the second run carries on.

    python examples/chatbot_turns.py            # uses ./prunestore.db
    PRUNESTORE_URL=postgresql+psycopg://user@host/db python examples/chatbot_turns.py
"""

from __future__ import annotations

from prunestore import Message, PruneStore

SESSION = "demo-user-42"


def conversation(start_turn: int) -> list[list[Message]]:
    """Ten turns of an agent session: a preference early on, stale tool output, repeated passages."""
    t = start_turn
    turns = [
        [
            # Small talk goes stale after two turns, unless something still needs it.
            Message(
                f"u{t}",
                "user",
                "Hi! My preferred export format is CSV. DEFINE:export_format",
                t,
                expires_after_turn=t + 2,
            ),
            Message(f"a{t}", "assistant", "Noted, CSV it is.", t, expires_after_turn=t + 2),
        ]
    ]
    for i in range(1, 9):
        turn = t + i
        turns.append(
            [
                Message(f"u{turn}", "user", f"How many orders were there in week {i}?", turn),
                Message(
                    f"q{turn}",
                    "tool_output",
                    f"sql_query: orders table has {1000 + 37 * i} rows",
                    turn,
                    tool_key="sql_query:orders",
                ),
                Message(f"d{turn}a", "retrieved_doc", "Orders are counted once they are paid.", turn),
                Message(
                    f"d{turn}b", "retrieved_doc", f"Week {i} had a holiday sale.", turn, expires_after_turn=turn + 2
                ),
                Message(f"a{turn}", "assistant", f"Week {i}: {1000 + 37 * i} orders.", turn),
            ]
        )
    last = t + 9
    turns.append([Message(f"u{last}", "user", "Export the results. REF:export_format", last)])
    return turns


def main() -> None:
    with PruneStore() as store:  # PRUNESTORE_URL, else sqlite:///prunestore.db
        start = 0 if SESSION not in store.sessions() else store.messages(SESSION)[-1].turn + 1
        for messages in conversation(start):
            delta = store.append(SESSION, messages)
            prompt = store.live(SESSION)  # what goes to the model this turn
            print(
                f"turn {messages[0].turn:>3}: +{len(delta.live_added)} -{len(delta.live_removed)} "
                f"-> prompt of {len(prompt)} messages, {sum(m.tokens for m in prompt)} tokens"
            )
        stats = store.stats(SESSION)
        print(
            f"\n{stats.messages} messages stored, {stats.live_messages} live; "
            f"tokens {stats.tokens} -> {stats.live_tokens} ({stats.reduction:.0%} pruned)"
        )
        why = store.explain(SESSION, f"u{start}")
        print(f"u{start}: {why.verdict} ({why.reason})")
        print(f"verify: {'ok' if store.verify(SESSION).ok else 'MISMATCH'}")
        print(f"store: {store.url}")


if __name__ == "__main__":
    main()
