"""The incremental contract: after every append the stored state equals a batch rerun.

Sessions come from `helpers.sessions` (forward references, cycles,
re-definitions, duplicates of superseded copies, TTLs) cut into batches of
random sizes, on both backends and in both restore modes. Shrinking is on, so
a failure prints the smallest session that breaks it.
"""

from __future__ import annotations

import itertools

import pytest
from helpers import POLICIES, batches, sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import Message, prune

BOTH_APIS = True  # these tests run on PruneStore and on AsyncPruneStore (see conftest)

_names = itertools.count()


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=60)
@given(data=st.data())
def test_stored_verdicts_equal_batch_after_every_append(open_store, policy, data):
    store = open_store(policy)
    ms = data.draw(sessions(max_size=24))
    session = f"s{next(_names)}"
    appended: list[Message] = []
    client: set[str] = set()  # a client that only applies deltas
    for batch in data.draw(batches(ms)):
        delta = store.append(session, batch)
        appended.extend(batch)
        expected = prune(appended, policy=policy)
        stored = store.messages(session)
        assert [m.id for m in stored] == [m.id for m in appended]
        assert {m.id: m.verdict for m in stored} == expected.verdicts
        assert {m.id: m.base for m in stored} == expected.base
        assert [m.seq for m in stored] == list(range(1, len(appended) + 1))

        new_ids = {m.id for m in batch}
        assert not set(delta.live_added) & set(delta.live_removed)
        assert set(delta.live_removed) <= client
        assert not (set(delta.live_added) - new_ids) & client
        client = (client | set(delta.live_added)) - set(delta.live_removed)
        assert client == {m.id for m in expected.live}
        assert [m.id for m in store.live(session)] == [m.id for m in expected.live]
    if ms:
        report = store.verify(session)
        assert report.ok, report.mismatches


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25)
@given(data=st.data())
def test_one_batch_equals_many_small_appends(open_store, policy, data):
    """Appending a session in one transaction or message by message gives the same state."""
    store = open_store(policy)
    ms = data.draw(sessions(min_size=1, max_size=20))
    whole, single = f"w{next(_names)}", f"o{next(_names)}"
    store.append(whole, ms)
    for m in ms:
        store.append(single, m)
    assert [(m.id, m.verdict) for m in store.messages(whole)] == [(m.id, m.verdict) for m in store.messages(single)]
    assert store.verify().ok


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25)
@given(data=st.data())
def test_rebuild_gives_the_same_state(open_store, policy, data):
    store = open_store(policy)
    ms = data.draw(sessions(min_size=1, max_size=20))
    session = f"r{next(_names)}"
    for batch in data.draw(batches(ms)):
        store.append(session, batch)
    before = [(m.id, m.verdict, m.base) for m in store.messages(session)]
    store.rebuild(session)
    assert [(m.id, m.verdict, m.base) for m in store.messages(session)] == before
    assert store.verify(session).ok
