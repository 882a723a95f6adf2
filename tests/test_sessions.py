"""The sessions as a catalog: pages by name, prefixes, idle sessions, and their removal (`gc`)."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from prunestore import GcReport, InvalidArgumentError, Message, Policy, SessionNotFoundError, catalog
from prunestore.cli import main

BOTH_APIS = True

# Names a prefix must not confuse: LIKE's wildcards, case, URL characters, non-ASCII, a prefix of another.
NAMES = ["a", "A", "a%", "a_", "ab", "a/b", "a?#", "abc", "b", "é", "éa", "user-1", "user-10", "user-2", "z%"]
DAY = 86400


def _fill(store, names=NAMES) -> None:
    for i, name in enumerate(names):
        store.append(name, [Message(f"{i}a", "user", f"hello {i}", 0), Message(f"{i}b", "assistant", "hi", 0)])


def _age(store, names, seconds) -> None:
    """Move the sessions' last write (and creation) back in time: what a quiet month does."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE prunestore_sessions SET updated_at = updated_at - :s, created_at = created_at - :s "
                "WHERE name IN :names"
            ).bindparams(sa.bindparam("names", expanding=True)),
            {"s": seconds, "names": list(names)},
        )


def _times(store, name) -> tuple[int, int]:
    with store.engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT created_at, updated_at FROM prunestore_sessions WHERE name = :n"), {"n": name}
        ).one()
    return row[0], row[1]


def _pages(store, limit, **filters) -> list[str]:
    got, after = [], None
    while True:
        page = store.sessions(limit=limit, after=after, **filters)
        assert len(page) <= limit
        got += page
        if len(page) < limit:
            return got
        after = page[-1]


@pytest.mark.parametrize("prefix", [None, "", "a", "a%", "a_", "A", "é", "user-1", "a?#", "nothing"])
def test_pages_by_name_equal_the_whole_list_and_the_prefix_is_literal(open_store, prefix):
    store = open_store()
    _fill(store)
    everything = store.sessions(prefix)
    assert set(everything) == {n for n in NAMES if n.startswith(prefix or "")}
    assert everything == sorted(everything)  # code point order, on both backends
    for limit in (1, 2, 3, 100):
        assert _pages(store, limit, prefix=prefix) == everything
    assert store.sessions() == store.sessions(limit=len(NAMES)) == _pages(store, 4)


# Names a linguistic collation sorts apart from code point order: case, accents, punctuation, the largest code point.
ORDERED = ["a", "B", "a-b", "ab", "a b", "Ä", "z", "é", "e", "\U0001f600", "a\u0301", "A", "b", "aa", "a\U0010ffff"]


def _collate_linguistically(store) -> None:
    """Give the name column a linguistic (ICU) collation, as a database created with one would have."""
    with store.engine.begin() as conn:
        view = conn.execute(sa.text("SELECT pg_get_viewdef('prunestore_live')")).scalar_one()
        conn.exec_driver_sql("DROP VIEW prunestore_live")
        conn.exec_driver_sql('ALTER TABLE prunestore_sessions ALTER COLUMN name TYPE text COLLATE "und-x-icu"')
        conn.exec_driver_sql(f"CREATE VIEW prunestore_live AS {view}")
        assert conn.execute(sa.text("SELECT 'B' < 'a' COLLATE \"und-x-icu\"")).scalar_one() is False


def test_names_come_in_code_point_order_whatever_the_database_collates(open_store):
    store = open_store()
    for name in ORDERED:
        store.append(name, Message("m", "user", "x", 0))
    if store.engine.dialect.name == "postgresql":
        _collate_linguistically(store)
    assert store.sessions() == sorted(ORDERED) == _pages(store, 2)
    assert [s.name for s in store.summaries(limit=100)] == sorted(ORDERED)
    for prefix in ("a", "A", "a-", "e", "\U0001f600", "a\U0010ffff", "\U0010ffff", "b"):
        expected = sorted(n for n in ORDERED if n.startswith(prefix))
        assert store.sessions(prefix) == expected == _pages(store, 1, prefix=prefix), prefix
        assert store.session_count(prefix) == len(expected)
        assert sorted(s.name for s in store.summaries(prefix, order="tokens")) == expected


