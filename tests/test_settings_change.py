"""A change of policy or tokenizer reaches every store object already open: in this process, in
another one, and behind a running web view; nothing is written under settings the store no longer has."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import char_tokens
from starlette.testclient import TestClient

from prunestore import Message, Policy, PruneStore, TokenizerMismatchError, count_tokens, prune
from prunestore.web import create_app

BOTH_APIS = True
BUDGET = Policy(budget=500, clear_at_least=100)
TESTS = Path(__file__).parent


def _turns(store, session: str, start: int, count: int) -> None:
    for turn in range(start, start + count):
        store.append(session, Message(f"m{turn}", "tool_output", f"row {turn} " * 20, turn, tool_key=f"q{turn}"))


def _agrees_with_batch(store, session: str) -> None:
    report = store.verify()
    assert report.ok, report.mismatches[:5]
    stored = store.messages(session)
    batch = prune([m.to_message() for m in stored], policy=store.policy, tokenizer=store.tokenizer)
    assert {m.id: m.verdict for m in stored} == batch.verdicts


def _cli(url: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "prunestore.cli", "--db", url, *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_policy_change_reaches_a_store_opened_before_it(open_store):
    first, second = open_store(), open_store()
    _turns(first, "s", 1, 30)
    second.rebuild(policy=BUDGET)
    _turns(first, "s", 31, 30)  # appended under the new policy, by the object opened before the change
    assert first.policy == BUDGET
    stats = first.stats("s")
    assert stats.budget == 500 and stats.live_tokens <= 500 and stats.over_budget == 0
    _agrees_with_batch(first, "s")
    first.append("t", Message("a", "user", "a new session", 1))  # a session created after the change
    assert second.verify().ok


def test_a_policy_change_by_another_process_reaches_this_one(open_store, store_url):
    store = open_store()
    _turns(store, "s", 1, 30)
    _cli(store_url, "policy", "--budget", "500", "--clear-at-least", "100", "--yes")
    store.truncate("s", "m25")  # every kind of write settles the settings first
    _turns(store, "s", 26, 30)
    assert store.policy == BUDGET and store.stats("s").live_tokens <= 500
    _agrees_with_batch(store, "s")
    _cli(store_url, "policy", "--budget", "none", "--clear-at-least", "0", "--yes")
    assert store.fork("s", "m40", "f") is None
    assert store.policy == Policy() and store.stats("f").budget is None
    _agrees_with_batch(store, "f")


def test_reads_show_the_policy_of_the_store_not_of_the_opening(open_store):
    reader, writer = open_store(), open_store()
    _turns(writer, "s", 1, 40)
    writer.rebuild(policy=BUDGET)
    assert reader.stats("s").budget == 500  # a store object that only reads
    window = reader.window("s")
    assert {e.explanation.budget for e in window.entries} == {500}


@pytest.fixture
def sync_store(store_url):
    """`PruneStore` objects on the test database, for what takes the blocking class itself."""
    opened: list[PruneStore] = []

    def _open() -> PruneStore:
        opened.append(PruneStore(store_url))
        return opened[-1]

    yield _open
    for store in opened:
        store.close()


def test_a_web_view_started_before_a_change_shows_the_new_budget(sync_store):
    served, other = sync_store(), sync_store()
    _turns(served, "s", 1, 40)
    client = TestClient(create_app(served), base_url="http://127.0.0.1:8000")
    assert 'id="budget"' not in client.get("/chart", params={"session": "s"}).text
    other.rebuild(policy=BUDGET)
    page = client.get("/chart", params={"session": "s"}).text
    assert 'id="budget"' in page and "budget, 500 tokens" in page


def test_a_tokenizer_change_recounts_and_reaches_a_store_that_follows_it(open_store):
    follower, explicit, changer = open_store(), open_store(tokenizer=count_tokens), open_store()
    _turns(follower, "s", 1, 10)
    assert follower.tokenizer_name == "prunestore.text:count_tokens"
    changer.rebuild(tokenizer=char_tokens)
    assert all(m.tokens == len(m.content) for m in changer.messages("s"))  # every message counted again
    _turns(follower, "s", 11, 5)  # counted by the store's new tokenizer
    assert follower.tokenizer_name == "helpers:char_tokens"
    assert all(m.tokens == len(m.content) for m in follower.messages("s"))
    assert follower.stats("s").tokens == sum(len(m.content) for m in follower.messages("s"))
    before = len(follower.messages("s"))
    with pytest.raises(TokenizerMismatchError, match="helpers:char_tokens"):
        explicit.append("s", Message("x", "user", "counted by the old tokenizer", 20))
    assert len(follower.messages("s")) == before  # nothing written
    with pytest.raises(TokenizerMismatchError, match="helpers:char_tokens"):
        open_store(tokenizer=count_tokens)
    assert follower.verify().ok


def test_verify_counts_tokens_with_the_store_tokenizer(open_store, store_url):
    store = open_store()
    _turns(store, "s", 1, 5)
    import sqlalchemy as sa

    engine = sa.create_engine(store_url)
    with engine.begin() as conn:  # a count no tokenizer gave
        conn.exec_driver_sql("UPDATE prunestore_messages SET tokens = tokens + 1 WHERE seq = 2")
    engine.dispose()
    report = store.verify()
    assert [(m.what, m.subject) for m in report.mismatches if m.what == "tokens"] == [("tokens", "m2")]


def test_a_tokenizer_change_by_another_process(open_store, store_url):
    store = open_store()
    _turns(store, "s", 1, 10)
    shown = _cli(store_url, "policy", "--tokenizer", "helpers:char_tokens", "--yes")
    assert "tokenizer: helpers:char_tokens" in shown
    _turns(store, "s", 11, 5)
    assert all(m.tokens == len(m.content) for m in store.messages("s"))
    assert store.verify().ok


def test_sessions_created_while_the_policy_changes_end_under_the_new_one(sync_store):
    """Writers creating sessions race a policy change: every session ends computed under the recorded policy."""
    changer = sync_store()
    writers = [sync_store() for _ in range(3)]
    errors: list[BaseException] = []

    def write(store: PruneStore, index: int) -> None:
        try:
            for n in range(12):
                _turns(store, f"w{index}-{n}", 1, 3)
        except BaseException as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(store, i)) for i, store in enumerate(writers)]
    for thread in threads:
        thread.start()
    for policy in (BUDGET, Policy(), Policy(budget=300, clear_at_least=50)):
        changer.rebuild(policy=policy)
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(changer.sessions()) == 36
    report = changer.verify()
    assert report.ok, report.mismatches[:5]
    for store in writers:
        _turns(store, "after", 10 + writers.index(store) * 10, 3)
        assert store.policy == Policy(budget=300, clear_at_least=50)
    assert changer.verify().ok


def test_a_serve_process_started_before_a_change_shows_it(sync_store, store_url):
    """`prunestore serve` in its own process; the policy changed by another process while it runs."""
    import urllib.parse
    import urllib.request

    from webpages import serving

    _turns(sync_store(), "s", 1, 40)
    with serving(store_url) as (base, _):
        chart = base + "/chart?" + urllib.parse.urlencode({"session": "s"})
        with urllib.request.urlopen(chart, timeout=10) as page:
            assert 'id="budget"' not in page.read().decode()
        _cli(store_url, "policy", "--budget", "500", "--clear-at-least", "100", "--yes")
        with urllib.request.urlopen(chart, timeout=10) as page:
            assert "budget, 500 tokens" in page.read().decode()
        rebinding = urllib.request.Request(base + "/", headers={"Host": "rebound.example:8000"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(rebinding, timeout=10)
        assert refused.value.code == 400


def test_the_chart_draws_each_budget_where_it_applied_and_marks_the_change(sync_store):
    import re

    store = sync_store()
    _turns(store, "s", 1, 30)
    store.rebuild(policy=Policy(budget=2000, clear_at_least=500))
    _turns(store, "s", 31, 30)
    store.rebuild(policy=BUDGET)
    _turns(store, "s", 61, 10)
    history = store.history("s")
    generations = [p.generation for p in history]
    assert generations == sorted(generations) and len(set(generations)) == 3
    assert store.policies()[generations[-1]] == BUDGET and store.policies()[generations[0]] == Policy()
    page = TestClient(create_app(store), base_url="http://127.0.0.1:8000").get("/chart", params={"session": "s"}).text
    drawn = re.findall(
        r'<line class="budget"(?: id="budget")? x1="([\d.]+)" x2="([\d.]+)" .*? data-budget="(\d+)"', page
    )
    assert [int(b) for _, _, b in drawn] == [2000, 500]  # none before the first change: there was no budget
    changes = re.findall(r'<line class="policy-change" .*? data-turn="(\d+)"><title>turn \d+: ([^<]+)</title>', page)
    assert [int(turn) for turn, _ in changes] == [30, 60]  # each rebuild recorded the last point of its turn
    assert "no budget → a budget of 2,000" in changes[0][1] and "2,000 → a budget of 500" in changes[1][1]
    events = [int(t) for t in re.findall(r'<line class="event" [^>]*data-turn="(\d+)"', page)]
    assert 30 not in events and 60 not in events  # what a rebuild counted afresh is not drawn as removal events
    assert float(drawn[0][1]) == float(drawn[1][0])  # the second budget starts where the first ends
