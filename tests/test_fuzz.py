"""Hostile input: every public call either succeeds or raises a `PruneStoreError`, and leaves nothing partial.

Values mix well-formed fields with wrong types, empty and large strings, lone
surrogates, NUL, SQL and parameter-style metacharacters, deep and non-finite
metadata, and turns far beyond 2**63. After each call the store verifies and,
when the call failed, every `prunestore_` table holds exactly what it held.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta, timezone

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import Message, Policy, PruneStore, PruneStoreError, prune
from prunestore.jsonl import parse_line
from prunestore.model import ROLES
from prunestore.sql.schema import metadata

NASTY_STRINGS = [
    "",
    " ",
    "'",
    '"',
    "\\",
    "'; DROP TABLE prunestore_messages; --",
    "%s",
    "%(sid)s",
    ":sid",
    "?",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "DEFINE:k REF:k",
    "e\u0301\U0001f600",
    "k" * 600,  # longer than a session name may be
    "x" * 5000,  # over the fuzz store's content limit
    "\U0001f600" * 1100,  # 1,100 characters, 4,400 bytes: over it only once encoded
    "\u00e9" * 2000,  # 4,000 bytes: under it
]

any_text = st.one_of(
    st.sampled_from(NASTY_STRINGS),
    st.text(st.characters(blacklist_categories=()), max_size=30),  # surrogates and controls included
    st.text(st.sampled_from("ab '\"%:?\\\x00"), min_size=1, max_size=10),
)
huge_ints = st.one_of(
    st.integers(-3, 40),
    st.sampled_from([2**63 - 1, 2**63, 2**64, -(2**63), 10**30]),
)
nested = st.recursive(
    st.one_of(st.none(), st.booleans(), huge_ints, st.floats(allow_nan=True, allow_infinity=True), any_text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(any_text, inner, max_size=3)),
    max_leaves=12,
)
deep = st.integers(1, 3000).map(lambda depth: json.loads("[" * depth + "]" * depth) if depth < 900 else _deep(depth))
anything = st.one_of(any_text, huge_ints, st.floats(), st.none(), st.booleans(), st.binary(max_size=5), nested)


def _deep(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _valid_or(valid, hostile, odds: int = 3):
    """Mostly a valid value, sometimes a hostile one, so calls get past the first check."""
    return st.one_of(*([valid] * odds), hostile)


@st.composite
def messages(draw, turn: int = 0, deep_metadata: bool = True):
    key_list = st.lists(_valid_or(st.sampled_from(["k", "user_settings"]), anything), max_size=3)
    fields = {
        "id": draw(_valid_or(st.text("abc", min_size=1, max_size=4), anything)),
        "role": draw(_valid_or(st.sampled_from(sorted(ROLES)), anything)),
        "content": draw(_valid_or(st.sampled_from(["hi", "DEFINE:k", "REF:k"]), anything)),
        "turn": draw(_valid_or(st.just(turn), huge_ints)),
    }
    for name, valid in (
        ("tool_key", st.sampled_from(["search", "sql"])),
        ("expires_after_turn", st.integers(turn, turn + 3)),
        ("defines", key_list.map(tuple)),
        ("refs", key_list),
        ("metadata", st.dictionaries(st.text(max_size=3), nested, max_size=3)),
        ("at", st.datetimes(timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=-7))]))),
    ):
        if draw(st.booleans()):
            hostile = st.one_of(anything, deep) if name == "metadata" and deep_metadata else anything
            hostile = st.one_of(hostile, st.datetimes()) if name == "at" else hostile  # naive: no offset
            fields[name] = draw(_valid_or(valid, hostile))
    return fields


@pytest.fixture
def fuzz_store(open_store) -> PruneStore:
    """One store per test (not per example: each open holds connections), emptied by `fresh`."""
    return open_store(max_content_bytes=4096, max_metadata_bytes=4096)


def fresh(store: PruneStore) -> PruneStore:
    """The store as new, so every example starts alike (hypothesis replays examples)."""
    for session in store.sessions():
        store.delete_session(session)
    store.rebuild(policy=Policy())
    return store


def table_counts(store: PruneStore) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {
            table.name: conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            for table in metadata.sorted_tables
        }


def attempt(store: PruneStore, call, *args) -> bool:
    """Run a public call; True when it succeeded. A failure must be a PruneStoreError and change nothing."""
    before = table_counts(store)
    try:
        call(*args)
    except PruneStoreError as exc:
        assert str(exc), "an error says what went wrong"
        assert table_counts(store) == before, f"{call.__name__} failed after writing"
        return False
    return True


@settings(max_examples=150)
@given(data=st.data())
def test_hostile_appends_either_succeed_or_raise_cleanly(fuzz_store, data):
    store = fresh(fuzz_store)
    appended: dict[str, list[Message]] = {}
    for turn in range(data.draw(st.integers(1, 4), label="rounds")):
        session = data.draw(_valid_or(st.sampled_from(["s", "t"]), anything), label="session")
        raw = data.draw(st.lists(messages(turn), min_size=1, max_size=3), label="messages")
        try:
            batch = [Message(**fields) for fields in raw]
        except PruneStoreError as exc:  # refused when the Message is built: nothing reached the store
            assert str(exc)
            continue
        except TypeError:
            continue  # a missing or unknown keyword is Python's own call error, before prunestore runs
        if attempt(store, store.append, session, batch):
            appended.setdefault(session, [])
            known = {m.id for m in appended[session]}
            for m in batch:  # a retry, in an earlier append or earlier in this batch, is stored once
                if m.id not in known:
                    known.add(m.id)
                    appended[session].append(m)
    report = store.verify()
    assert report.ok, report.mismatches
    for session, stored in appended.items():
        # What went in comes back out exactly, with the verdicts of a batch rerun.
        expected = prune(stored, policy=store.policy)
        assert [(m.id, m.content, m.metadata, m.verdict) for m in store.messages(session)] == [
            (m.id, m.content, m.metadata, expected.verdicts[m.id]) for m in stored
        ]


@settings(max_examples=100)
@given(
    session=anything,
    message_id=anything,
    other=anything,
    policy_roles=anything,
    restore=anything,
)
def test_hostile_arguments_to_every_other_call(fuzz_store, session, message_id, other, policy_roles, restore):
    store = fresh(fuzz_store)
    store.append("s", [Message("a", "user", "DEFINE:k", 0), Message("b", "tool_output", "x", 0, tool_key="t")])
    calls = [
        (store.live, session),
        (store.messages, session),
        (store.messages, "s", message_id),
        (store.messages, "s", [message_id]),
        (store.stats, session),
        (store.verify, session),
        (store.explain, session, message_id),
        (store.explain, "s", message_id),
        (store.rebuild, session),
        (store.truncate, session, message_id),
        (store.truncate, "s", message_id),
        (store.fork, "s", message_id, other),
        (store.fork, session, "a", other),
        (lambda: store.append_many({session: [Message("c", "user", "y", 1)]} if _hashable(session) else {}),),
        (store.delete_session, session),
    ]
    for call, *args in calls:
        attempt(store, call, *args)
    try:
        policy = Policy(dedupe_roles=policy_roles, restore=restore)
    except PruneStoreError:
        pass
    else:
        attempt(store, store.rebuild, None, policy)
        attempt(store, lambda: store.rebuild(policy=policy))
    report = store.verify()
    assert report.ok, report.mismatches


@settings(max_examples=300)
@given(
    line=st.one_of(
        any_text,
        st.builds(
            lambda fields, session: json.dumps({**fields, "session": session}, allow_nan=True, default=repr),
            messages(deep_metadata=False),
            anything,
        ),
        # Nesting deeper than the JSON decoder's recursion limit, written out as text.
        st.integers(1, 200_000).map(
            lambda d: (
                '{"id": "a", "role": "user", "content": "x", "turn": 0, "session": "s", "metadata": {"k": '
                + "[" * d
                + "]" * d
                + "}}"
            )
        ),
        nested.map(lambda value: json.dumps(value, allow_nan=True)),
    )
)
def test_the_json_lines_reader_raises_only_prunestore_errors(line):
    try:
        session, message = parse_line(line, 1, session_field=True)
    except PruneStoreError as exc:
        assert "line 1" in str(exc)
    else:
        assert isinstance(session, str) and session
        assert isinstance(message, Message) and not math.isnan(message.turn)