def test_the_end_of_a_prefix_bounds_exactly_the_names_that_start_with_it():
    for prefix in ("a", "a\U0010ffff", "\U0010ffff", "\ud7ff", "é", "z\U0010ffff\U0010ffff"):
        end = catalog.prefix_end(prefix)
        assert prefix < end
        for name in (prefix, prefix + "\x00", prefix + "\U0010ffff" * 3, prefix + "zz"):
            assert prefix <= name < end, (prefix, name)
        below = prefix[:-1] + chr(ord(prefix[-1]) - 1) if ord(prefix[-1]) > 0 else None
        if below is not None and "\ud800" <= below[-1] <= "\udfff":
            continue
        assert below is None or not (prefix <= below < end)


def test_a_page_after_a_name_not_stored_starts_where_that_name_would_be(open_store):
    store = open_store()
    _fill(store)
    everything = store.sessions()
    for gone in ("aa", "user-11", "zzz"):
        after = store.sessions(after=gone)
        assert everything[len(everything) - len(after) :] == after
        assert all(n not in after for n in everything[: len(everything) - len(after)])
    store.delete_session("ab")  # a session removed between pages shifts nothing
    assert store.sessions(after="ab", limit=1) == [everything[everything.index("ab") + 1]]


def test_idle_sessions_are_those_last_written_that_long_ago(open_store):
    store = open_store()
    _fill(store)
    _age(store, ["a", "b", "user-2"], 10 * DAY)
    _age(store, ["é"], 3 * DAY)
    assert set(store.sessions(idle_for=timedelta(days=5))) == {"a", "b", "user-2"}
    assert set(store.sessions(idle_for=2 * DAY)) == {"a", "b", "user-2", "é"}
    assert store.sessions(idle_for=0) == store.sessions()
    assert store.sessions("user", idle_for=timedelta(days=5)) == ["user-2"]
    created, updated = _times(store, "b")
    store.append("b", Message("late", "user", "back again", 1))  # a write ends the idleness, not the age
    assert "b" not in store.sessions(idle_for=timedelta(days=5))
    assert _times(store, "b")[0] == created and _times(store, "b")[1] >= updated + 10 * DAY
    assert abs(_times(store, "b")[1] - time.time()) < 60


def test_gc_removes_exactly_the_idle_sessions_and_says_what_went(open_store):
    store = open_store()
    _fill(store)
    idle = ["a", "a%", "a/b", "user-10", "z%"]
    _age(store, idle, 40 * DAY)
    store.append("a", Message("more", "user", "and more", 1))  # written now: no longer idle
    _age(store, ["a"], 40 * DAY)
    assert store.live("a")  # the live cache holds it: it must not outlive the session
    before = {n: len(store.messages(n)) for n in NAMES}

    dry = store.gc(timedelta(days=30), dry_run=True, batch_size=2)
    assert dry == GcReport(tuple(store.sessions(idle_for=timedelta(days=30))), sum(before[n] for n in idle), True)
    assert store.sessions() == store.sessions(limit=100) and len(store.sessions()) == len(NAMES)  # nothing removed

    report = store.gc(timedelta(days=30), batch_size=2)
    assert sorted(report.sessions) == sorted(idle) and report.messages == sum(before[n] for n in idle)
    assert not report.dry_run
    assert set(store.sessions()) == set(NAMES) - set(idle)
    for name in idle:
        with pytest.raises(SessionNotFoundError):
            store.live(name)
    assert {n: len(store.messages(n)) for n in store.sessions()} == {n: before[n] for n in store.sessions()}
    assert store.verify().ok
    assert store.gc(timedelta(days=30)) == GcReport((), 0, False)
    store.append("a", Message("fresh", "user", "a new start", 0))  # the name is free again
    assert [m.id for m in store.messages("a")] == ["fresh"]


def test_gc_ends_a_transaction_after_a_bounded_number_of_messages(open_store, monkeypatch):
    """Long idle sessions are removed a few at a time, so writers to other sessions never wait for many."""
    store = open_store()
    lengths = {"long-a": 5, "long-b": 1, "long-c": 4, "long-d": 3, "short": 1}
    for name, length in lengths.items():
        store.append(name, [Message(f"m{i}", "user", f"message {i} of {name}", 0) for i in range(length)])
    _age(store, lengths, 40 * DAY)
    transactions: list[list[tuple[str, int]]] = []
    remove_idle = catalog.remove_idle

    def counted(driver, page, dry_run):
        batch, last = remove_idle(driver, page, dry_run)
        transactions.append(batch)
        return batch, last

    monkeypatch.setattr(catalog, "BATCH_MESSAGES", 5)
    monkeypatch.setattr(catalog, "remove_idle", counted)
    report = store.gc(timedelta(days=30))  # at most 100 sessions a transaction, but 5 messages
    assert transactions == [[("long-a", 5)], [("long-b", 1), ("long-c", 4)], [("long-d", 3), ("short", 1)], []]
    assert report == GcReport(("long-a", "long-b", "long-c", "long-d", "short"), 14, False)
    assert store.sessions() == [] and store.verify().ok


