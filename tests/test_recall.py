"""Recall: the messages out of the prompt, by defined key, words and range, equal to a filter over `prune`."""

from __future__ import annotations

import itertools
import json

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from conftest import INDEXED
from helpers import KEYS, POLICIES, TEXTS, sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import InvalidArgumentError, Message, MessageNotFoundError, PruneStore, SessionNotFoundError, prune
from prunestore.cli import main
from prunestore.model import LIVE_VERDICTS, effective_defines
from prunestore.sql import partitions, recall_index

BOTH_APIS = True
RECALL_INDEX = True  # on SQLite, also through the recall index

_names = itertools.count()


def expected_recall(messages, policy, key, text, first, last, limit):
    """The definition in docs/api.md, from the batch pruner's verdicts."""
    verdicts = prune(messages, policy=policy).verdicts
    index = {m.id: i for i, m in enumerate(messages)}
    low = 0 if first is None else index[first]
    high = len(messages) - 1 if last is None else index[last]
    words = text.casefold().split() if text is not None else []
    found = [
        m
        for m in messages[low : high + 1]
        if verdicts[m.id] not in LIVE_VERDICTS
        and (key is None or key in effective_defines(m))
        and all(w in m.content.casefold() for w in words)
    ]
    return [m.id for m in found[-limit:]]


@pytest.mark.parametrize("policy", [POLICIES[0], POLICIES[3]])
@settings(max_examples=15)
@given(data=st.data())
def test_recall_is_the_latest_matches_out_of_the_prompt(open_store, policy, data):
    store = open_store(policy)
    messages = data.draw(sessions(min_size=1, max_size=24))
    session = f"r{next(_names)}"
    store.append(session, messages)
    ids = [m.id for m in messages]
    for _ in range(4):
        key = data.draw(st.sampled_from([None, *KEYS]))
        text = data.draw(st.sampled_from([None, *TEXTS, TEXTS[0].upper(), "  " + TEXTS[-1].split()[-1]]))
        first = data.draw(st.sampled_from([None, *ids]))
        last = data.draw(st.sampled_from([None, *ids[ids.index(first) if first else 0 :]]))
        limit = data.draw(st.integers(1, 30))
        got = store.recall(session, key=key, text=text, first=first, last=last, limit=limit)
        assert [m.id for m in got] == expected_recall(messages, policy, key, text, first, last, limit)
        stored = {m.id: m for m in store.messages(session)}
        assert got == [stored[m.id] for m in got]  # whole stored messages, verdicts and all


def test_recall_reads_back_past_many_chunks(open_store):
    """A match far behind hundreds of non-matching messages is found, and only the latest `limit` come."""
    store = open_store()
    old = [
        Message(id=f"f{i}", role="tool_output", content=f"fact {i} DEFINE:k{i}", turn=0, tool_key="t") for i in (0, 2)
    ]
    filler = [Message(id=f"x{i}", role="tool_output", content=f"reading {i}", turn=0, tool_key="t") for i in range(700)]
    store.append("s", [*old, *filler, Message(id="end", role="user", content="go on", turn=1)])
    assert [m.id for m in store.recall("s", key="k0")] == ["f0"]
    assert [m.id for m in store.recall("s", text="FACT 0")] == ["f0"]
    assert [m.id for m in store.recall("s", text="fact")] == ["f0", "f2"]
    assert [m.id for m in store.recall("s", limit=3)] == ["x696", "x697", "x698"]  # x699 is the live holder
    assert store.recall("s", key="k1") == []
    assert [m.id for m in store.recall("s", text="reading", first="x10", last="x12")] == ["x10", "x11", "x12"]


def test_recall_refuses_bad_arguments_by_name(store):
    store.append("s", Message(id="a", role="user", content="hello", turn=0))
    for kwargs, field in [
        ({"key": "has space"}, "key="),
        ({"text": "   "}, "text="),
        ({"text": 3}, "text="),
        ({"limit": 0}, "limit="),
        ({"limit": True}, "limit="),
    ]:
        with pytest.raises(InvalidArgumentError, match=field):
            store.recall("s", **kwargs)
    with pytest.raises(MessageNotFoundError, match="first"):
        store.recall("s", first="nope")
    with pytest.raises(SessionNotFoundError):
        store.recall("nobody")


