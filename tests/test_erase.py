"""Erasure: what a message said is gone from every row, journal, cache and file, and the state is a batch without it.

After every erase and every append that follows, the stored verdicts and the
prompt equal `prune` over the session with the erased messages as tombstones
(role ``erased``, nothing said), on every backend and both APIs; the receipt
names what was erased and what moved.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from helpers import POLICIES, sessions
from hypothesis import given, settings
from hypothesis import strategies as st

from prunestore import (
    Erasure,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPolicyError,
    Message,
    MessageNotFoundError,
    Policy,
    PruneStore,
    SessionNotFoundError,
    prune,
)
from prunestore.cli import main
from prunestore.engine.state import new_state
from prunestore.jsonl import parse_line, to_json
from prunestore.model import LIVE_VERDICTS
from prunestore.sql.schema import metadata

BOTH_APIS = True
RECALL_INDEX = True  # on SQLite, also with the recall index: it must keep nothing erased either

_names = itertools.count()
MARKER = "WXQZSECRET"
# In no other text: the recall index's terms made of it (trigrams) share no prefix with other terms, so
# their bytes, two of these characters at least, stand in any segment of the index that still holds them.
RARE = "\u20ac\u20ac\u20ac\u20ac"


def tombstone(message: Message) -> Message:
    return Message(id=message.id, role="erased", content="", turn=message.turn, at=message.at)


def check_against_prune(store, session: str, messages: list[Message]) -> None:
    expected = prune(messages, policy=store.policy)
    stored = store.messages(session)
    assert [m.id for m in stored] == [m.id for m in messages]
    assert {m.id: m.verdict for m in stored} == expected.verdicts
    assert [m.id for m in store.live(session)] == [m.id for m in expected.live]
    for m in stored:
        if m.role == "erased":
            assert (m.content, m.metadata, m.tool_key, m.defines, m.refs, m.tokens) == ("", None, None, (), (), 0)


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=12)
@given(data=st.data())
def test_erasure_leaves_the_state_a_batch_over_the_tombstones(open_store, policy, data):
    store = open_store(policy)
    ms = data.draw(sessions(min_size=1, max_size=20))
    session = f"x{next(_names)}"
    now: list[Message] = []
    kept: list[Erasure] = []  # the receipts of the erasures that erased something
    position = 0
    while position < len(ms):
        size = data.draw(st.integers(1, 4))
        batch = ms[position : position + size]
        if data.draw(st.integers(0, 4)) == 0:  # a tombstone appended as it is (an import of an erased session)
            batch = [tombstone(batch[0]), *batch[1:]]
        store.append(session, batch)
        now += batch
        position += size
        check_against_prune(store, session, now)
        if data.draw(st.booleans()):
            chosen = data.draw(st.lists(st.sampled_from([m.id for m in now]), min_size=1, max_size=4))
            before = {m.id: m.verdict for m in store.messages(session)}
            before_live = [m.id for m in store.live(session)]
            receipt = store.erase(session, chosen)
            newly = [m.id for m in now if m.id in chosen and m.role != "erased"]
            now = [tombstone(m) if m.id in chosen else m for m in now]
            check_against_prune(store, session, now)
            after = {m.id: m.verdict for m in store.messages(session)}
            after_live = [m.id for m in store.live(session)]
            assert receipt.session == session and receipt.erased == tuple(newly)
            assert receipt.changed == {
                i: (before[i], after[i]) for i in after if before[i] != after[i] and i not in newly
            }
            assert set(receipt.live_removed) == set(before_live) - set(after_live)
            assert set(receipt.live_added) == set(after_live) - set(before_live)
            assert all(after[i] == "erased" for i in chosen)
            kept += [receipt] if newly else []
            assert (receipt.at is not None) == bool(newly)
            assert store.erasures(session) == kept
            assert store.window(session, limit=1).erasures == len(kept)
    assert store.verify(session).ok


def test_an_erased_message_no_longer_supersedes_or_defines(store):
    store.append(
        "s",
        [
            Message(id="a", role="tool_output", content="DEFINE fmt: TSV", turn=0, tool_key="prefs"),
            Message(id="b", role="tool_output", content="DEFINE fmt: CSV", turn=1, tool_key="prefs"),
            Message(id="c", role="user", content="export it REF fmt", turn=2),
        ],
    )
    assert {m.id: m.verdict for m in store.messages("s")} == {"a": "superseded", "b": "kept", "c": "kept"}
    receipt = store.erase("s", "b")
    assert replace(receipt, at=None) == Erasure("s", ("b",), {"a": ("superseded", "kept")}, ("a",), ("b",))
    assert [m.id for m in store.live("s")] == ["a", "c"]
    why = store.explain("s", "b")
    assert (why.verdict, why.live) == ("erased", False)
    assert why.reason.startswith("erased:")
    assert store.erase("s", ["b"]) == Erasure("s")  # again: nothing left to erase, nothing moves
    assert store.verify("s").ok


def test_appends_after_an_erasure_are_incremental_again(open_store):
    store = open_store(Policy(budget=40, clear_at_least=10))
    said = [Message(id=f"m{i}", role="user", content=f"word {i} " * 3, turn=i) for i in range(30)]
    store.append("s", said[:20])
    store.erase("s", ["m3", "m11"])
    for m in said[20:]:
        store.append("s", m)
    expected = [tombstone(m) if m.id in ("m3", "m11") else m for m in said]
    check_against_prune(store, "s", expected)
    assert store.verify("s").ok
    assert store.truncate("s", "m12") is not None  # back across the erasure: a batch over what remains
    check_against_prune(store, "s", expected[:13])


def _secret_session(store, session: str) -> list[Message]:
    said = []
    for i in range(300):
        secret = i in (5, 140, 299)
        content = f"turn {i} " + "filler words " * 12
        if secret:
            content += f" {MARKER} my card is 4242 {RARE} DEFINE {MARKER.lower()}key"
        metadata = {"raw": content, "tool_calls": [{"args": MARKER}]} if secret else None
        said.append(
            Message(id=f"m{i}", role="user" if i % 2 else "assistant", content=content, turn=i // 2, metadata=metadata)
        )
    said.append(Message(id="d1", role="retrieved_doc", content=f"passage {MARKER}", turn=150, tool_key="search"))
    said.append(Message(id="d2", role="retrieved_doc", content=f"passage {MARKER}", turn=150))  # its duplicate
    # A summary of a span holding a secret: made from what is erased, it is erased with it.
    said.append(Message(id="sum", role="user", content=f"Earlier: {MARKER} card", turn=150, summarizes=("m4", "m5")))
    for m in said:
        store.append(session, m)
    return said


def _content_hashes(messages: list[Message]) -> list[bytes]:
    return [new_state(m, 0).content_hash for m in messages]


def test_no_row_journal_or_file_holds_what_was_erased(open_store, store_url, backend):
    store = open_store(Policy(budget=600, clear_at_least=150))
    other = open_store(Policy(budget=600, clear_at_least=150))  # another process's store, its cache warm
    said = _secret_session(store, "s")
    assert any(MARKER in m.content for m in other.live("s"))
    secret = [m for m in said if MARKER in m.content and not m.summarizes]
    receipt = store.erase("s", [m.id for m in secret])
    assert receipt.erased == tuple(m.id for m in secret)
    assert receipt.invalidated == ("sum",)
    assert not any(MARKER in m.content for m in other.live("s"))
    assert not any(MARKER in m.content for m in store.messages("s"))
    assert store.verify("s").ok
    hashes = _content_hashes(secret + [said[-1]])

    if backend.startswith("sqlite"):
        path = Path(sa.make_url(store_url).database)
        files = [p for p in (path, Path(f"{path}-wal")) if p.exists()]
        data = b"".join(p.read_bytes() for p in files)
        assert MARKER.encode() not in data and MARKER.lower().encode() not in data
        assert RARE[:2].encode() not in data
        assert not any(h in data or h.hex().encode() in data for h in hashes)
    else:
        engine = sa.create_engine(store_url)
        with engine.connect() as conn:
            rows = [str(r) for table in metadata.sorted_tables for r in conn.execute(sa.select(table)).all()]
        engine.dispose()
        text = "\n".join(rows)
        assert len(rows) > 300  # the scan read the messages
        assert MARKER not in text and MARKER.lower() not in text
        assert not any(repr(h) in text or h.hex() in text for h in hashes)


@pytest.mark.sqlite
def test_a_reader_that_keeps_the_write_ahead_log_is_named_in_the_receipt(tmp_path):
    """While another connection reads, the -wal file cannot be emptied: the receipt says so, and the next
    erasure, once the reader is gone, empties it."""
    import sqlite3

    path = tmp_path / "store.db"
    with PruneStore(f"sqlite:///{path}") as store:
        store.append(
            "s", [Message(f"m{i}", "user", f"note {i} {MARKER}" if i == 1 else f"note {i}", i) for i in range(3)]
        )
        reader = sqlite3.connect(path)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM prunestore_messages").fetchone()  # a snapshot: the log stays
        kept = store.erase("s", "m1")
        assert kept.log_kept and MARKER.encode() in Path(f"{path}-wal").read_bytes()
        reader.rollback()
        reader.close()
        done = store.erase("s", "m2")
        assert not done.log_kept and not done.erased == () and Path(f"{path}-wal").stat().st_size == 0
        assert not any(r.log_kept for r in store.erasures("s"))  # what erase saw; kept receipts do not hold it
    assert MARKER.encode() not in path.read_bytes()


def test_erasing_a_call_keeps_the_rendered_prompt_valid(store):
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
    }
    from prunestore import from_openai

    store.append(
        "s",
        from_openai(
            [
                {"role": "user", "content": "hi"},
                call,
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
                {"role": "user", "content": "thanks"},
            ]
        ),
    )
    ids = [m.id for m in store.messages("s")]
    store.erase("s", ids[1])
    sent = store.render("s", format="openai").messages
    # No tool message without its call (providers refuse one): the result the user kept is sent as text.
    assert sent == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "[tool result] 42"},
        {"role": "user", "content": "thanks"},
    ]


def test_bad_erasures_name_the_field_and_change_nothing(store):
    store.append("s", [Message(id="a", role="user", content="keep me", turn=0)])
    stamp = store.messages("s")
    with pytest.raises(MessageNotFoundError, match="ids='nope'"):
        store.erase("s", ["a", "nope"])
    with pytest.raises(SessionNotFoundError, match="session='ghost'"):
        store.erase("ghost", ["a"])
    with pytest.raises(InvalidArgumentError, match="ids=3"):
        store.erase("s", 3)
    with pytest.raises(InvalidMessageError, match="ids="):
        store.erase("s", [""])
    assert store.messages("s") == stamp


def test_tombstones_are_messages_that_said_nothing():
    with pytest.raises(InvalidMessageError, match="content='x'"):
        Message(id="a", role="erased", content="x", turn=0)
    with pytest.raises(InvalidMessageError, match="defines="):
        Message(id="a", role="erased", content="", turn=0, defines=("k",))
    with pytest.raises(InvalidMessageError, match="metadata="):
        Message(id="a", role="erased", content="", turn=0, metadata={"a": 1})
    assert Message(id="a", role="erased", content="", turn=3).tokens == 0
    with pytest.raises(InvalidPolicyError, match="pinned_roles="):
        Policy(pinned_roles={"system", "erased"})


def test_a_store_with_tombstones_exports_and_imports_as_it_is(store, tmp_path):
    store.append("s", [Message(id=f"m{i}", role="user", content=f"REF k{i} DEFINE k{i + 1}", turn=i) for i in range(6)])
    store.erase("s", ["m2", "m4"])
    lines = [json.dumps(to_json(m.to_message())) for m in store.messages("s")]
    copy = PruneStore(f"sqlite:///{tmp_path / 'copy.db'}")
    copy.append("s", [parse_line(line, n, session_field=False)[1] for n, line in enumerate(lines, 1)])
    assert [(m.id, m.role, m.verdict, m.tokens) for m in copy.messages("s")] == [
        (m.id, m.role, m.verdict, m.tokens) for m in store.messages("s")
    ]
    assert copy.verify("s").ok
    copy.close()


def test_the_cli_erases_and_prints_the_receipt(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with PruneStore(url) as store:
        store.append(
            "s",
            [
                Message(id="a", role="user", content="DEFINE x", turn=0),
                Message(id="b", role="user", content="REF x", turn=1),
            ],
        )
    runner = CliRunner()
    result = runner.invoke(main, ["--db", url, "erase", "s", "a", "--yes", "--json"])
    assert result.exit_code == 0, result.output
    receipt = json.loads(result.output)
    assert receipt["erased"] == ["a"] and receipt["live_removed"] == ["a"]
    result = runner.invoke(main, ["--db", url, "erase", "s", "zzz", "--yes"])
    assert result.exit_code != 0 and "ids='zzz'" in result.output
    with PruneStore(url) as store:
        assert [m.verdict for m in store.messages("s")] == ["erased", "kept"]
        assert not [m for m in store.messages("s") if m.verdict in LIVE_VERDICTS and m.id == "a"]


def test_each_erasure_s_receipt_is_kept_in_order_without_what_it_erased(open_store):
    """`erasures` gives back each receipt `erase` returned, with its time; a deleted session takes them along."""
    store, reader = open_store(), open_store()  # the receipts are the store's, read by any object
    said = [Message(f"m{i}", "tool_output", f"{MARKER} {i}", i, tool_key=f"tool-{i % 2}") for i in range(6)]
    store.append("s", said)
    assert reader.erasures("s") == []
    started = datetime.now(timezone.utc)
    first = store.erase("s", ["m4", "m1"])
    assert store.erase("s", "m1") == Erasure("s")  # nothing left to erase: no receipt
    second = store.erase("s", ["m5", "m1"])
    assert (first.erased, first.changed, first.live_removed) == (("m1", "m4"), {"m2": ("superseded", "kept")}, ("m4",))
    assert second.erased == ("m5",)
    assert second.changed == {"m3": ("superseded", "kept")} and second.live_added == ("m3",)
    assert started <= first.at <= second.at <= datetime.now(timezone.utc) + timedelta(seconds=1)
    assert reader.erasures("s") == [first, second] and reader.window("s").erasures == 2
    assert not any(MARKER in repr(r) for r in reader.erasures("s"))
    store.fork("s", "m5", "s-fork")  # the copy's tombstones are copies: its erasures start afresh
    assert reader.erasures("s-fork") == [] and reader.window("s-fork").erasures == 0
    store.append("t", said[:1])
    store.erase("t", "m0")
    store.delete_session("s")
    with pytest.raises(SessionNotFoundError):
        reader.erasures("s")
    store.append("s", said[:1])  # the name again: a new session, with none of the old receipts
    assert reader.erasures("s") == [] and len(reader.erasures("t")) == 1


def test_the_cli_prints_the_kept_receipts(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with PruneStore(url) as store:
        store.append("s", [Message(id="a", role="user", content="DEFINE:x", turn=0)])
        assert CliRunner().invoke(main, ["--db", url, "erasures", "s"]).output == "no erasure in s\n"
        receipt = store.erase("s", "a")
    result = CliRunner().invoke(main, ["--db", url, "erasures", "s", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {
            "session": "s",
            "erased": ["a"],
            "changed": {},
            "live_added": [],
            "live_removed": ["a"],
            "at": receipt.at.isoformat(),
            "invalidated": [],
        }
    ]
    result = CliRunner().invoke(main, ["--db", url, "erasures", "s"])
    assert result.output.startswith(f"erased 1 message(s) of s at {receipt.at.isoformat(timespec='seconds')}: a\n")
    with PruneStore(url) as store:  # a summary of what is erased goes with it, and the receipt says so
        store.append("s", [Message("b", "user", "hello", turn=1), Message("c", "user", "hi", 1, summarizes=("b",))])
        store.erase("s", "b")
    result = CliRunner().invoke(main, ["--db", url, "erasures", "s"])
    assert "erased 1 message(s) of s" in result.output and "  and 1 summary(ies) made from them: c\n" in result.output
    result = CliRunner().invoke(main, ["--db", url, "erasures", "nope"])
    assert result.exit_code != 0 and "nope" in result.output
