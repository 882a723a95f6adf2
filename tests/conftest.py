"""Fixtures: one store fixture over SQLite and PostgreSQL, so each behaviour test runs on both.

PostgreSQL tests need ``PRUNESTORE_TEST_POSTGRES_URL``; each test gets a
schema of its own (created, put first on the search path, dropped after).
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings

from prunestore import Policy, PruneStore

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
]


def _pg_schema_url(base: str, schema: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_url(backend, tmp_path):
    """A URL of an empty database on the backend under test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(PG_HINT)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        yield _pg_schema_url(base, schema)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


def pytest_generate_tests(metafunc):
    """Modules that set BOTH_APIS run their store tests on PruneStore and on AsyncPruneStore."""
    if "open_store" in metafunc.fixturenames and getattr(metafunc.module, "BOTH_APIS", False):
        metafunc.parametrize("api", ["sync", "async"], indirect=True)


@pytest.fixture
def api(request) -> str:
    return getattr(request, "param", "sync")


@pytest.fixture
def open_store(store_url, api):
    """Open stores on the test database (several opens share it); all closed at the end."""
    opened: list = []

    def _open(policy: Policy | None = None, **kwargs) -> PruneStore:
        if api == "async":
            from blocking import BlockingAsyncStore

            store = BlockingAsyncStore(store_url, policy=policy, **kwargs)
        else:
            store = PruneStore(store_url, policy=policy, **kwargs)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store) -> PruneStore:
    return open_store()


INSTALLED_ENV = "PRUNESTORE_TEST_INSTALLED"


def pytest_sessionstart(session):
    """When the suite runs against an installed wheel, make sure that is the prunestore imported."""
    prefix = os.environ.get(INSTALLED_ENV)
    if prefix:
        import prunestore

        where = os.path.realpath(prunestore.__file__)
        assert where.startswith(os.path.realpath(prefix)), f"prunestore imported from {where}, not from {prefix}"