def test_the_recall_command_prints_the_store_s_answer(store_url, tmp_path):
    with PruneStore(store_url) as store:
        store.append(
            "s", [Message(id=f"t{i}", role="tool_output", content=f"price {i}", turn=i, tool_key="p") for i in range(5)]
        )
        expected = [m.id for m in store.recall("s", text="price", limit=2)]
    runner = CliRunner()
    result = runner.invoke(main, ["--db", store_url, "recall", "s", "--text", "PRICE", "--limit", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert [m["id"] for m in json.loads(result.output)] == expected == ["t2", "t3"]
    result = runner.invoke(main, ["--db", store_url, "recall", "s", "--key", "no key"])
    assert result.exit_code == 2 and "key='no key'" in result.output


def test_words_match_with_case_folded_as_python_folds_it(store):
    """The backends' own case rules never narrow a match: non-ASCII and NUL-bearing texts match as casefold says."""
    texts = ["Die Straße war lang", "\u212aelvin scale", "ΣΊΣΥΦΟΣ rolled", "nul\x00 inside NUL", "plain Kelvin"]
    store.append("s", [Message(f"m{i}", "tool_output", t, 0, tool_key="same") for i, t in enumerate(texts)])
    store.append("s", Message("last", "tool_output", "the latest", 1, tool_key="same"))
    for words, expected in [
        ("STRASSE", ["m0"]),
        ("kelvin", ["m1", "m4"]),
        ("σίσυφος", ["m2"]),
        ("nul inside", ["m3"]),
        ("\x00", ["m3"]),
        ("scale kelvin", ["m1"]),
        ("missing", []),
    ]:
        assert [m.id for m in store.recall("s", text=words)] == expected, words


def test_words_holding_like_wildcards_match_as_written(store):
    """%, _ and \\ in a word are characters like any other, on every backend."""
    texts = ["100% sure", "100 percent", "snake_case", "snakeXcase", "C:\\temp\\new", "C:tempnew", "50%_\\ mix"]
    store.append("s", [Message(f"m{i}", "tool_output", t, 0, tool_key="same") for i, t in enumerate(texts)])
    store.append("s", Message("last", "tool_output", "the latest", 1, tool_key="same"))
    for words, expected in [
        ("100%", ["m0"]),
        ("e_c", ["m2"]),
        ("\\temp\\", ["m4"]),
        ("%_\\", ["m6"]),
        ("%", ["m0", "m6"]),
        ("_", ["m2", "m6"]),
    ]:
        assert [m.id for m in store.recall("s", text=words)] == expected, words


def _expected_from_stored(store, session, text, limit=10):
    words = text.casefold().split()
    found = [
        m.id
        for m in store.messages(session)
        if m.verdict not in LIVE_VERDICTS and all(w in m.content.casefold() for w in words)
    ]
    return found[-limit:]


@settings(max_examples=12)
@given(data=st.data())
def test_recall_follows_every_change_to_the_sessions(open_store, data):
    """Appends in batches, truncate, fork, erase and removal: recall by words answers from what is stored now.

    On SQLite it answers through the recall index, which `verify` also compares with each message's text.
    """
    store = open_store(POLICIES[3].values[0])
    messages = data.draw(sessions(min_size=2, max_size=24))
    n = next(_names)
    a, b, c = f"a{n}", f"b{n}", f"c{n}"
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(messages) - 1), max_size=3))))
    for lo, hi in itertools.pairwise([0, *cuts, len(messages)]):
        store.append(a, messages[lo:hi])
    store.append(b, messages)  # the same text in another session: never an answer about this one
    ids = [m.id for m in messages]
    live_sessions = [a, b]
    for step in data.draw(st.lists(st.sampled_from(["truncate", "fork", "erase", "delete"]), max_size=4)):
        present = [m.id for m in store.messages(a)]
        if step == "truncate" and len(present) > 1:
            store.truncate(a, data.draw(st.sampled_from(present[:-1])))
        elif step == "fork" and c not in live_sessions:
            store.fork(a, data.draw(st.sampled_from(present)), c)
            live_sessions.append(c)
        elif step == "erase":
            store.erase(a, data.draw(st.lists(st.sampled_from(present), min_size=1, max_size=3, unique=True)))
        elif step == "delete" and b in live_sessions:
            store.delete_session(b)
            live_sessions.remove(b)
        for session in live_sessions:
            for text in [*TEXTS, "pass", "a", "SSAGE ALPH"]:
                got = [m.id for m in store.recall(session, text=text)]
                assert got == _expected_from_stored(store, session, text), (session, text)
        assert store.verify().ok, store.verify().mismatches
    assert set(ids) >= {m.id for m in store.messages(a)}


