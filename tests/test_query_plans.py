"""No statement on the append path scans a session: each is answered through an index.

The statements an append actually runs are recorded, then explained: on
SQLite every plan step must be a SEARCH (or a sort of what the searches
found); on PostgreSQL, with sequential scans disabled, no plan may contain a
Seq Scan (so an index can serve it).
"""

from __future__ import annotations

import psycopg
import pytest
from conftest import BACKENDS
from test_scenarios import SCENARIOS

from prunestore import Message as M
from prunestore import Policy
from prunestore.sql import db, rows
from prunestore.sql.sessionids import session_id


def test_append_statements_use_indexes(store, recorded):
    store.append("other", [M(f"o{i}", "tool_output", f"x{i}", 0, tool_key=f"t{i % 3}") for i in range(50)])
    for number, messages in enumerate(SCENARIOS.values()):
        for m in messages:
            store.append(f"scenario-{number}", m)
    store.append("s", [M("e1", "user", "a", 0, expires_after_turn=0), M("e2", "user", "b", 3)])
    assert_plans_use_indexes(store, recorded, at_least=8)  # lookups by seq, id, tool key, expiry, key, hash; updates


def test_truncate_statements_use_indexes(store, recorded):
    """Taking back appends from the undo journal reads only the journal and rows of what is cut."""
    for turn in range(40):
        store.append(
            "s",
            [
                M(f"u{turn}", "user", f"q {turn} DEFINE:k{turn % 4} REF:k{(turn + 1) % 4}", turn),
                M(
                    f"t{turn}",
                    "tool_output",
                    f"r {turn % 5}",
                    turn,
                    tool_key=f"tool{turn % 2}",
                    expires_after_turn=turn + 3,
                ),
                M(f"d{turn}", "retrieved_doc", f"passage {turn % 6}", turn),
            ],
        )
    recorded.clear()
    store.truncate("s", "t30")
    assert_plans_use_indexes(store, recorded, at_least=6)


def test_a_cached_live_read_uses_indexes(store, recorded):
    """After the store's own append, `live()` reads the session row and the rows the append wrote."""
    for turn in range(20):
        store.append(
            "s", [M(f"u{turn}", "user", f"q {turn}", turn), M(f"t{turn}", "tool_output", "r", turn, tool_key="x")]
        )
    store.live("s")
    store.append("s", M("t20", "tool_output", "r2", 20, tool_key="x"))
    recorded.clear()
    store.live("s")
    assert_plans_use_indexes(store, recorded, at_least=2)


# The lines of SQLite's plan that only say how the parts of a compound select are put together.
_COMPOUND = {"MERGE (UNION ALL)", "LEFT", "RIGHT", "COMPOUND QUERY", "LEFT-MOST SUBQUERY", "UNION ALL"}


def assert_plans_use_indexes(store, recorded, at_least: int) -> None:
    statements = [
        (s, p) for text, (s, p) in recorded.items() if not text.startswith(("INSERT", "UPDATE prunestore_sessions"))
    ]
    assert len(statements) >= at_least, [s.text for s, _ in statements]
    for statement, params in statements:
        plan = plan_of(store, statement, params)
        if store.engine.dialect.name == "postgresql":
            assert not any("Seq Scan" in line for line in plan), (statement.text, plan)
        else:
            # Sorting or merging what the searches found costs what the statement returns.
            steps = [line for line in plan if line not in _COMPOUND]
            assert all(line.startswith(("SEARCH", "USE TEMP B-TREE")) for line in steps), (statement.text, plan)


def plan_of(store, statement, params) -> list[str]:
    """The lines of the statement's plan; on PostgreSQL with sequential scans disabled."""
    with db.transaction(store.engine, "explain") as driver:
        postgres = driver.postgres
        if postgres:
            driver.raw.execute("SET LOCAL enable_seqscan = off")
        sql, params = statement.render(driver.pyformat, params)
        cursor = driver.raw.cursor()
        cursor.execute(("EXPLAIN " if postgres else "EXPLAIN QUERY PLAN ") + sql, params)
        return [str(row[-1] if not postgres else row[0]) for row in cursor.fetchall()]


