"""Hash partitions by session on PostgreSQL: made from a live store, keeping every row, refused where they cannot be."""

from __future__ import annotations

import json
import threading

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from prunestore import DatabaseError, InvalidArgumentError, Message, PruneStore
from prunestore.cli import main
from prunestore.sql import db, partitions


def count_of(url: str) -> int:
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            return partitions.partition_count(conn)
    finally:
        engine.dispose()


def fill(store: PruneStore, sessions: int = 6, turns: int = 8) -> dict:
    for turn in range(turns):
        store.append_many(
            {
                f"s{n}": [
                    Message(f"u{turn}", "user", f"question {turn % 3} DEFINE:k{turn % 2}", turn),
                    Message(f"t{turn}", "tool_output", f"status {turn}", turn, tool_key="status"),
                    Message(f"d{turn}", "retrieved_doc", f"passage {turn % 2}", turn, refs=("k0",)),
                ]
                for n in range(sessions)
            }
        )
    return {name: [(m.id, m.verdict) for m in store.messages(name)] for name in store.sessions()}


def test_partitioning_a_store_keeps_every_row_and_verdict(store_url, backend):
    if backend == "sqlite":
        pytest.skip("SQLite has no partitions (the refusal is tested below)")
    with PruneStore(store_url) as store:
        before = fill(store)
    engine = db.make_engine(store_url)
    try:
        for count in (8, 3):  # from the fixture's layout (plain, or 4 partitions), then a repartition
            partitions.partition(engine, count)
            assert count_of(store_url) == count
            with PruneStore(store_url) as store:
                assert {n: [(m.id, m.verdict) for m in store.messages(n)] for n in store.sessions()} == before
                assert store.verify().ok
        partitions.partition(engine, 3)  # the same count again: nothing to do
        with engine.connect() as conn:
            live = conn.execute(sa.text("SELECT count(*) FROM prunestore_live WHERE session = 's1'")).scalar()
    finally:
        engine.dispose()
    assert live == sum(1 for _, verdict in before["s1"] if verdict in ("kept", "restored"))
    with PruneStore(store_url) as store:
        store.append("s1", Message("later", "user", "one more", 9))
        assert store.verify().ok


def test_appends_during_partitioning_are_all_kept(store_url, backend):
    if backend == "sqlite":
        pytest.skip("SQLite has no partitions (the refusal is tested below)")
    written: list[str] = []
    failures: list[BaseException] = []
    started = threading.Event()

    def writer(name: str) -> None:
        try:
            with PruneStore(store_url) as store:
                for turn in range(40):
                    store.append(name, Message(f"m{turn}", "user", f"message {turn}", turn))
                    written.append(f"{name}/m{turn}")
                    started.set()
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    started.wait(30)
    engine = db.make_engine(store_url)
    try:
        partitions.partition(engine, 5)
    finally:
        engine.dispose()
    for thread in threads:
        thread.join()
    assert failures == []
    with PruneStore(store_url) as store:
        stored = [f"{name}/{m.id}" for name in store.sessions() for m in store.messages(name)]
        assert sorted(stored) == sorted(written) and len(stored) == 120 and store.verify().ok
    assert count_of(store_url) == 5


def test_bad_counts_and_sqlite_are_refused_by_name(store_url, backend):
    engine = db.make_engine(store_url)
    try:
        for bad in (1, 0, 1025, "4", 2.0, True):
            with pytest.raises(InvalidArgumentError, match="count="):
                partitions.partition(engine, bad)
        if backend == "sqlite":
            with pytest.raises(InvalidArgumentError, match="url=.*SQLite has none"):
                partitions.partition(engine, 4)
    finally:
        engine.dispose()
    result = CliRunner().invoke(main, ["--db", store_url, "db", "partition", "1", "--yes"])
    assert result.exit_code == 2 and "COUNT" in result.output


def test_the_command_partitions_and_says_how_many(store_url, backend):
    run = CliRunner().invoke
    if backend == "sqlite":
        result = run(main, ["--db", store_url, "db", "partition", "4", "--yes"])
        assert result.exit_code == 2 and "SQLite has none" in result.output
        return
    with PruneStore(store_url) as store:
        before = fill(store, sessions=2, turns=2)
    assert run(main, ["--db", store_url, "db", "partition", "6"], input="n\n").exit_code == 1  # asks first
    assert count_of(store_url) == (4 if backend == "partitioned" else 0)
    result = run(main, ["--db", store_url, "db", "partition", "6", "--yes", "--json"])
    assert result.exit_code == 0 and json.loads(result.output) == {"partitions": 6}
    with PruneStore(store_url) as store:
        assert {n: [(m.id, m.verdict) for m in store.messages(n)] for n in store.sessions()} == before