def test_gc_keeps_a_session_written_while_it_runs(open_store):
    """A write that holds its session when gc comes: gc waits for it, sees the new last write, and keeps it."""
    store = open_store()
    _fill(store, ["busy", "quiet"])
    _age(store, ["busy", "quiet"], 90 * DAY)
    writing, release = threading.Event(), threading.Event()

    def writer() -> None:  # what an append does to the session row, held open for a moment
        with store.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE prunestore_sessions SET updated_at = :now WHERE name = 'busy'"),
                {"now": int(time.time())},
            )
            writing.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    assert writing.wait(10)
    threading.Timer(0.5, release.set).start()
    report = store.gc(timedelta(days=30))
    thread.join()
    assert report.sessions == ("quiet",) and store.sessions() == ["busy"]


def test_gc_under_a_budget_leaves_the_other_sessions_verifiable(open_store):
    store = open_store(Policy(budget=12, clear_at_least=4))
    for i in range(6):
        store.append(f"s{i}", [Message(f"m{t}", "user", f"turn {t} of {i}", t) for t in range(10)])
    _age(store, ["s1", "s4"], 2 * DAY)
    assert set(store.gc(DAY).sessions) == {"s1", "s4"}
    assert store.sessions() == ["s0", "s2", "s3", "s5"] and store.verify().ok


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda s: s.sessions(limit=0), "limit"),
        (lambda s: s.sessions(limit=True), "limit"),
        (lambda s: s.sessions(limit=2.5), "limit"),
        (lambda s: s.sessions(prefix=3), "prefix"),
        (lambda s: s.sessions(after=["a"]), "after"),
        (lambda s: s.sessions(idle_for=-1), "idle_for"),
        (lambda s: s.sessions(idle_for=float("nan")), "idle_for"),
        (lambda s: s.sessions(idle_for="a week"), "idle_for"),
        (lambda s: s.gc(-timedelta(days=1)), "idle_for"),
        (lambda s: s.gc(DAY, batch_size=0), "batch_size"),
    ],
)
def test_bad_arguments_name_the_field_and_change_nothing(open_store, call, field):
    store = open_store()
    _fill(store, ["a", "b"])
    _age(store, ["a", "b"], 9 * DAY)
    with pytest.raises(InvalidArgumentError, match=f"^{field}="):
        call(store)
    assert store.sessions() == ["a", "b"] and store.verify().ok


def test_the_command_line_pages_and_collects(store_url):
    from prunestore import PruneStore

    with PruneStore(store_url) as store:
        _fill(store)
        _age(store, ["a%", "b"], 100 * DAY)
    runner = CliRunner()

    def cli(*args, input=None, code=0):
        result = runner.invoke(main, ["--db", store_url, *args], input=input)
        assert result.exit_code == code, (result.output, result.exception)
        return result

    first = cli("sessions", "--prefix", "a", "--limit", "2")
    names = first.stdout.splitlines()
    assert len(names) == 2 and all(n.startswith("a") for n in names)
    assert first.stderr.strip().startswith("next page: --after ")
    rest = json.loads(cli("sessions", "--prefix", "a", "--after", names[-1], "--json").stdout)
    assert set(names + rest) == {n for n in NAMES if n.startswith("a")} and not set(names) & set(rest)
    assert json.loads(cli("sessions", "--idle-days", "30", "--json").stdout) in (["a%", "b"], ["b", "a%"])
    assert "--idle-days" in cli("sessions", "--idle-days", "-1", code=2).stderr

    dry = json.loads(cli("gc", "--idle-days", "30", "--dry-run", "--json").stdout)
    assert sorted(dry["sessions"]) == ["a%", "b"] and dry["messages"] == 4 and dry["dry_run"]
    refused = cli("gc", "--idle-days", "30", input="n\n", code=1)
    assert "Delete 2 sessions (4 messages) idle for 30 days?" in refused.stderr
    assert "removed 2 sessions, 4 messages (idle for 30 days)" in cli("gc", "--idle-days", "30", "--yes").stdout
    assert "removed 0 sessions" in cli("gc", "--idle-days", "30").stdout  # nothing left to ask about
    with PruneStore(store_url) as store:
        assert set(store.sessions()) == set(NAMES) - {"a%", "b"} and store.verify().ok
