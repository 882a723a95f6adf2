"""Behaviour of `PruneStore` on both backends: the calls of docs/api.md and their errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa

from prunestore import (
    Delta,
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPolicyError,
    Message,
    MessageNotFoundError,
    Policy,
    PolicyMismatchError,
    PruneStore,
    PruneStoreError,
    SessionNotFoundError,
    TokenizerMismatchError,
    TurnOrderError,
    count_tokens,
    prune,
)

BOTH_APIS = True  # these tests run on PruneStore and on AsyncPruneStore (see conftest)

M = Message


def csv_session():
    return [
        M("sys", "system", "You are a data assistant.", 0),
        M("pref", "user", "My preferred format is CSV. DEFINE:format", 3, expires_after_turn=5),
        M("ls1", "tool_output", "files: a b", 4, tool_key="ls:/data"),
        M("doc1", "retrieved_doc", "Exports are written to /out.", 4),
        M("doc2", "retrieved_doc", "exports are  written to /out.", 5),
        M("ls2", "tool_output", "files: a b c", 20, tool_key="ls:/data"),
        M("ask", "user", "Export the results. REF:format", 47),
    ]


def row_counts(store: PruneStore) -> dict[str, int]:
    with store.engine.connect() as conn:
        tables = [t for t in sa.inspect(conn).get_table_names() if t.startswith("prunestore_")]
        return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in tables}


def test_csv_example_end_to_end(store):
    store.append("chat", csv_session()[:-1])
    delta = store.append("chat", csv_session()[-1])
    assert delta == Delta(live_added=("pref", "ask"), live_removed=(), appended=1)  # pref had expired at turn 20
    live = store.live("chat")
    assert [m.id for m in live] == ["sys", "pref", "doc1", "ls2", "ask"]
    assert [m.seq for m in live] == [1, 2, 4, 6, 7]
    pref = live[1]
    assert (pref.verdict, pref.base, pref.tokens) == ("restored", "expired", count_tokens(pref.content))
    assert pref.to_message() == csv_session()[1]
    assert {m.id: m.verdict for m in store.messages("chat")}["doc2"] == "duplicate"
    assert store.sessions() == ["chat"]
    assert store.verify().ok


def test_delta_reports_messages_that_stop_being_live(store):
    store.append("s", [M("a", "tool_output", "v1", 0, tool_key="t"), M("b", "user", "x", 0, expires_after_turn=0)])
    delta = store.append("s", M("c", "tool_output", "v2", 1, tool_key="t"))
    assert delta.live_added == ("c",) and delta.live_removed == ("a", "b")
    dead_on_arrival = store.append("s", [M("d", "retrieved_doc", "p", 1), M("e", "retrieved_doc", "P", 1)])
    assert dead_on_arrival.live_added == ("d",) and dead_on_arrival.live_removed == ()


def test_same_id_retry_is_a_no_op_and_a_conflict_raises(store):
    batch = csv_session()[:3]
    store.append("s", batch)
    before = row_counts(store)
    assert store.append("s", batch) == Delta()
    assert store.append("s", batch[0]) == Delta()  # old turn, but a retry is checked first
    assert row_counts(store) == before
    changed = M("pref", "user", "My preferred format is TSV.", 3)
    with pytest.raises(DuplicateMessageError, match="id='pref'.*content, expires_after_turn"):
        store.append("s", changed)
    with pytest.raises(DuplicateMessageError, match="id='x'"):
        store.append("s", [M("x", "user", "1", 5), M("x", "user", "2", 5)])
    assert row_counts(store) == before


def test_retries_inside_one_batch_are_skipped(store):
    m = M("x", "user", "1", 5)
    store.append("s", [m, m])
    assert [s.id for s in store.messages("s")] == ["x"]


def test_turn_order_is_enforced_and_nothing_is_written(store):
    store.append("s", M("a", "user", "x", 5))
    before = row_counts(store)
    with pytest.raises(TurnOrderError, match="turn=4.*current turn 6"):
        store.append("s", [M("b", "user", "y", 6), M("c", "user", "z", 4)])
    assert row_counts(store) == before
    assert [m.id for m in store.messages("s")] == ["a"]


@pytest.mark.parametrize(
    "session, messages, named",
    [
        ("", [M("a", "user", "x", 0)], "session=''"),
        (7, [M("a", "user", "x", 0)], "session=7"),
        ("s" * 600, [M("a", "user", "x", 0)], "longer than 512"),
        ("nul\x00", [M("a", "user", "x", 0)], "NUL"),
        ("s", "not a message", "messages='not a message'"),
        ("s", [M("a", "user", "x", 0), {"id": "b"}], "got dict"),
        ("s", 42, "messages=42"),
    ],
)
def test_bad_input_names_the_problem_and_writes_nothing(store, session, messages, named):
    store.append("s", M("first", "user", "x", 0))
    before = row_counts(store)
    with pytest.raises(InvalidMessageError) as info:
        store.append(session, messages)
    assert named in str(info.value)
    assert row_counts(store) == before


def test_a_failing_tokenizer_is_a_clear_error(open_store):
    def broken(text: str) -> int:
        raise RuntimeError("boom")

    store = open_store(tokenizer=broken)
    with pytest.raises(InvalidMessageError, match="tokenizer failed"):
        store.append("s", M("a", "user", "x", 0))
    assert store.sessions() == []
    with pytest.raises(TokenizerMismatchError, match="broken"):  # the store records the tokenizer it counts with
        open_store(tokenizer=lambda text: -1)
    store.rebuild(tokenizer=lambda text: -1)
    with pytest.raises(InvalidMessageError, match="tokens=-1"):
        store.append("s", M("a", "user", "x", 0))


def test_reads_of_unknown_sessions_and_messages(store):
    for call in (store.live, store.messages, store.stats, store.verify, store.delete_session, store.rebuild):
        with pytest.raises(SessionNotFoundError, match="session='nope'"):
            call("nope")
    store.append("s", M("a", "user", "x", 0))
    with pytest.raises(MessageNotFoundError, match="message_id='zz'"):
        store.explain("s", "zz")
    with pytest.raises(SessionNotFoundError):
        store.explain("nope", "a")


def test_messages_by_id(store):
    store.append("s", [M("a", "user", "x", 0), M("b", "tool_output", "y", 0, tool_key="t"), M("c", "user", "z", 1)])
    store.append("s", M("d", "tool_output", "w", 2, tool_key="t"))
    assert [m.id for m in store.messages("s", ids=["d", "a", "b", "a"])] == ["a", "b", "d"]  # append order, once
    picked = {m.id: m for m in store.messages("s", ids=("b", "d"))}
    assert picked == {m.id: m for m in store.messages("s") if m.id in ("b", "d")}
    assert picked["b"].verdict == "superseded"
    assert store.messages("s", ids=[]) == []
    before = store.messages("s")
    with pytest.raises(MessageNotFoundError, match="ids='zz': no such message in session"):
        store.messages("s", ids=["a", "zz"])
    with pytest.raises(InvalidMessageError, match="ids='ab'"):
        store.messages("s", ids="ab")  # a lone string would be read as the ids 'a' and 'b'
    with pytest.raises(InvalidMessageError, match="ids="):
        store.messages("s", ids=["a", 7])
    with pytest.raises(SessionNotFoundError):
        store.messages("nope", ids=["a"])
    assert store.messages("s") == before


def test_explain_gives_each_cause(store):
    store.append("chat", csv_session())
    sup = store.explain("chat", "ls1")
    assert (sup.verdict, sup.superseded_by) == ("superseded", "ls2")
    assert "superseded by 'ls2'" in sup.reason
    dup = store.explain("chat", "doc2")
    assert (dup.verdict, dup.duplicate_of) == ("duplicate", "doc1")
    pref = store.explain("chat", "pref")
    assert (pref.verdict, pref.base, pref.expires_after_turn, pref.current_turn) == ("restored", "expired", 5, 47)
    assert (pref.needed_for, pref.needed_by) == (("format",), ("ask",))
    assert "restored" in pref.reason and "expired after turn 5" in pref.reason
    kept = store.explain("chat", "sys")
    assert kept.verdict == "kept" and kept.live


def test_explain_names_the_surviving_copy_after_a_handover(store):
    store.append(
        "s",
        [
            M("d1", "retrieved_doc", "p", 0, tool_key="t"),
            M("d2", "retrieved_doc", "p", 0),
            M("d3", "retrieved_doc", "P", 0),
            M("t2", "tool_output", "x", 0, tool_key="t"),
        ],
    )
    assert store.explain("s", "d3").duplicate_of == "d2"


def test_stats(store):
    store.append("chat", csv_session())
    store.append("other", M("a", "user", "one two", 0))
    stats = store.stats("chat")
    assert stats.messages == 7 and stats.live_messages == 5
    assert stats.by_verdict["superseded"].messages == 1
    assert stats.by_verdict["duplicate"].messages == 1
    assert stats.tokens == sum(m.tokens for m in store.messages("chat"))
    assert stats.live_tokens == sum(m.tokens for m in store.live("chat"))
    assert 0 < stats.reduction < 1
    everything = store.stats()
    assert everything.sessions == 2 and everything.messages == 8 and everything.tokens == stats.tokens + 2


def test_delete_session_leaves_no_row_behind(store):
    store.append("chat", csv_session())
    store.append("keep", csv_session())
    alone = row_counts(store)
    store.delete_session("chat")
    assert store.sessions() == ["keep"]
    after = row_counts(store)
    with store.engine.connect() as conn:
        sid = conn.execute(sa.text("SELECT session_id FROM prunestore_sessions WHERE name = 'keep'")).scalar()
        for table in after:
            if table in ("prunestore_settings", "prunestore_alembic_version"):
                continue
            others = conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE session_id <> :sid"), {"sid": sid})
            assert others.scalar() == 0, table
    assert after["prunestore_messages"] == alone["prunestore_messages"] // 2
    assert store.live("keep")
    store.append("chat", csv_session())  # the name can be used again
    assert store.verify().ok


def test_live_view_lists_live_messages(store):
    store.append("chat", csv_session())
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT session, seq, id, role, turn, tokens, content FROM prunestore_live "
                "WHERE session = 'chat' ORDER BY seq"
            )
        ).all()
    assert [r.id for r in rows] == [m.id for m in store.live("chat")]
    assert rows[0].content == "You are a data assistant."


def test_policy_is_recorded_and_a_mismatch_raises(open_store):
    store = open_store(Policy(restore="direct"))
    assert open_store().policy == Policy(restore="direct")
    assert open_store(Policy(restore="direct")).policy == Policy(restore="direct")
    with pytest.raises(PolicyMismatchError, match="restore='transitive'"):
        open_store(Policy())
    with pytest.raises(InvalidPolicyError):
        open_store("direct")
    assert store.policy.restore == "direct"


def test_rebuild_with_a_new_policy_changes_the_store(open_store):
    store = open_store(Policy(restore="direct"))
    chain = [
        M("a", "tool_output", "DEFINE:a", 0, tool_key="x"),
        M("b", "tool_output", "DEFINE:b REF:a", 0, tool_key="y"),
        M("x2", "tool_output", "n", 1, tool_key="x"),
        M("y2", "tool_output", "n", 1, tool_key="y"),
        M("ask", "user", "REF:b", 1),
    ]
    store.append("s", chain)
    assert {m.id: m.verdict for m in store.messages("s")}["a"] == "superseded"
    with pytest.raises(InvalidPolicyError):
        store.rebuild("s", policy=Policy())
    store.rebuild(policy=Policy())
    assert store.policy == Policy()
    assert {m.id: m.verdict for m in store.messages("s")}["a"] == "restored"
    assert store.verify().ok
    assert open_store().policy == Policy()
    store.append("s", M("more", "user", "REF:a", 2))
    assert store.verify().ok


def test_verify_reports_damage_and_rebuild_repairs_it(store):
    store.append("chat", csv_session())
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE prunestore_messages SET verdict = 'kept' WHERE id = 'ls1'"))
        conn.execute(sa.text("UPDATE prunestore_keys SET support = 7 WHERE key = 'format'"))
        conn.execute(sa.text("DELETE FROM prunestore_hash_holders"))
    report = store.verify("chat")
    assert not report.ok
    found = {(m.what, m.subject) for m in report.mismatches}
    assert ("verdict", "ls1") in found and ("key", "format") in found
    assert any(what == "hash_holder" for what, _ in found)
    store.rebuild()
    assert store.verify().ok
    assert {m.id: m.verdict for m in store.messages("chat")}["ls1"] == "superseded"


# Damage done with SQL behind the store's back (to session :sid), and the one mismatch verify must report.
# csv_session's seqs: sys 1, pref 2, ls1 3, doc1 4, doc2 5, ls2 6, ask 7.
_MESSAGE = "UPDATE prunestore_messages SET {} WHERE session_id = :sid AND id = '{}'"
DAMAGE = {
    "verdict": (_MESSAGE.format("verdict = 'kept'", "ls1"), "verdict", "ls1"),
    "base": (_MESSAGE.format("base = 'kept'", "ls1"), "base", "ls1"),
    "content hash": (_MESSAGE.format("content_hash = :other_hash", "ask"), "content_hash", "ask"),
    "effective keys": (_MESSAGE.format("eff_refs = ''", "ask"), "effective_keys", "ask"),
    "key support": (
        "UPDATE prunestore_keys SET support = 7 WHERE session_id = :sid AND key = 'format'",
        "key",
        "format",
    ),
    "key definer": ("UPDATE prunestore_keys SET definer_seq = 1 WHERE session_id = :sid", "key", "format"),
    "missing key": ("DELETE FROM prunestore_keys WHERE session_id = :sid", "key", "format"),
    "extra key": (
        "INSERT INTO prunestore_keys (session_id, key, definer_seq, support, kept_refs) "
        "VALUES (:sid, 'ghost', 3, 1, 1)",
        "key",
        "ghost",
    ),
    "missing holder": ("DELETE FROM prunestore_hash_holders WHERE session_id = :sid AND seq = 5", "hash_holder", "@5"),
    "extra holder": (
        "INSERT INTO prunestore_hash_holders (session_id, content_hash, seq) VALUES (:sid, :other_hash, 3)",
        "hash_holder",
        "@3",
    ),
    "current turn": (
        "UPDATE prunestore_sessions SET current_turn = 999 WHERE session_id = :sid",
        "session",
        "current turn and last seq",
    ),
    "last seq": (
        "UPDATE prunestore_sessions SET last_seq = 3 WHERE session_id = :sid",
        "session",
        "current turn and last seq",
    ),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_verify_names_exactly_the_damage_and_rebuild_repairs_it(store, damage):
    sql, what, subject = DAMAGE[damage]
    store.append("other", csv_session())  # untouched: damage to "chat" must not be reported for it
    store.append("chat", csv_session())
    with store.engine.begin() as conn:
        sid = conn.execute(sa.text("SELECT session_id FROM prunestore_sessions WHERE name = 'chat'")).scalar()
        changed = conn.execute(sa.text(sql), {"sid": sid, "other_hash": bytes(32)})
        assert changed.rowcount == 1
    report = store.verify()
    assert [(m.session, m.what) for m in report.mismatches] == [("chat", what)]
    assert report.mismatches[0].subject.endswith(subject)
    store.rebuild("chat")
    assert store.verify().ok
    expected = prune(csv_session())
    assert {m.id: m.verdict for m in store.messages("chat")} == expected.verdicts


def test_a_new_process_sees_the_same_state(store, store_url):
    store.append("chat", csv_session())
    code = (
        "import sys, json; from prunestore import PruneStore\n"
        "s = PruneStore(sys.argv[1])\n"
        "print(json.dumps([[m.id, m.verdict] for m in s.messages('chat')] + [s.verify().ok]))\n"
        "s.append('chat', __import__('prunestore').Message('new', 'user', 'REF:format', 48))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, store_url], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str([[m.id, m.verdict] for m in store.messages("chat")][:7] + [True]).replace(
        "'", '"'
    ).replace("True", "true")
    assert store.live("chat")[-1].id == "new"
    assert store.verify().ok


def test_url_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PRUNESTORE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    with PruneStore() as store:
        store.append("s", M("a", "user", "x", 0))
    assert (tmp_path / "env.db").exists()
    monkeypatch.delenv("PRUNESTORE_URL")
    monkeypatch.chdir(tmp_path)
    with PruneStore() as store:
        assert store.sessions() == []
    assert (tmp_path / "prunestore.db").exists()


def test_errors_share_one_base(store):
    with pytest.raises(PruneStoreError):
        store.live("missing")
    with pytest.raises(PruneStoreError, match="url="):
        PruneStore("mysql://nobody@localhost/none")


def test_size_limits_are_clear_errors_and_write_nothing(open_store):
    store = open_store(max_content_bytes=1000, max_metadata_bytes=100)
    store.append("s", M("ok", "user", "é" * 500, 0, metadata={"k": "v" * 50}))  # 1,000 bytes exactly
    before = row_counts(store)
    with pytest.raises(InvalidMessageError, match="content=.*1002 bytes, over the limit of 1000"):
        store.append("s", [M("a", "user", "fine", 0), M("b", "user", "é" * 501, 0)])
    with pytest.raises(InvalidMessageError, match="metadata=.*over the limit of 100"):
        store.append("s", M("c", "user", "x", 0, metadata={"k": "v" * 100}))
    assert row_counts(store) == before


def test_verify_finds_a_prompt_message_below_the_cursor_not_held(open_store):
    """Under a budget, eviction resumes at the session's cursor: what stays in the prompt below it must be held."""
    store = open_store(Policy(budget=20, clear_at_least=5))
    store.append("s", M("sys", "system", "You are terse.", 0))
    for turn in range(1, 30):
        store.append("s", [M(f"u{turn}", "user", f"question {turn}", turn), M(f"a{turn}", "assistant", "ok", turn)])
    assert store.stats("s").events > 0 and store.verify().ok
    with store.engine.begin() as conn:
        sid = conn.execute(sa.text("SELECT session_id FROM prunestore_sessions WHERE name = 's'")).scalar()
        cursor = conn.execute(
            sa.text("SELECT prompt_cursor FROM prunestore_sessions WHERE session_id = :sid"), {"sid": sid}
        )
        assert cursor.scalar() > 1  # the walks passed the pinned system message
        cleared = conn.execute(sa.text(_MESSAGE.format("held = 0", "sys")), {"sid": sid})
        assert cleared.rowcount == 1
    report = store.verify()
    assert [(m.what, m.subject) for m in report.mismatches] == [("held", "sys")]
    store.rebuild("s")
    assert store.verify().ok
    store.append("s", [M("u99", "user", "one more", 99), M("a99", "assistant", "ok", 99)])
    assert store.live("s")[0].id == "sys" and store.verify().ok