def test_events_under_a_budget_use_indexes(open_store, recorded):
    """An event reads the pending messages and walks the prompt through indexes, never the evicted history."""
    store = open_store(Policy(budget=60, clear_at_least=20))
    recorded.clear()  # what opening the store ran
    for turn in range(60):
        store.append(
            "s",
            [
                M(f"u{turn}", "user", f"question {turn} DEFINE:k{turn % 4} REF:k{(turn + 1) % 4}", turn),
                M(f"t{turn}", "tool_output", f"result {turn % 5} of the query", turn, tool_key=f"tool{turn % 3}"),
            ],
        )
    held = [text for text in recorded if "held = 1" in text]
    from_cursor = [text for text in recorded if "seq > :after" in text and "held" not in text]
    assert held and from_cursor and any("verdict = 'pending'" in text for text in recorded)
    assert_plans_use_indexes(store, recorded, at_least=8)
    assert store.stats("s").events > 3 and any(m.verdict == "evicted" for m in store.messages("s"))
    if store.engine.dialect.name == "sqlite":
        # Below the cursor the walk reads the held messages' index; from it on, the primary key.
        for text, index in ((held[0], "prunestore_messages_held"), (from_cursor[0], "sqlite_autoindex")):
            with db.transaction(store.engine, "explain") as driver:
                statement, params = recorded[text]
                sql, params = statement.render(driver.pyformat, params)
                plan = " ".join(str(row[-1]) for row in driver.raw.execute("EXPLAIN QUERY PLAN " + sql, params))
            assert index in plan, plan


def test_appends_under_a_cache_ttl_read_the_last_time_by_index(open_store, recorded):
    """The gap before an append is measured from the session's last message, read by the primary key."""
    store = open_store(Policy(budget=60, clear_at_least=20, cache_ttl=300))
    recorded.clear()
    for turn in range(30):
        store.append("s", M(f"t{turn}", "tool_output", f"result {turn}", turn, tool_key=f"tool{turn % 3}"))
    assert any("said_at FROM prunestore_messages" in text for text in recorded)
    assert_plans_use_indexes(store, recorded, at_least=4)
    assert all(m.at is not None for m in store.messages("s"))


def test_pages_of_session_names_read_the_name_index(store, recorded):
    """A page of names, after a name or under a prefix, reads the index in code point order: never every name."""
    for i in range(30):
        store.append(f"user-{i}", M("m", "user", "x", 0))
    recorded.clear()
    store.sessions(limit=5)
    store.sessions(after="user-1", limit=5)
    store.sessions("user-2", limit=5)
    store.summaries("user-2", limit=5)
    store.session_count("user-2")
    assert_plans_use_indexes(store, recorded, at_least=4)  # a page after a name is the first page's statement


def test_explaining_a_restored_message_reads_the_index_of_who_refers_to_its_keys(store, recorded):
    """Who needs a restored message is read from the rows of its keys, never from the session's references."""
    for turn in range(30):
        store.append(
            "s",
            [
                M(f"f{turn}", "user", f"fact {turn} DEFINE:k{turn}", turn, expires_after_turn=turn),
                M(f"r{turn}", "user", f"as said REF:k{turn - 5}" if turn % 5 == 0 else "ok", turn),
            ],
        )
    recorded.clear()
    explanation = store.explain("s", "f20")
    assert explanation.verdict == "restored" and explanation.needed_by == ("r25",)
    referrers = [s for text, (s, _) in recorded.items() if "prunestore_refs" in text]
    assert referrers
    assert_plans_use_indexes(store, recorded, at_least=3)
    if store.engine.dialect.name == "sqlite":  # the index is read first, not the session's messages
        assert plan_of(store, *recorded[referrers[0].text])[0].startswith("SEARCH r USING PRIMARY KEY")


