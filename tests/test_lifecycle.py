"""fork and truncate: the state they leave equals a batch over the prefix, and appends go on from it.

Sessions come from `helpers.sessions`, appended in random batches (so a cut
can fall inside a batch), on both backends and in both restore modes.
"""

from __future__ import annotations

import itertools

import pytest
import sqlalchemy as sa
from helpers import POLICIES, batches, sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import (
    Message,
    MessageNotFoundError,
    Policy,
    PruneStore,
    SessionExistsError,
    SessionNotFoundError,
    prune,
)
from prunestore.sql import db
from prunestore.sql.schema import metadata

BOTH_APIS = True  # these tests run on PruneStore and on AsyncPruneStore (see conftest)

_names = itertools.count()


def assert_batch_state(store: PruneStore, session: str, messages: list[Message], policy: Policy) -> None:
    """The stored session holds exactly these messages, with the verdicts `prune` gives them."""
    expected = prune(messages, policy=policy)
    stored = store.messages(session)
    assert [m.id for m in stored] == [m.id for m in messages]
    assert [m.seq for m in stored] == list(range(1, len(messages) + 1))
    assert {m.id: (m.base, m.verdict) for m in stored} == {
        m.id: (expected.base[m.id], expected.verdicts[m.id]) for m in messages
    }
    report = store.verify(session)
    assert report.ok, report.mismatches
    # The session's totals are those of its messages, and the history's last point is the state now.
    summary = store.summary(session)
    live = {m.id for m in expected.live}
    totals = (len(messages), sum(m.tokens for m in stored), sum(m.tokens for m in stored if m.id in live))
    assert (summary.messages, summary.tokens, summary.live_tokens) == totals
    history = store.history(session)
    assert [p.seq for p in history] == sorted({p.seq for p in history})
    if messages:
        assert (history[-1].seq, history[-1].tokens, history[-1].live_tokens) == totals
        assert history[-1].events == summary.events
    else:
        assert history == []


def append_in_batches(store: PruneStore, session: str, data, messages: list[Message]) -> None:
    for batch in data.draw(batches(messages)):
        store.append(session, batch)


def filled_session(store: PruneStore, data, max_size: int) -> tuple[str, list[Message]]:
    """A new session holding a generated list of messages, appended in random batches."""
    ms = data.draw(sessions(min_size=1, max_size=max_size))
    session = f"s{next(_names)}"
    append_in_batches(store, session, data, ms)
    return session, ms


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=40)
@given(data=st.data())
def test_truncate_equals_batch_over_the_prefix_and_appends_go_on(open_store, policy, data):
    store = open_store(policy)
    session, ms = filled_session(store, data, 24)
    for _ in range(2):  # truncate, append the rest again, truncate elsewhere
        cut = data.draw(st.integers(0, len(ms) - 1), label="cut")
        client = {m.id for m in store.live(session)}
        before = {m.id: m.verdict for m in store.messages(session)}
        delta = store.truncate(session, ms[cut].id)
        prefix = ms[: cut + 1]
        assert_batch_state(store, session, prefix, policy)
        client = (client | set(delta.live_added)) - set(delta.live_removed)
        assert client == {m.id for m in store.live(session)}
        after = {m.id: m.verdict for m in store.messages(session)}
        assert delta.evicted == tuple(i for i, v in after.items() if v == "evicted" and before[i] != "evicted")
        append_in_batches(store, session, data, ms[cut + 1 :])
        assert_batch_state(store, session, ms, policy)


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25)
@given(data=st.data())
def test_pop_takes_the_last_message_back_down_to_empty(open_store, policy, data):
    """Each pop returns the last message and leaves the batch state of what remains; appends go on from it."""
    store = open_store(policy)
    session, ms = filled_session(store, data, 16)
    for n in range(len(ms), 0, -1):
        popped = store.pop(session)
        assert popped is not None and popped.to_message() == ms[n - 1]
        assert_batch_state(store, session, ms[: n - 1], policy)
        assert [m.id for m in store.live(session)] == [m.id for m in prune(ms[: n - 1], policy=policy).live]
    assert store.pop(session) is None and store.pop("never-written") is None
    append_in_batches(store, session, data, ms)
    assert_batch_state(store, session, ms, policy)


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25)
@given(data=st.data())
def test_truncate_before_a_rebuild_recomputes_the_prefix(open_store, policy, data):
    """History written before a rebuild has no undo journal: the cut falls back to a batch, then journals again."""
    store = open_store(policy)
    ms = data.draw(sessions(min_size=2, max_size=20))
    split = data.draw(st.integers(1, len(ms) - 1), label="split")
    session = f"b{next(_names)}"
    append_in_batches(store, session, data, ms[:split])
    store.rebuild(session)
    append_in_batches(store, session, data, ms[split:])
    cut = data.draw(st.integers(0, len(ms) - 1), label="cut")
    store.truncate(session, ms[cut].id)
    assert_batch_state(store, session, ms[: cut + 1], policy)
    append_in_batches(store, session, data, ms[cut + 1 :])
    later = data.draw(st.integers(cut, len(ms) - 1), label="later cut")
    store.truncate(session, ms[later].id)
    assert_batch_state(store, session, ms[: later + 1], policy)


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25)
@given(data=st.data())
def test_fork_equals_batch_over_the_prefix_and_leaves_the_source(open_store, policy, data):
    store = open_store(policy)
    ms = data.draw(sessions(min_size=1, max_size=24))
    source, branch = f"f{next(_names)}", f"g{next(_names)}"
    append_in_batches(store, source, data, ms)
    before = [(m.id, m.verdict) for m in store.messages(source)]
    at = data.draw(st.integers(0, len(ms) - 1), label="at")
    store.fork(source, ms[at].id, branch)
    assert_batch_state(store, branch, ms[: at + 1], policy)
    assert [(m.id, m.verdict) for m in store.messages(source)] == before
    append_in_batches(store, branch, data, ms[at + 1 :])
    assert_batch_state(store, branch, ms, policy)
    store.truncate(branch, ms[at].id)  # before the fork: no journal, a batch
    assert_batch_state(store, branch, ms[: at + 1], policy)