def test_a_partitioned_store_refuses_to_go_below_the_hashed_ids(store_url, backend):
    if backend != "partitioned":
        pytest.skip("only a partitioned database is refused (the others go down and up in test_migrations)")
    with PruneStore(store_url) as store:
        before = fill(store, sessions=2, turns=2)
    engine = db.make_engine(store_url)
    try:
        with pytest.raises(DatabaseError, match="hash-partitioned"):
            db.downgrade(engine, "0006")
        with engine.connect() as conn:
            assert db.current_revision(conn) == db.head_revision()
    finally:
        engine.dispose()
    with PruneStore(store_url) as store:
        assert {n: [(m.id, m.verdict) for m in store.messages(n)] for n in store.sessions()} == before


def test_readers_queued_behind_a_partition_see_the_store_before_or_after(store_url, backend):
    """Reads that wait for the partition's locks see every session once it commits, never an empty store."""
    if backend == "sqlite":
        pytest.skip("SQLite has no partitions (the refusal is tested above)")
    from prunestore.integrations.openai_chat import OpenAIChatHistory

    with PruneStore(store_url) as store:
        fill(store, sessions=3, turns=10)
        expected = {
            "live": [m.id for m in store.live("s1")],
            "messages": [m.id for m in store.messages("s1")],
            "window": [e.message.id for e in store.window("s1").entries],
            "stats": store.stats().sessions,
            "summary": store.summary("s1").messages,
            "sessions": store.sessions(),
        }
        expected["history"] = len(OpenAIChatHistory("s1", store).messages())
    engine = db.make_engine(store_url)
    blocker = engine.connect()
    blocker.begin()
    blocker.exec_driver_sql("LOCK TABLE prunestore_messages IN SHARE MODE")  # holds the partition back
    reader = PruneStore(store_url)
    reader.live("s1")  # connections made and the live list cached before the wait: the warm path
    reads = {
        "live": lambda: [m.id for m in reader.live("s1")],
        "messages": lambda: [m.id for m in reader.messages("s1")],
        "window": lambda: [e.message.id for e in reader.window("s1").entries],
        "stats": lambda: reader.stats().sessions,
        "summary": lambda: reader.summary("s1").messages,
        "sessions": reader.sessions,
        "history": lambda: len(OpenAIChatHistory("s1", reader).messages()),
        "verify": lambda: reader.verify("s1").ok,
    }
    expected["verify"] = True
    got: dict[str, object] = {}

    def read(name: str) -> None:
        try:
            got[name] = reads[name]()
        except Exception as exc:  # shown by the comparison below
            got[name] = exc

    count = partitions.partition_count(blocker) + 3 if partitions.partition_count(blocker) else 3
    partitioner = threading.Thread(target=partitions.partition, args=(engine, count))
    partitioner.start()
    threads = []
    try:
        _wait_for_lock_queue(store_url, 1)
        threads = [threading.Thread(target=read, args=(name,)) for name in reads]
        for thread in threads:
            thread.start()
        _wait_for_lock_queue(store_url, 2)
    finally:
        blocker.rollback()
        blocker.close()
    partitioner.join()
    for thread in threads:
        thread.join()
    reader.close()
    engine.dispose()
    assert got == expected


def _wait_for_lock_queue(url: str, waiting: int) -> None:
    """Until at least `waiting` backends wait for a lock (the partition first, then the readers behind it)."""
    import time

    watcher = sa.create_engine(url)
    try:
        deadline = time.monotonic() + 20
        with watcher.connect() as conn:
            while time.monotonic() < deadline:
                found = conn.exec_driver_sql("SELECT count(*) FROM pg_locks WHERE NOT granted").scalar_one()
                if found >= waiting:
                    time.sleep(0.3)  # the rest of the readers join the queue
                    return
                time.sleep(0.02)
    finally:
        watcher.dispose()
    raise AssertionError(f"fewer than {waiting} backends waited for a lock")
