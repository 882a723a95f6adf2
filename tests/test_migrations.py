"""Alembic: the schema is created, removed and created again."""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from prunestore import Message, Policy, PruneStore, db
from prunestore.schema import VERSION_TABLE, metadata


def tables(engine) -> set[str]:
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        return {t for t in inspector.get_table_names() if t.startswith("prunestore_")} | {
            v for v in inspector.get_view_names() if v.startswith("prunestore_")
        }


def test_upgrade_downgrade_upgrade(store_url):
    engine = db.make_engine(store_url)
    try:
        assert tables(engine) == set()
        db.upgrade(engine)
        expected = set(metadata.tables) | {"prunestore_live", VERSION_TABLE}
        assert tables(engine) == expected
        with engine.connect() as conn:
            assert db.current_revision(conn) == db.head_revision()
        db.downgrade(engine, "base")
        assert tables(engine) == {VERSION_TABLE}
        with engine.connect() as conn:
            assert db.current_revision(conn) is None
        db.upgrade(engine)
        assert tables(engine) == expected
        db.upgrade(engine)  # already at head: a no-op
    finally:
        engine.dispose()


def test_the_migrated_schema_matches_the_metadata(store_url):
    engine = db.make_engine(store_url)
    try:
        db.upgrade(engine)
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            diff = compare_metadata(context, metadata)
        diff = [d for d in diff if not (d[0] == "remove_table" and d[1].name == VERSION_TABLE)]
        assert diff == []
    finally:
        engine.dispose()


def test_a_store_lives_beside_an_application_with_its_own_alembic_table(store_url):
    engine = sa.create_engine(db.resolve_url(store_url))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        conn.execute(sa.text("INSERT INTO alembic_version VALUES ('app_rev_1')"))
    with PruneStore(store_url) as store:
        store.append("s", Message("a", "user", "hi", 0))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "app_rev_1"
    engine.dispose()


def test_a_budgeted_store_survives_downgrade_and_upgrade_and_its_sessions_get_times(store_url):
    policy = Policy(budget=12, clear_at_least=4)
    with PruneStore(store_url, policy=policy) as store:
        for turn in range(20):
            store.append(
                "s",
                [Message(f"u{turn}", "user", f"question {turn}", turn), Message(f"a{turn}", "assistant", "ok", turn)],
            )
        before = [(m.id, m.verdict) for m in store.messages("s")]
        assert store.stats("s").events > 0
    engine = db.make_engine(store_url)
    try:
        db.downgrade(engine, "0004")  # before the cursor and the session times
        db.upgrade(engine)
        with engine.connect() as conn:
            created, updated, cursor = conn.execute(
                sa.text("SELECT created_at, updated_at, prompt_cursor FROM prunestore_sessions")
            ).one()
    finally:
        engine.dispose()
    assert abs(created - time.time()) < 60 and created == updated and cursor == 0
    with PruneStore(store_url, policy=policy) as store:
        assert [(m.id, m.verdict) for m in store.messages("s")] == before and store.verify().ok
        for turn in range(20, 30):
            store.append(
                "s",
                [Message(f"u{turn}", "user", f"question {turn}", turn), Message(f"a{turn}", "assistant", "ok", turn)],
            )
        assert store.verify().ok
