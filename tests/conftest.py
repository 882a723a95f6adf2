"""Fixtures: one store fixture over SQLite and PostgreSQL, so each behaviour test runs on both.

PostgreSQL tests need ``PRUNESTORE_TEST_POSTGRES_URL``; each test gets a
schema of its own (created, put first on the search path, dropped after).
They run twice: on the tables as migrations make them, and on the same
tables hash-partitioned by session (``prunestore db partition``).
"""

from __future__ import annotations

import os
import uuid
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings

from prunestore import Policy, PruneStore
from prunestore.sql import db, partitions, recall_index
from prunestore.sql.driver import Driver

PG_ENV = "PRUNESTORE_TEST_POSTGRES_URL"
PG_HINT = f"set {PG_ENV}=postgresql+psycopg://postgres@127.0.0.1:5432/test to run the PostgreSQL tests"

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

BACKENDS = [
    pytest.param("sqlite", marks=pytest.mark.sqlite),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("partitioned", marks=pytest.mark.postgres),
]
PARTITIONS = 4
# Each backend with the recall index (prunestore db recall-index), for the modules that set RECALL_INDEX.
INDEXED = [
    pytest.param("sqlite-indexed", marks=pytest.mark.sqlite),
    pytest.param("postgres-indexed", marks=pytest.mark.postgres),
]


def _pg_schema_url(base: str, schema: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_url(backend, tmp_path, request):
    """A URL of an empty database on the backend under test (on "partitioned", one at the newest revision)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    if backend == "sqlite-indexed":
        url = f"sqlite:///{tmp_path / 'store.db'}"
        _indexed(url)
        yield url
        return
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(PG_HINT)
    if backend == "partitioned" and request.node.get_closest_marker("plain_tables"):
        pytest.skip(
            "starts below the newest revision, where partitioned tables cannot exist (refusal: test_partitions)"
        )
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        url = _pg_schema_url(base, schema)
        if backend == "partitioned":
            engine = db.make_engine(url)
            partitions.partition(engine, PARTITIONS)
            engine.dispose()
        if backend == "postgres-indexed":
            _indexed(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


def _indexed(url: str) -> None:
    engine = db.make_engine(url)
    try:
        assert recall_index.create(engine)
    finally:
        engine.dispose()


@pytest.fixture(scope="session", autouse=True)
def _trigrams_in_public() -> None:
    """pg_trgm where no test's schema holds it (the recall index needs it): one that a store made in a
    test's schema would go with that schema, and with it every other test's index of trigrams. Workers may
    race to make it; the loser finds it made."""
    base = os.environ.get(PG_ENV)
    if not base:
        return
    admin = sa.create_engine(base)
    for attempt in range(3):
        try:
            with admin.begin() as conn:
                conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
            return
        except sa.exc.DBAPIError:
            if attempt == 2:
                raise
        finally:
            admin.dispose()


def pytest_generate_tests(metafunc):
    """Every backend for each test that uses one; modules that set BOTH_APIS run their store tests on
    PruneStore and on AsyncPruneStore, and those that set RECALL_INDEX with the recall index too."""
    if "backend" in metafunc.fixturenames and not _parametrizes(metafunc, "backend"):
        indexed = INDEXED if getattr(metafunc.module, "RECALL_INDEX", False) else []
        metafunc.parametrize("backend", [*BACKENDS, *indexed], indirect=True)
    if "open_store" in metafunc.fixturenames and getattr(metafunc.module, "BOTH_APIS", False):
        metafunc.parametrize("api", ["sync", "async"], indirect=True)


def _parametrizes(metafunc, name: str) -> bool:
    """Whether the test's own marks parametrize `name` (it then runs on the backends it names)."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if name in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names):
            return True
    return False


@pytest.fixture
def api(request) -> str:
    return getattr(request, "param", "sync")


@pytest.fixture
def open_store(store_url, api):
    """Open stores on the test database (several opens share it); all closed at the end."""
    opened: list = []

    def _open(policy: Policy | None = None, **kwargs) -> PruneStore:
        store: Any  # a BlockingAsyncStore makes the same calls as a PruneStore
        if api == "async":
            from blocking import BlockingAsyncStore

            store = BlockingAsyncStore(store_url, policy=policy, **kwargs)
        else:
            store = PruneStore(store_url, policy=policy, **kwargs)
        for earlier in opened:  # hypothesis opens one per example: let them keep no idle connections
            if isinstance(earlier, PruneStore):
                earlier.engine.dispose()
            else:
                earlier.let_go()
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store) -> PruneStore:
    return open_store()


@pytest.fixture
def recorded(monkeypatch) -> dict[str, tuple]:
    """The statements the store's driver runs from now on, by text, each with its first parameters.

    The driver sends the hot paths' statements to the DBAPI cursor itself
    (past SQLAlchemy's events); its two ways of sending are wrapped, and still run.
    """
    seen: dict[str, tuple] = {}
    run, run_many = Driver._run, Driver.run_many

    def record_run(self, statement, params):
        seen.setdefault(statement.text, (statement, dict(params)))
        return run(self, statement, params)

    def record_many(self, statement, rows):
        if rows:
            first = rows[0]
            seen.setdefault(statement.text, (statement, first if isinstance(first, tuple) else dict(first)))
        return run_many(self, statement, rows)

    monkeypatch.setattr(Driver, "_run", record_run)
    monkeypatch.setattr(Driver, "run_many", record_many)
    return seen


INSTALLED_ENV = "PRUNESTORE_TEST_INSTALLED"


def pytest_sessionstart(session):
    """When the suite runs against an installed wheel, make sure that is the prunestore imported."""
    prefix = os.environ.get(INSTALLED_ENV)
    if prefix:
        import prunestore

        where = os.path.realpath(prunestore.__file__)
        assert where.startswith(os.path.realpath(prefix)), f"prunestore imported from {where}, not from {prefix}"