def test_truncate_of_the_last_turn_reports_what_moved(store):
    """Cutting a turn off brings back the tool output it had superseded (the statements' plans: test_query_plans)."""
    session = "long"
    for turn in range(300):
        store.append(
            session,
            [
                Message(f"u{turn}", "user", f"question {turn}", turn),
                Message(f"t{turn}", "tool_output", f"result {turn % 7}", turn, tool_key="search"),
            ],
        )
    before = _row_count(store)
    delta = store.truncate(session, "t298")
    assert delta.live_removed == ("u299", "t299") and delta.live_added == ("t298",)
    assert _row_count(store) == before - 2
    assert_batch_state(store, session, [m.to_message() for m in store.messages(session)], store.policy)


def _row_count(store: PruneStore) -> int:
    with store.engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM prunestore_messages")).scalar_one()


def test_fork_and_truncate_refuse_bad_names_and_leave_the_store_alone(store):
    store.append("s", [Message("a", "user", "hi", 0), Message("b", "assistant", "hello", 0)])
    store.append("other", Message("x", "user", "hey", 0))
    counts = _table_counts(store)
    with pytest.raises(SessionNotFoundError, match="nope"):
        store.truncate("nope", "a")
    with pytest.raises(MessageNotFoundError, match="after_message_id='zz'"):
        store.truncate("s", "zz")
    with pytest.raises(MessageNotFoundError, match="at_message_id='x'"):
        store.fork("s", "x", "new")  # an id of another session
    with pytest.raises(SessionExistsError, match="new_session='other'"):
        store.fork("s", "a", "other")
    with pytest.raises(SessionExistsError, match="'s'"):
        store.fork("s", "a", "s")
    assert _table_counts(store) == counts
    assert store.truncate("s", "b") == store.truncate("s", "b")  # a cut at the end changes nothing


def _table_counts(store: PruneStore) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {
            table.name: conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            for table in metadata.sorted_tables
        }


@pytest.mark.plain_tables
def test_truncate_survives_a_migration_from_before_the_journal(store_url):
    """A session written before revision 0002 has no journal; truncate still gives the batch state."""
    policy = Policy()
    ms = [Message(f"m{i}", "user", f"note {i % 3}", i // 2) for i in range(10)]
    with PruneStore(store_url) as store:
        store.append("old", ms[:6])
    engine = sa.create_engine(store_url)
    try:
        db.downgrade(engine, "0001")
        db.upgrade(engine)
    finally:
        engine.dispose()
    with PruneStore(store_url) as store:
        store.append("old", ms[6:])
        store.truncate("old", "m7")  # journaled since the upgrade
        assert_batch_state(store, "old", ms[:8], policy)
        store.truncate("old", "m2")  # before it: a batch
        assert_batch_state(store, "old", ms[:3], policy)
