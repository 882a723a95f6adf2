"""Every statement on one session names its id, so a distributed database routes it to one shard.

Citus runs a statement on one node ("router-executable") when every
distributed table in it is filtered on the distribution column by an
equality, or joined to such a table on it. The store's statements for one
session are recorded as they reach the driver and checked against that
rule; on hash-partitioned PostgreSQL each is also planned again with its
parameters, and must reach at most one partition of each table.
"""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from prunestore import Message, Policy, PruneStore
from prunestore.sql import db

PER_SESSION = (
    "prunestore_sessions",
    "prunestore_messages",
    "prunestore_hash_holders",
    "prunestore_keys",
    "prunestore_refs",
    "prunestore_calls",
)
_TABLE = re.compile(
    r"\b(FROM|JOIN|INTO|UPDATE)\s+(" + "|".join(PER_SESSION) + r")\b(?:\s+(?:AS\s+)?(?!(?:WHERE|ON|SET|LEFT|JOIN|"
    r"ORDER|GROUP|LIMIT|FOR|USING|VALUES|SELECT|RETURNING)\b)(\w+))?",
    re.IGNORECASE,
)
_PARAM = r"(?:\?|%s|%\(\w+\)s|:\w+|\$\d+)"
_FILTER = re.compile(r"(?:\b(\w+)\.)?\bsession_id\s*=\s*" + _PARAM)
_JOIN = re.compile(r"\b(\w+)\.session_id\s*=\s*(\w+)\.session_id\b")
_INSERT_VALUES = re.compile(r"^\s*INSERT INTO (\w+)\s*\(([^)]*)\)\s*VALUES", re.IGNORECASE)


def unrouted(sql: str) -> str | None:
    """Why `sql` would not run on one shard, or None when it would (or touches no per-session table)."""
    sql = " ".join(sql.split())
    insert = _INSERT_VALUES.match(sql)
    if insert:
        columns = [c.strip() for c in insert.group(2).split(",")]
        return None if "session_id" in columns or insert.group(1) not in PER_SESSION else "an insert without session_id"
    references = [(m.group(3) or m.group(2)) for m in _TABLE.finditer(sql)]
    if not references:
        return None
    filtered = set()
    for match in _FILTER.finditer(sql):
        filtered.update([match.group(1)] if match.group(1) else references)  # unqualified: every table it can mean
    links = [(a, b) for a, b in _JOIN.findall(sql)]
    changed = True
    while changed:  # an alias joined on session_id to a filtered one is filtered too
        changed = False
        for a, b in links:
            if (a in filtered) != (b in filtered):
                filtered.update((a, b))
                changed = True
    missing = [alias for alias in references if alias not in filtered]
    return f"no equality on session_id for {', '.join(missing)}" if missing else None


def test_the_rule_catches_what_a_router_could_not_route():
    assert unrouted("SELECT session_id FROM prunestore_sessions WHERE name = :name") is not None
    assert unrouted("SELECT * FROM prunestore_messages WHERE session_id IN (1, 2)") is not None
    assert (
        unrouted(
            "SELECT s.x FROM prunestore_sessions s LEFT JOIN prunestore_messages m "
            "ON m.session_id = s.session_id WHERE s.name = ?"
        )
        is not None
    )
    assert unrouted("INSERT INTO prunestore_sessions (name, last_seq) VALUES (?, ?)") is not None
    assert unrouted("DELETE FROM prunestore_keys") is not None
    assert (
        unrouted(
            "SELECT k.key FROM prunestore_keys k JOIN prunestore_messages m "
            "ON m.session_id = k.session_id AND m.seq = k.definer_seq WHERE k.session_id = %(sid)s"
        )
        is None
    )
    assert unrouted("UPDATE prunestore_sessions SET last_seq = ? WHERE session_id = ?") is None
    assert unrouted("SELECT value FROM prunestore_settings WHERE name = ?") is None


