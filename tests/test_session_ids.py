"""Session ids come from the names: the same in every process and in the migration, collisions reported."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

import prunestore.sql.sessions
from prunestore import Message, SessionIdCollisionError, SessionNotFoundError
from prunestore.sql import db
from prunestore.sql.sessionids import session_id

BOTH_APIS = True
_MIGRATION = next((Path(db.__file__).parent / "migrations" / "versions").glob("0007_*.py"), None) or next(
    (Path(__file__).parents[1] / "migrations" / "versions").glob("0007_*.py")
)


def _migration_session_id():
    spec = importlib.util.spec_from_file_location("migration_0007", _MIGRATION)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._session_id


@given(st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1))
def test_the_migration_computes_the_ids_the_store_does(name):
    assert _migration_session_id()(name) == session_id(name)
    assert -(2**63) <= session_id(name) < 2**63


def test_ids_are_fixed_values():
    """Ids are stored: the function must never change (a changed hash would lose every session)."""
    assert [session_id(name) for name in ("s", "user-1", "日本")] == [
        -5519989685782110114,
        -9041560443872937314,
        7114129716599321566,
    ]


def test_each_session_is_stored_under_the_id_of_its_name(store_url, open_store):
    store = open_store()
    names = ["a", "user/42?x#y%", "日本語", "x" * 300]
    for name in names:
        store.append(name, Message("m", "user", f"hello {name}", 0))
    engine = sa.create_engine(db.resolve_url(store_url))
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.text("SELECT name, session_id FROM prunestore_sessions")).all())
        orphans = conn.execute(
            sa.text(
                "SELECT count(*) FROM prunestore_messages m WHERE NOT EXISTS "
                "(SELECT 1 FROM prunestore_sessions s WHERE s.session_id = m.session_id)"
            )
        ).scalar()
    engine.dispose()
    assert stored == {name: session_id(name) for name in names} and orphans == 0


@pytest.fixture
def colliding(monkeypatch):
    """Every name hashes to one id, as two names would with odds of 1 in 2**64."""
    monkeypatch.setattr(prunestore.sql.sessions, "session_id", lambda name: 7)


def test_a_name_whose_id_is_taken_is_refused_and_nothing_changes(open_store, colliding):
    store = open_store()
    store.append("first", [Message("m1", "user", "kept", 0), Message("m2", "assistant", "ok", 0)])
    before = store.messages("first")
    with pytest.raises(SessionIdCollisionError) as caught:
        store.append("second", Message("x", "user", "lost?", 0))
    assert (caught.value.session, caught.value.holder) == ("second", "first")
    assert "session='second'" in str(caught.value) and "'first'" in str(caught.value)
    with pytest.raises(SessionIdCollisionError):
        store.fork("first", "m1", "second")
    for read in (store.live, store.messages, store.stats):
        with pytest.raises(SessionNotFoundError):
            read("second")
    with pytest.raises(SessionNotFoundError):
        store.delete_session("second")
    assert store.sessions() == ["first"] and store.messages("first") == before and store.verify().ok