def test_prompt_reads_under_a_budget_read_the_held_index_and_the_rows_from_the_cursor(open_store, recorded):
    """A cold `live()`, `render` and a fresh view read the prompt, the calls it names and the session's
    last messages through indexes: below the cursor only the held messages, never the evicted history."""
    store = open_store(Policy(budget=300, clear_at_least=60))
    for turn in range(60):
        made = {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{turn}", "type": "function",
                "function": {"name": f"tool{turn % 3}", "arguments": "{}"}}]}  # fmt: skip
        answer = {"role": "tool", "tool_call_id": f"c{turn}", "content": f"result {turn % 5}"}
        store.append(
            "s",
            [
                M(f"u{turn}", "user", f"question {turn} DEFINE:k{turn % 4} REF:k{(turn + 1) % 4}", turn),
                M(f"a{turn}", "assistant", f"tool{turn % 3}()", turn, metadata={"openai": made}),
                M(f"t{turn}", "tool_output", f"result {turn % 5}", turn, tool_key=f"tool{turn % 3}",
                  metadata={"openai": answer}),
            ],
        )  # fmt: skip
    from prunestore.integrations.openai_chat import OPENAI_CHAT

    cold = open_store(Policy(budget=300, clear_at_least=60), live_cache_bytes=0)
    assert any(m.verdict == "evicted" for m in store.messages("s"))
    recorded.clear()
    cold.live("s")
    cold.render("s")
    cold.view("s", OPENAI_CHAT)
    live = [s for text, (s, _) in recorded.items() if "held = 1" in text]
    assert live and any("prunestore_calls" in text for text in recorded)
    assert_plans_use_indexes(store, recorded, at_least=4)  # the session row, the prompt, the last ones, the calls
    if store.engine.dialect.name == "sqlite":
        plan = " ".join(plan_of(store, *recorded[live[0].text]))
        assert "prunestore_messages_held" in plan, plan


def test_the_history_is_read_from_its_index_alone(open_store, recorded):
    """A chart reads one row per append, every column from the partial index of those rows: never the table."""
    store = open_store(Policy(budget=60, clear_at_least=20, prices="anthropic-5m"))
    for turn in range(30):
        store.append("s", M(f"t{turn}", "tool_output", f"result {turn} of the query", turn, tool_key=f"tool{turn % 3}"))
    recorded.clear()
    history = store.history("s")
    assert len(history) == 30 and all(p.cost is not None for p in history)
    [(statement, params)] = [(s, p) for text, (s, p) in recorded.items() if "live_tokens_after IS NOT NULL" in text]
    plan = " ".join(plan_of(store, statement, params))
    if store.engine.dialect.name == "postgresql":
        assert plan.startswith("Index Only Scan using prunestore_messages_"), plan  # a partition's has its own name
    else:
        assert "USING COVERING INDEX prunestore_messages_appends" in plan, plan


@pytest.mark.parametrize("backend", BACKENDS[1:], indirect=True)
def test_lookups_by_id_and_seq_probe_the_index_in_a_generic_plan_on_old_statistics(store):
    """psycopg prepares a statement it runs often, and PostgreSQL may then plan it once for any values.

    A store's tables are analyzed when they are made, empty, so until the
    next ANALYZE a session looks small; a generic plan of ``IN`` a list of
    500 values then read the whole session and compared each row with every
    value. The lookups of an append's ids and of seqs probe the index once
    per value, whatever the statistics say.
    """
    store.append("s", [M(f"m{i}", "user", f"message {i}", 0) for i in range(2000)])
    sid = session_id("s")
    lookups = [
        (rows.LOCK_SESSION_PROBING_IDS_PG, {"sid": sid, "ids": [f"m{i}" for i in range(0, 2000, 4)]}, "text[]"),
        (rows.MESSAGES_PROBING_SEQS_PG, {"sid": sid, "seqs": list(range(1, 2001, 4))}, "bigint[]"),
    ]
    for statement, params, list_type in lookups:
        with db.transaction(store.engine, "explain") as driver:
            sql, _ = statement.render(driver.pyformat, params)
            names = ["sid", next(name for name in params if name != "sid")]
            for number, name in enumerate(names, 1):
                sql = sql.replace(f"%({name})s", f"${number}")
            driver.execute_plain("SET LOCAL plan_cache_mode = force_generic_plan")
            cursor = psycopg.ClientCursor(driver.raw)  # EXECUTE's arguments as literals: PREPARE gave their types
            cursor.execute(f"PREPARE lookup (bigint, {list_type}) AS {sql}")
            cursor.execute("EXPLAIN ANALYZE EXECUTE lookup(%s, %s)", [sid, params[names[1]]])
            plan = [row[0] for row in cursor.fetchall()]
            cursor.execute("DEALLOCATE lookup")
        assert not any("Rows Removed by Filter" in line for line in plan), plan
        assert any("Index" in line and "prunestore_messages" in line for line in plan), plan
        assert any(" rows=500 loops=1" in line for line in plan[:1]), plan  # every value found
