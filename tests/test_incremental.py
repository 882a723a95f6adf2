"""The incremental contract: after every append the stored state equals a batch rerun.

Sessions come from `helpers.sessions` (forward references, cycles,
re-definitions, duplicates of superseded copies, TTLs) cut into batches of
random sizes, on both backends and in both restore modes. Shrinking is on, so
a failure prints the smallest session that breaks it.
"""

from __future__ import annotations

import itertools

import pytest
import sqlalchemy as sa
from helpers import POLICIES, batches, sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import Message, prune
from prunestore.sql.schema import MESSAGES

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
    prompt: dict[str, Message] = {}  # a client that keeps its prompt from deltas and messages(ids=...)
    verdicts_before: dict[str, str] = {}
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
        newly = [i for i, v in expected.verdicts.items() if v == "evicted" and verdicts_before.get(i) != "evicted"]
        assert delta.evicted == tuple(newly)  # in append order: the verdicts' order
        verdicts_before = expected.verdicts
        live = store.live(session)  # after this store's own append: the live cache's patched path
        assert [m.id for m in live] == [m.id for m in expected.live]
        assert live == [m for m in stored if m.live]  # every field, verdict and base too

        for message_id in delta.live_removed:
            del prompt[message_id]
        prompt.update((m.id, m.to_message()) for m in store.messages(session, ids=delta.live_added))
        order = {m.id: i for i, m in enumerate(appended)}
        assert sorted(prompt.values(), key=lambda m: order[m.id]) == [m.to_message() for m in live]

        # The session's totals, and the history point this append left, are those of the batch rerun.
        tokens = sum(m.tokens for m in stored)
        live_tokens = sum(m.tokens for m in stored if m.live)
        summary = store.summary(session)
        assert (summary.messages, summary.tokens, summary.live_tokens) == (len(stored), tokens, live_tokens)
        if delta.appended:
            point = store.history(session)[-1]
            assert (point.seq, point.turn, point.tokens, point.live_tokens) == (
                len(stored),
                stored[-1].turn,
                tokens,
                live_tokens,
            )
    if ms:
        report = store.verify(session)
        assert report.ok, report.mismatches


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25)
@given(data=st.data())
def test_one_batch_equals_many_small_appends(open_store, policy, data):
    """Appending a session in one transaction or message by message gives the same rows.

    The whole session goes through the batch path of a first append
    (`audit.FirstAppend`), the other through the incremental maintainer, so
    this compares the two writers row by row, index rows included, without
    going through `verify` (which derives its index rows like the batch path).
    """
    store = open_store(policy)
    ms = data.draw(sessions(min_size=1, max_size=20))
    whole, single = f"w{next(_names)}", f"o{next(_names)}"
    store.append(whole, ms)
    for m in ms:
        store.append(single, m)
    assert stored_rows(store, whole) == stored_rows(store, single)
    assert store.verify().ok
    assert len(store.history(whole)) == 1
    assert [p.seq for p in store.history(single)] == list(range(1, len(ms) + 1))
    assert store.history(whole)[-1] == store.history(single)[-1]


def stored_rows(store, session: str) -> dict:
    """Every stored row of a session, by table, without the session's key, the undo journal and `held`."""
    with store.engine.connect() as conn:
        sid, *session_row = conn.execute(
            sa.text(
                "SELECT session_id, current_turn, last_seq, prompt_tokens, pending_tokens, events, tokens, live_tokens "
                "FROM prunestore_sessions WHERE name = :n"
            ),
            {"n": session},
        ).one()
        # `held` marks prompt messages below the session's cursor, where its last eviction walk stopped: one
        # walk over a batch and a walk per append may stop at different places, both valid (verify checks each).
        # The history columns record each append's end, which is what differs between the two.
        left_out = (
            "session_id",
            "undo",
            "held",
            "tokens_after",
            "live_tokens_after",
            "events_after",
            "generation_after",
        )
        columns = [c.name for c in MESSAGES.columns if c.name not in left_out]

        def rows(sql: str) -> list[tuple]:
            return [tuple(r) for r in conn.execute(sa.text(sql), {"sid": sid})]

        return {
            "session": tuple(session_row),
            "messages": rows(
                f"SELECT {', '.join(columns)} FROM prunestore_messages WHERE session_id = :sid ORDER BY seq"
            ),
            # a key row nothing defines or counts means the same as no row; the maintainer may leave one behind
            "keys": rows(
                "SELECT key, definer_seq, support, kept_refs, evicted_refs FROM prunestore_keys "
                "WHERE session_id = :sid AND (definer_seq IS NOT NULL OR support <> 0 OR kept_refs <> 0) ORDER BY key"
            ),
            "holders": rows(
                "SELECT content_hash, seq FROM prunestore_hash_holders WHERE session_id = :sid ORDER BY 1, 2"
            ),
        }


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