# -- limits that hold on both backends, checked before anything is written --------------------

LONG = "x" * 1025  # one byte over the limit of an id, tool key or key
WIDE = "é" * 513  # 1,026 bytes in 513 characters


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda: M(LONG, "user", "x", 1), "id="),
        (lambda: M(WIDE, "user", "x", 1), "id="),
        (lambda: M("a", "tool_output", "x", 1, tool_key=LONG), "tool_key="),
        (lambda: M("a", "user", "x", 1, defines=(LONG,)), "defines="),
        (lambda: M("a", "user", "x", 1, refs=[f"k{i}" for i in range(10_001)]), "refs="),  # type: ignore[arg-type]  # a list, checked all the same
        (lambda: M("a", "user", "x", 10**5000), "turn=<an int of"),
        (lambda: M("a", "user", "x", 1, metadata={"n": 10**5000}), "metadata="),
    ],
)
def test_values_past_the_limits_are_refused_by_name(store, build, named):
    store.append("s", M("first", "user", "x", 0))
    before = row_counts(store)
    with pytest.raises(InvalidMessageError) as info:
        store.append("s", build())
    assert named in str(info.value)
    assert row_counts(store) == before


@pytest.mark.parametrize(
    ("content", "named"),
    [("DEFINE:" + LONG, "over 1024 characters"), (" ".join(f"REF:k{i}" for i in range(10_001)), "10001 keys")],
)
def test_marker_keys_past_the_limits_are_refused(store, content, named):
    before = row_counts(store)
    with pytest.raises(InvalidMessageError, match=named):
        store.append("s", M("a", "user", content, 1))
    assert row_counts(store) == before