@pytest.mark.parametrize("backend", INDEXED[:1], indirect=True)
def test_verify_finds_a_damaged_recall_index_and_rebuild_repairs_it(store_url):
    with PruneStore(store_url) as store:
        store.append(
            "s", [Message(f"t{i}", "tool_output", f"reading {i} of the zebra", i, tool_key="r") for i in range(5)]
        )
        store.append("other", Message("o", "user", "zebra crossing", 0))
        assert [m.id for m in store.recall("s", text="ZEBRA", limit=2)] == ["t2", "t3"]
        with store.engine.begin() as conn:  # the entries of t3, and one nothing holds, as by a lost write
            conn.execute(sa.text("DELETE FROM prunestore_recall WHERE text = 'reading 3 of the zebra'"))
            conn.execute(sa.text("UPDATE prunestore_recall SET text = 'zebra' WHERE text = 'reading 1 of the zebra'"))
        assert [m.id for m in store.recall("s", text="ZEBRA", limit=2)] == ["t1", "t2"]  # answered by the index
        found = sorted((m.session, m.what, m.subject, m.stored, m.expected) for m in store.verify().mismatches)
        assert found == [
            ("s", "recall", "t1", "zebra", "reading 1 of the zebra"),
            ("s", "recall", "t3", None, "reading 3 of the zebra"),
        ]
        store.rebuild("s")
        assert store.verify().ok
        assert [m.id for m in store.recall("s", text="ZEBRA", limit=2)] == ["t2", "t3"]


def test_the_recall_index_command_makes_and_drops_it_and_recall_answers_alike(store_url, backend):
    with PruneStore(store_url) as store:
        store.append("s", [Message(f"t{i}", "tool_output", f"price {i} Straße", i, tool_key="p") for i in range(5)])
        expected = [m.id for m in store.recall("s", text="PRICE STRASSE", limit=3)]
        assert expected == ["t1", "t2", "t3"]
        runner = CliRunner()
        indexed = backend.endswith("indexed")
        status = ["--db", store_url, "db", "recall-index", "--status"]
        result = runner.invoke(main, [*status, "--json"])
        assert json.loads(result.output) == {"recall_index": indexed, "changed": False}
        result = runner.invoke(main, ["--db", store_url, "db", "recall-index", "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output) == {"recall_index": True, "changed": not indexed}
        assert runner.invoke(main, status).output == "the store has a recall index\n"
        store.append("s", Message("t5", "tool_output", "price 5 STRASSE", 5, tool_key="p"))  # an open store keeps it
        assert [m.id for m in store.recall("s", text="PRICE STRASSE", limit=3)] == ["t2", "t3", "t4"]
        assert [m.id for m in store.recall("s", text="price 4", limit=3)] == ["t4"]
        assert store.verify().ok
        result = runner.invoke(main, ["--db", store_url, "db", "recall-index", "--drop"])
        assert result.exit_code == 0 and result.output == "the store has no recall index\n"
        result = runner.invoke(main, ["--db", store_url, "db", "recall-index", "--drop"])
        assert result.output == "the store has no recall index (it had none)\n"
        assert runner.invoke(main, status).output == "the store has no recall index\n"
        result = runner.invoke(main, [*status, "--drop"])
        assert result.exit_code == 2 and "--drop and --status" in result.output
        store.append("s", Message("t6", "tool_output", "price 6 strasse", 6, tool_key="p"))
        assert [m.id for m in store.recall("s", text="PRICE STRASSE", limit=3)] == ["t3", "t4", "t5"]


def test_asking_whether_a_missing_store_has_the_recall_index_makes_no_store(tmp_path):
    path = tmp_path / "missing.db"
    result = CliRunner().invoke(main, ["--db", f"sqlite:///{path}", "db", "recall-index", "--status"])
    assert result.exit_code == 2 and "no such file, so no store to read" in result.output, result.output
    assert not path.exists()


@pytest.mark.parametrize("backend", INDEXED[1:], indirect=True)
def test_partitioning_a_postgresql_store_keeps_its_recall_index(store_url):
    with PruneStore(store_url) as store:
        store.append(
            "s", [Message(f"t{i}", "tool_output", f"reading {i} of the zebra", i, tool_key="r") for i in range(4)]
        )
        before = [m.id for m in store.recall("s", text="ZEBRA", limit=2)]
        partitions.partition(store.engine, 2)
        with store.engine.connect() as conn:
            found = conn.execute(sa.text("SELECT to_regclass(:i) IS NOT NULL"), {"i": recall_index.PG_TRIGRAMS})
            assert found.scalar_one()
        assert [m.id for m in store.recall("s", text="ZEBRA", limit=2)] == before == ["t1", "t2"]
