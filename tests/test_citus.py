"""prunestore on Citus, set up by the steps the operations guide gives.

Runs when ``PRUNESTORE_TEST_CITUS_URL`` names a Citus coordinator (a
database where the citus extension is created); skipped otherwise, since
Citus is not a package this project's machines can install.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import _pg_schema_url
from test_routing import PER_SESSION, session_statements

from prunestore import Message, Policy, PruneStore
from prunestore.sql import db

CITUS_ENV = "PRUNESTORE_TEST_CITUS_URL"
_COPY = re.compile(r"INSERT INTO \w+ \([^)]*\) SELECT ")  # fork's copy from one session to another
GUIDE = Path(__file__).parents[1] / "docs" / "operations.md"

pytestmark = pytest.mark.skipif(
    not os.environ.get(CITUS_ENV),
    reason=f"no Citus cluster: set {CITUS_ENV}=postgresql+psycopg://user@coordinator/db to run prunestore on Citus",
)


def documented_steps() -> list[str]:
    """The SQL statements of the guide's Citus steps (the block fed to psql)."""
    block = re.search(r"<<'SQL'\n(.*?)\nSQL\n", GUIDE.read_text(encoding="utf-8"), re.DOTALL)
    assert block, f"{GUIDE} lost its Citus steps"
    return [line for line in block.group(1).splitlines() if line.strip()]


@pytest.fixture
def citus_url():
    base = os.environ[CITUS_ENV]
    schema = f"citus_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    url = _pg_schema_url(base, schema)
    engine = db.make_engine(url)
    try:
        db.upgrade(engine)
        with engine.begin() as conn:
            for step in documented_steps():
                conn.exec_driver_sql(step)
        yield url
    finally:
        engine.dispose()
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


def test_every_call_runs_on_citus_and_each_statement_on_one_shard(citus_url, recorded):
    with PruneStore(citus_url) as store:
        for other in range(20):
            store.append(f"other-{other}", Message("o", "user", f"message {other}", 0))
    statements = session_statements(citus_url, Policy(budget=60, clear_at_least=20), recorded)
    with PruneStore(citus_url, policy=Policy(budget=60, clear_at_least=20)) as store:
        assert store.verify().ok and len(store.sessions()) == 22  # with "s" and "other"
    engine = db.make_engine(citus_url)
    multi = {}
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            for sql, parameters in statements.items():
                if not any(table in sql for table in PER_SESSION) or _COPY.match(sql):
                    continue
                with raw.cursor() as cursor:
                    cursor.execute("EXPLAIN " + sql, parameters)
                    plan = "\n".join(row[0] for row in cursor.fetchall())
                tasks = re.findall(r"Task Count: (\d+)", plan)
                if any(int(count) > 1 for count in tasks):
                    multi[sql] = plan
            raw.rollback()
    finally:
        engine.dispose()
    assert multi == {}