def test_values_at_the_limits_are_stored_on_every_backend(store):
    edge, wide = "x" * 1024, "é" * 512
    store.append(
        "s", [M(edge, "tool_output", "a", 1, tool_key=edge, defines=(edge,)), M(wide, "user", f"REF:{edge}", 2)]
    )
    assert [m.id for m in store.live("s")] == [edge, wide]
    assert store.verify().ok


def test_a_tool_key_from_long_arguments_is_a_digest(store):
    from prunestore.formats import tool_key

    key = tool_key("write_file", {"text": "y" * 5000})
    assert key.startswith("write_file:sha256:") and key == tool_key("write_file", '{"text": "' + "y" * 5000 + '"}')
    assert key != tool_key("write_file", {"text": "y" * 5001})
    store.append("s", [M("a", "tool_output", "done", 1, tool_key=key), M("b", "tool_output", "done", 2, tool_key=key)])
    assert [m.verdict for m in store.messages("s")] == ["superseded", "kept"]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.window("s", after=2**63 - 1),
        lambda s: s.window("s", limit=2**63),
        lambda s: s.sessions(limit=2**63),
        lambda s: s.summaries(prefix="a\x00"),
        lambda s: s.sessions(after="\x00"),
    ],
)
def test_arguments_past_64_bits_or_with_nul_are_refused(store, call):
    store.append("s", M("a", "user", "x", 1))
    with pytest.raises(InvalidArgumentError):
        call(store)


def test_an_idle_time_longer_than_any_is_nothing_idle(store):
    store.append("s", M("a", "user", "x", 1))
    assert store.gc(idle_for=1e300).sessions == () and store.sessions() == ["s"]
