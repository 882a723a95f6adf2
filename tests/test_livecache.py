"""The live cache: `live()` from memory must always be what a cold read of the database gives.

Store `a` keeps its cache; other stores write behind its back (appends,
truncates, rebuilds, erasures, a deleted and re-created session), and after
every step `a.live()` and `a.view()` must equal the batch oracle and, field by
field, an uncached read. Another store's appends are followed through the
undo journal; any other write makes the next read a full one.
"""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import threading

import pytest
import sqlalchemy as sa
from helpers import POLICIES, batches, sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import Message, PruneStore, PruneStoreError, livecache, prune
from prunestore.integrations.openai_chat import OPENAI_CHAT
from prunestore.livecache import LiveCache
from prunestore.showcase import workloads
from prunestore.sql.rows import FULL_COLUMNS, stored_message
from prunestore.views import View

_names = itertools.count()
_FULL_READ = "ORDER BY seq"  # of the live-row reads, only the cold read of a whole list sorts in SQL


@pytest.fixture
def stores(open_store, policy):
    """Store `a` and `b` with the live cache, and `cold` without it; opened once for all examples."""
    return open_store(policy), open_store(policy), open_store(policy, live_cache_bytes=0)


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=40)
@given(data=st.data())
def test_live_follows_writes_by_itself_and_by_others(stores, policy, data):
    a, b, cold = stores
    session = f"s{next(_names)}"
    appended: list[Message] = []
    for batch in data.draw(batches(data.draw(sessions(max_size=20)))):
        writer = data.draw(st.sampled_from([a, a, b]))
        step = data.draw(st.sampled_from(["append"] * 4 + ["truncate", "rebuild", "recreate", "erase"]))
        if step == "truncate" and appended:
            cut = data.draw(st.integers(0, len(appended) - 1))
            writer.truncate(session, appended[cut].id)
            del appended[cut + 1 :]
        elif step == "rebuild" and appended:
            writer.rebuild(session)
        elif step == "recreate" and appended:
            writer.delete_session(session)
            appended = []
        elif step == "erase" and appended:
            gone = data.draw(st.sampled_from(appended)).id
            writer.erase(session, [gone])
            appended = [Message(m.id, "erased", "", m.turn, at=m.at) if m.id == gone else m for m in appended]
        writer.append(session, batch)
        appended.extend(batch)

        expected = [m.id for m in prune(appended, policy=policy).live]
        for _ in range(data.draw(st.integers(1, 2))):  # a second call takes the cached list as it is
            live = a.live(session)
            assert [m.id for m in live] == expected
            assert live == cold.live(session) == [m for m in cold.messages(session) if m.live]
            assert a.view(session, OPENAI_CHAT) == cold.view(session, OPENAI_CHAT)
            check_bookkeeping(a.live_cache)


def check_bookkeeping(cache: LiveCache) -> None:
    """What entries record of their rows (size, rows with metadata, seq order) is what the rows say."""
    entries = list(cache._entries.values())
    assert cache.size == sum(e.size for e in entries)
    for entry in entries:
        if isinstance(entry, livecache.CachedView):  # prompts in a framework's objects keep no rows
            continue
        assert entry.size == livecache._size(entry.rows)
        assert entry.shared == [stored_message(r) for r in entry.rows]
        assert [r[0] for r in entry.rows] == sorted({r[0] for r in entry.rows})


def _agent(turns: int, seed: int = 3) -> list[list[Message]]:
    return list(workloads.generate("agent", turns, seed=seed).by_turn())


