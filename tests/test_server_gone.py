"""PostgreSQL going away under an open store: one `PruneStoreError` line per failed call, no raw driver
error and no logged traceback; the calls after the server is back work again; a server that never
answers is given up on."""

from __future__ import annotations

import logging
import os
import time
import uuid

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from netproxy import Proxy

from prunestore import DatabaseError, Message, PruneStore
from prunestore.cli import main

pytestmark = pytest.mark.postgres


@pytest.fixture
def proxied(store_url, backend):
    """The test database's URL through a `Proxy`, and the proxy."""
    if backend == "sqlite":
        pytest.skip("a SQLite file has no server to lose (a corrupted file: test_cli_edges)")
    url = sa.engine.make_url(store_url)
    proxy = Proxy((url.host or "127.0.0.1", url.port or 5432)).start()
    yield url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False), proxy
    proxy.stop()


def test_calls_while_the_server_is_gone_fail_in_one_line_and_recover(proxied, caplog):
    url, proxy = proxied
    store = PruneStore(url)
    store.append("s", Message("a", "user", "hello", 1))
    assert [m.id for m in store.live("s")] == ["a"]
    proxy.stop()
    calls = {
        "append": lambda: store.append("s", Message("b", "user", "again", 2)),
        "live": lambda: store.live("s"),
        "messages": lambda: store.messages("s"),
        "stats": lambda: store.stats(),
        "sessions": lambda: store.sessions(),
    }
    with caplog.at_level(logging.WARNING):
        for name, call in calls.items():
            with pytest.raises(DatabaseError) as info:
                call()
            assert "\n" not in str(info.value), name
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"
    proxy.start()
    store.append("s", Message("b", "user", "again", 2))  # the pool reconnects
    assert [m.id for m in store.messages("s")] == ["a", "b"] and store.verify().ok
    store.close()


def test_the_cli_says_one_line_when_the_server_is_gone(proxied):
    url, proxy = proxied
    with PruneStore(url) as store:
        store.append("s", Message("a", "user", "hello", 1))
    proxy.stop()
    result = CliRunner().invoke(main, ["--db", url, "stats"])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("Error:"), result.output


def test_a_server_that_never_answers_is_given_up_on(proxied):
    url, proxy = proxied
    proxy.silent = True
    started = time.monotonic()
    with pytest.raises(DatabaseError, match="timeout|timed out"):
        PruneStore(url + ("&" if "?" in url else "?") + "connect_timeout=1")
    assert time.monotonic() - started < 15
    assert "connect_timeout" not in os.environ.get("PRUNESTORE_URL", "")


def test_the_web_view_answers_503_with_its_headers_when_the_server_is_gone(proxied):
    from starlette.testclient import TestClient

    from prunestore.web import create_app

    url, proxy = proxied
    store = PruneStore(url)
    store.append("s", Message("a", "user", "hello", 1))
    client = TestClient(create_app(store), base_url="http://127.0.0.1:8000")
    assert client.get("/session", params={"name": "s"}).status_code == 200
    proxy.stop()
    for path in ("/", "/session?name=s", "/chart?session=s"):
        response = client.get(path)
        assert response.status_code == 503, path
        assert response.headers["Content-Security-Policy"].startswith("default-src 'none'")
        assert 'id="error"' in response.text
    proxy.start()
    assert client.get("/session", params={"name": "s"}).status_code == 200
    store.close()


def test_terminated_connections_cost_one_call_and_log_nothing(proxied, store_url, caplog):
    """The server ends every connection of the store (an administrator, a failover): one call fails in one
    line, the next reconnects, and no traceback is logged."""
    url, _ = proxied
    name = f"prunestore-test-{uuid.uuid4().hex[:8]}"  # marks this store's connections
    store = PruneStore(url + ("&" if "?" in url else "?") + f"application_name={name}")
    store.append("s", Message("a", "user", "hello", 1))
    store.live("s")
    admin = sa.create_engine(store_url)
    with caplog.at_level(logging.WARNING):
        with admin.begin() as conn:
            ended = conn.execute(
                sa.text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = :n"),
                {"n": name},
            ).scalar()
        assert ended >= 1
        failed = 0
        for turn in range(2, 6):
            try:
                store.append("s", Message(f"m{turn}", "user", "again", turn))
            except DatabaseError as exc:
                failed += 1
                assert "\n" not in str(exc)
    admin.dispose()
    assert failed <= 1
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"
    assert store.verify().ok and len(store.messages("s")) == 5 - failed
    store.close()


def test_a_server_that_never_answers_is_given_up_on_by_default(proxied):
    url, proxy = proxied
    proxy.silent = True
    started = time.monotonic()
    with pytest.raises(DatabaseError, match="timeout|timed out"):
        PruneStore(url)
    assert 9 < time.monotonic() - started < 20  # the default: 10 seconds