class CoreRecorder:
    """The statements that go through SQLAlchemy (the driver's own are the `recorded` fixture's)."""

    def __init__(self) -> None:
        self.seen: dict[str, object] = {}

    def _on_cursor(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.seen.setdefault(statement, parameters[0] if executemany and parameters else parameters)

    def __enter__(self) -> CoreRecorder:
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", self._on_cursor)
        return self

    def __exit__(self, *exc) -> None:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", self._on_cursor)


def session_statements(store_url: str, policy: Policy, recorded: dict[str, tuple]) -> dict[str, object]:
    """Every statement one session's calls send, rendered for the backend's driver, with its parameters."""
    with PruneStore(store_url, policy=policy) as store:
        store.append("other", Message("o", "user", "another session's message", 0))
        recorded.clear()
        with CoreRecorder() as core:
            one_session_of_everything(store)
        pyformat = store.engine.dialect.paramstyle == "pyformat"
        seen = dict(core.seen) | dict(statement.render(pyformat, params) for statement, params in recorded.values())
        assert store.verify().ok
    return seen


def one_session_of_everything(store: PruneStore) -> None:
    """Every call on one session: appends of each kind of message, reads, audits and the lifecycle."""
    store.append("s", Message("sys", "system", "You are terse.", 0, defines=("style",)))
    for turn in range(1, 13):
        store.append(
            "s",
            [
                Message(f"u{turn}", "user", f"question {turn} about REF:plan", turn),
                Message(f"r{turn}", "tool_output", f"result {turn}", turn, tool_key=f"search:{turn % 3}"),
                Message(f"d{turn}", "retrieved_doc", f"passage {turn % 4}", turn, expires_after_turn=turn + 3),
                Message(f"p{turn}", "assistant", f"plan v{turn}", turn, defines=("plan",), refs=("style",)),
            ],
        )
    store.append_many({"s": [Message("late", "user", "and the plan?", 13, refs=("plan",))]})
    store.append_with("s", lambda state: Message("built", "assistant", f"turn {state.current_turn}", 13))
    store.live("s")
    store.messages("s")
    store.messages("s", ["u3", "p5"])
    store.render("s")
    store.explain("s", "p1")
    store.explain("s", "r1")
    store.stats("s")
    store.verify("s")
    store.truncate("s", "p11")
    store.pop("s")
    store.fork("s", "p6", "s-branch")
    store.rebuild("s")
    store.delete_session("s-branch")


@pytest.fixture(params=["default", "budget"])
def policy(request) -> Policy:
    return Policy() if request.param == "default" else Policy(budget=60, clear_at_least=20)


@pytest.fixture
def statements(store_url, policy, recorded) -> dict[str, object]:
    return session_statements(store_url, policy, recorded)


def test_every_statement_on_a_session_filters_on_its_id(statements):
    touching = [sql for sql in statements if any(table in sql for table in PER_SESSION)]
    assert len(touching) > 30  # the recorder saw the store's work
    problems = {sql: why for sql in touching if (why := unrouted(sql))}
    assert problems == {}


_PARTITION = re.compile(r"\b(prunestore_\w+?)_p(\d+)\b")


def test_on_partitioned_tables_each_statement_reaches_one_partition(statements, store_url, backend):
    if backend != "partitioned":
        pytest.skip("plans name partitions only on the partitioned layout (this test runs there too)")
    engine = db.make_engine(store_url)
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            spread = {}
            for sql, parameters in statements.items():
                if not any(table in sql for table in PER_SESSION) or not sql.lstrip().upper().startswith(
                    ("SELECT", "UPDATE", "DELETE", "INSERT")
                ):
                    continue
                with raw.cursor() as cursor:
                    cursor.execute("EXPLAIN " + sql, parameters)
                    plan = "\n".join(row[0] for row in cursor.fetchall())
                reached: dict[str, set[str]] = {}
                for table, number in _PARTITION.findall(plan):
                    reached.setdefault(table, set()).add(number)
                if any(len(numbers) > 1 for numbers in reached.values()):
                    spread[sql] = plan
            raw.rollback()
    finally:
        engine.dispose()
    assert spread == {}