def test_a_read_after_its_own_append_reads_only_the_rows_the_append_wrote(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with PruneStore(url) as store, PruneStore(url) as other:
        statements: list[str] = []
        sa.event.listen(store.engine, "connect", lambda dbapi, _record: dbapi.set_trace_callback(statements.append))
        store.engine.dispose()
        turns = _agent(40)
        for turn in turns[:30]:
            store.append("s", turn)

        def reads() -> tuple[int, int]:
            selects = [s for s in statements if s.startswith("SELECT") and "prunestore_messages" in s]
            live_rows = [s for s in selects if "verdict IN ('kept', 'restored', 'pending')" in s]
            return sum(_FULL_READ in s for s in live_rows), sum(" seq IN " in s for s in live_rows)

        statements.clear()
        store.live("s")
        assert reads() == (1, 0)
        for turn in turns[30:35]:
            statements.clear()
            store.append("s", turn)
            live = store.live("s")
            assert reads() == (0, 1)
            assert live == [m for m in store.messages("s") if m.live]
        statements.clear()
        assert store.live("s") == live  # nothing written since: no message row is read
        assert reads() == (0, 0)

        for turn in turns[35:38]:  # another store's appends: their journal says what to read
            other.append("s", turn)
        statements.clear()
        assert store.live("s") == other.live("s")
        assert reads() == (0, 0) and sum(" seq > " in s for s in statements) == 2  # the journal, then new rows

        other.rebuild("s")  # not an append: the next read is a full one
        statements.clear()
        assert store.live("s") == other.live("s")
        assert reads() == (1, 0)


def test_metadata_is_read_only_and_shared(store):
    """No caller can change what the next call returns; copies are ordinary, changeable values."""
    store.append("s", [Message(id="a", role="user", content="hello", turn=1, metadata={"tags": ["x"], "n": 1})])
    first = store.live("s")
    metadata = first[0].metadata
    for edit in (
        lambda: metadata["tags"].append("edited"),
        lambda: metadata.__setitem__("new", 1),
        lambda: metadata.update(n=2),
        lambda: metadata.pop("n"),
        lambda: metadata["tags"].__setitem__(0, "y"),
    ):
        with pytest.raises(TypeError, match="read-only"):
            edit()
    second = store.live("s")
    assert second[0] is first[0] and second[0].metadata == {"tags": ["x"], "n": 1}
    assert json.dumps(metadata) == '{"tags": ["x"], "n": 1}' and isinstance(metadata, dict)
    thawed = copy.deepcopy(metadata)
    thawed["tags"].append("mine")
    assert type(thawed) is dict and type(thawed["tags"]) is list and pickle.loads(pickle.dumps(metadata)) == metadata
    mutable = store.messages("s")[0].metadata
    mutable["new"] = 1  # messages() builds fresh, ordinary dicts
    assert store.live("s")[0].metadata == {"tags": ["x"], "n": 1}
    store.append("s", Message(id="b", role="user", content="again", turn=1, metadata=metadata))  # accepted as given


def test_the_cache_stays_within_its_bound_and_can_be_turned_off(open_store):
    turns = _agent(30)
    off = open_store(live_cache_bytes=0)
    for name in ("s1", "s2", "s3"):
        for turn in turns:
            off.append(name, turn)
    one = open_store()
    one.live("s1")
    bound = one.live_cache.size * 5 // 2  # room for two of the three (equal) sessions
    bounded = open_store(live_cache_bytes=bound)
    for name in ("s1", "s2", "s3", "s1"):
        assert bounded.live(name) == off.live(name)
        assert 0 < bounded.live_cache.size <= bound
    assert len(bounded.live_cache) == 2  # the least recently read went first
    bounded.live("s2")  # evicted: read again, and s3 goes instead
    assert len(bounded.live_cache) == 2
    tiny = open_store(live_cache_bytes=100)  # smaller than any session: read, never kept
    assert tiny.live("s1") == off.live("s1")
    assert len(tiny.live_cache) == 0 and len(off.live_cache) == 0


@pytest.mark.parametrize("value", [-1, 1.5, "64MB", True, None])
def test_a_bad_cache_size_is_refused(tmp_path, value):
    with pytest.raises(PruneStoreError, match="live_cache_bytes"):
        PruneStore(f"sqlite:///{tmp_path / 'store.db'}", live_cache_bytes=value)


def test_a_session_without_a_stamp_is_read_uncached_until_its_next_write(store):
    """Sessions written before revision 0003 have no stamp."""
    turns = _agent(10)
    for turn in turns[:-1]:
        store.append("s", turn)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE prunestore_sessions SET stamp = NULL"))
    store.live_cache.forget()
    expected = [m for m in store.messages("s") if m.live]
    assert store.live("s") == expected and len(store.live_cache) == 0
    store.append("s", turns[-1])
    assert store.live("s") == [m for m in store.messages("s") if m.live]
    assert len(store.live_cache) == 1


@pytest.mark.parametrize("same_store", [True, False], ids=["own-writes", "other-writer"])
def test_reads_racing_appends_see_one_committed_state(open_store, same_store):
    """Each live list read while another thread appends is the live list after some prefix of the appends."""
    reader = open_store()
    writer = reader if same_store else open_store()
    turns = _agent(25, seed=7)
    messages = [m for turn in turns for m in turn]
    states, done = {(): None}, [0]
    for turn in turns:
        done[0] += len(turn)
        states[tuple(m.id for m in prune(messages[: done[0]]).live)] = None
    seen = _read_while_appending(lambda: tuple(m.id for m in reader.live("s")), writer, turns, threads=1)
    assert seen and all(ids in states for ids in seen)
    assert reader.live("s") == [m for m in writer.messages("s") if m.live]


@pytest.mark.parametrize("same_store", [True, False], ids=["one-store", "two-stores"])
def test_views_read_by_threads_racing_appends_are_each_a_committed_state(open_store, same_store):
    """Two threads read one view while appends go on: each prompt read is the one after some prefix."""
    reader, oracle = open_store(), open_store(live_cache_bytes=0)
    writer = reader if same_store else open_store()
    turns = _agent(25, seed=11)
    states = {json.dumps([])}
    for turn in turns:
        oracle.append("s", turn)
        states.add(json.dumps(oracle.view("s", OPENAI_CHAT)))
    seen = _read_while_appending(lambda: json.dumps(reader.view("s", OPENAI_CHAT)), writer, turns, threads=2)
    assert seen and all(prompt in states for prompt in seen)
    assert reader.view("s", OPENAI_CHAT) == oracle.view("s", OPENAI_CHAT)


def test_a_view_takes_a_patch_only_from_the_state_it_holds(store):
    """A thread that read an older state than the view holds must not mix its rows in: it is refused."""
    turns = _agent(6, seed=5)
    for turn in turns:
        store.append("s", turn)
    with store.engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(sa.text(f"SELECT {FULL_COLUMNS} FROM prunestore_messages ORDER BY seq"))]
    whole = View(OPENAI_CHAT, stamp=1)
    assert whole.apply(rows)
    view = View(OPENAI_CHAT, stamp=1)
    assert view.apply(rows[:5])
    assert view.apply(rows[5:], moves=(1, 2)) and view.stamp == 2
    assert view.prompt() == whole.prompt()
    assert view.apply(rows[5:], moves=(1, 2))  # already there: nothing more to do
    assert not view.apply(rows[:1], moves=(3, 4))  # from a state it does not hold
    assert view.stamp == 2 and view.prompt() == whole.prompt()


def _read_while_appending(read, writer, turns, threads: int) -> list:
    """What `read()` gave, called over and over by `threads` threads while `writer` appends the turns."""
    seen: list = []
    failures: list[Exception] = []

    def reading() -> None:
        while not stop.is_set():
            try:
                seen.append(read())
            except PruneStoreError as exc:  # before the first append commits
                if "no such session" not in str(exc):
                    failures.append(exc)

    stop = threading.Event()
    running = [threading.Thread(target=reading) for _ in range(threads)]
    for thread in running:
        thread.start()
    try:
        for turn in turns:
            writer.append("s", turn)
    finally:
        stop.set()
        for thread in running:
            thread.join()
    assert not failures
    return seen
