"""Alembic: the schema is created, removed and created again."""

from __future__ import annotations

import re
import time

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from prunestore import Message, Policy, PruneStore
from prunestore.sql import db, recall_index
from prunestore.sql.schema import POSTGRES_INDEXES, VERSION_TABLE, metadata
from prunestore.sql.sessionids import session_id


def tables(engine) -> set[str]:
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        return {t for t in inspector.get_table_names() if t.startswith("prunestore_")} | {
            v for v in inspector.get_view_names() if v.startswith("prunestore_")
        }


@pytest.mark.plain_tables
def test_upgrade_downgrade_upgrade(store_url):
    engine = db.make_engine(store_url)
    try:
        assert tables(engine) == set()
        db.upgrade(engine)
        expected = set(metadata.tables) | {"prunestore_live", VERSION_TABLE}
        assert tables(engine) == expected
        with engine.connect() as conn:
            assert db.current_revision(conn) == db.head_revision()
        db.downgrade(engine, "base")
        assert tables(engine) == {VERSION_TABLE}
        with engine.connect() as conn:
            assert db.current_revision(conn) is None
        db.upgrade(engine)
        assert tables(engine) == expected
        db.upgrade(engine)  # already at head: a no-op
    finally:
        engine.dispose()


def test_the_migrated_schema_matches_the_metadata(store_url):
    engine = db.make_engine(store_url)
    try:
        db.upgrade(engine)
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            diff = compare_metadata(context, metadata)
        # Beside the tables: the version table, and on the partitioned layout each table's partitions.
        expression_indexes = {create.split()[2] for creates in POSTGRES_INDEXES.values() for create in creates}
        partition = re.compile(r"prunestore_\w+_p\d+")
        diff = [
            d
            for d in diff
            if not (d[0] == "remove_table" and (d[1].name == VERSION_TABLE or partition.fullmatch(d[1].name)))
            and not (d[0] == "remove_index" and partition.fullmatch(d[1].table.name))
            and not (d[0] == "remove_index" and d[1].name in expression_indexes)  # not in the metadata
        ]
        assert diff == []
    finally:
        engine.dispose()


def test_a_store_lives_beside_an_application_with_its_own_alembic_table(store_url):
    engine = sa.create_engine(db.resolve_url(store_url))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        conn.execute(sa.text("INSERT INTO alembic_version VALUES ('app_rev_1')"))
    with PruneStore(store_url) as store:
        store.append("s", Message("a", "user", "hi", 0))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "app_rev_1"
    engine.dispose()


BUDGET = Policy(budget=12, clear_at_least=4)


def ask_and_answer(store: PruneStore, turns: range) -> None:
    """Session "s": a question and an answer per turn, each turn one append."""
    for turn in turns:
        store.append(
            "s", [Message(f"u{turn}", "user", f"question {turn}", turn), Message(f"a{turn}", "assistant", "ok", turn)]
        )


@pytest.mark.plain_tables
def test_a_budgeted_store_survives_downgrade_and_upgrade_and_its_sessions_get_times(store_url):
    with PruneStore(store_url, policy=BUDGET) as store:
        ask_and_answer(store, range(20))
        before = [(m.id, m.verdict) for m in store.messages("s")]
        assert store.stats("s").events > 0
    engine = db.make_engine(store_url)
    try:
        db.downgrade(engine, "0004")  # before the cursor and the session times
        db.upgrade(engine)
        with engine.connect() as conn:
            created, updated, cursor = conn.execute(
                sa.text("SELECT created_at, updated_at, prompt_cursor FROM prunestore_sessions")
            ).one()
    finally:
        engine.dispose()
    assert abs(created - time.time()) < 60 and created == updated and cursor == 0
    with PruneStore(store_url, policy=BUDGET) as store:
        assert [(m.id, m.verdict) for m in store.messages("s")] == before and store.verify().ok
        ask_and_answer(store, range(20, 30))
        assert store.verify().ok


def _ids(store_url) -> dict[str, int]:
    engine = sa.create_engine(db.resolve_url(store_url))
    try:
        with engine.connect() as conn:
            return dict(conn.execute(sa.text("SELECT name, session_id FROM prunestore_sessions")).all())
    finally:
        engine.dispose()


@pytest.mark.plain_tables
def test_sessions_move_to_ids_from_their_names_and_back(store_url):
    names = ["b", "a", "user/7", "日本"]
    with PruneStore(store_url) as store:
        for turn, name in enumerate(names):
            store.append(name, [Message("q", "user", f"question of {name}", turn), Message("d", "user", "same", turn)])
        before = {name: store.messages(name) for name in names}
    engine = db.make_engine(store_url)
    try:
        db.downgrade(engine, "0006")
        assert sorted(_ids(store_url).values()) == [1, 2, 3, 4]  # numbered again, in creation order
        with engine.begin() as conn:  # a writer at 0006 takes the next number from the sequence
            conn.execute(
                sa.text("INSERT INTO prunestore_sessions (name, current_turn, last_seq, stamp) VALUES ('new', 0, 0, 1)")
            )
        assert _ids(store_url)["new"] == 5
        db.upgrade(engine)
    finally:
        engine.dispose()
    assert _ids(store_url) == {name: session_id(name) for name in [*names, "new"]}
    with PruneStore(store_url) as store:
        assert {name: store.messages(name) for name in names} == before and store.verify().ok
        store.append("a", Message("later", "user", "question of b", 9))
        assert store.messages("new") == [] and store.verify().ok


@pytest.mark.plain_tables
def test_sessions_get_their_token_totals_and_a_first_history_point(store_url):
    with PruneStore(store_url, policy=BUDGET) as store:
        ask_and_answer(store, range(12))
        store.append("empty-after-pop", Message("only", "user", "hello", 0))
        store.pop("empty-after-pop")
        stored = store.messages("s")
        events = store.summary("s").events
    engine = db.make_engine(store_url)
    try:
        db.downgrade(engine, "0007")  # before the totals and the history
        db.upgrade(engine)
    finally:
        engine.dispose()
    with PruneStore(store_url) as store:
        summary = store.summary("s")
        totals = (sum(m.tokens for m in stored), sum(m.tokens for m in stored if m.live))
        assert (summary.messages, summary.tokens, summary.live_tokens) == (len(stored), *totals)
        assert [(p.seq, p.tokens, p.live_tokens, p.events) for p in store.history("s")] == [
            (len(stored), *totals, events)
        ]
        assert store.history("empty-after-pop") == [] and store.summary("empty-after-pop").tokens == 0
        assert store.verify().ok
        store.append("s", Message("later", "user", "question later", 20))
        assert len(store.history("s")) == 2 and store.verify().ok


@pytest.mark.plain_tables
def test_a_store_from_before_0009_records_the_tokenizer_it_is_opened_with(store_url):
    from helpers import char_tokens

    from prunestore import TokenizerMismatchError

    with PruneStore(store_url, policy=BUDGET, tokenizer=char_tokens) as store:
        ask_and_answer(store, range(6))
    engine = db.make_engine(store_url)
    try:
        db.downgrade(engine, "0008")  # before the settings generation: no tokenizer recorded
        with engine.connect() as conn:
            names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM prunestore_settings")}
        assert names == {"policy"}
        db.upgrade(engine)
    finally:
        engine.dispose()
    with PruneStore(store_url, tokenizer=char_tokens) as store:  # the tokenizer that counted the tokens
        assert store.tokenizer_name == "helpers:char_tokens" and store.policy == BUDGET
        assert store.verify().ok
        ask_and_answer(store, range(6, 9))
        assert store.verify().ok
    with pytest.raises(TokenizerMismatchError, match="helpers:char_tokens"):
        PruneStore(store_url, tokenizer=len)
    with PruneStore(store_url) as store:  # follows the recorded one
        assert store.tokenizer is char_tokens


def _facts(turns: range) -> list[list[Message]]:
    """Per turn, a fact and some chatter; every third turn refers back to the fact of six turns before."""
    out = []
    for t in turns:
        batch = [Message(f"f{t}", "user", f"fact {t} DEFINE:k{t}", t), Message(f"c{t}", "assistant", "chat " * 6, t)]
        if t >= 6 and t % 3 == 0:
            batch.append(Message(f"r{t}", "user", f"as said REF:k{t - 6}", t))
        out.append(batch)
    return out


@pytest.mark.plain_tables
def test_sessions_from_before_0013_have_no_count_of_comebacks_until_rebuilt(store_url):
    from prunestore import prune

    policy = Policy(budget=30, clear_at_least=10)
    batches = _facts(range(1, 30))
    with PruneStore(store_url, policy=policy) as store:
        for batch in batches[:20]:
            store.append("s", batch)
        assert store.stats("s").comebacks > 0
    engine = db.make_engine(store_url)
    try:
        db.downgrade(engine, "0012")  # before the counts
        db.upgrade(engine)
    finally:
        engine.dispose()
    with PruneStore(store_url) as store:
        assert (store.stats("s").comebacks, store.stats("s").late_joins) == (None, None)
        assert store.stats().comebacks is None  # one session not counted: the store's sum is unknown
        for batch in batches[20:]:
            store.append("s", batch)
        store.pop("s")  # a cut does not start a count either
        assert store.stats("s").comebacks is None and store.verify().ok
        store.append("t", batches[0])  # a new session counts from its start
        assert store.stats("t").comebacks == 0
        store.rebuild()
        expected = prune([m.to_message() for m in store.messages("s")], policy=policy)
        stats = store.stats("s")
        assert (stats.comebacks, stats.late_joins) == (expected.comebacks, expected.late_joins)
        assert stats.comebacks > 0 and store.stats().comebacks == stats.comebacks and store.verify().ok
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE prunestore_sessions SET comebacks = comebacks + 1 WHERE name = 's'"))
        report = store.verify()
        found = [(m.session, m.what, m.subject) for m in report.mismatches]
        assert found == [("s", "session", "comebacks, late joins")]


def _upgraded_to_fill(store_url: str, backend: str, below: str, table: str) -> int:
    """Take the store back to revision `below`, which has no `table`, and up again: the rows the upgrade wrote."""
    from conftest import PARTITIONS

    engine = db.make_engine(store_url)
    try:
        db.downgrade(engine, below)
        assert table not in tables(engine)
        db.upgrade(engine)
        with engine.connect() as conn:
            if backend == "partitioned":  # made like the tables beside it
                inherits = sa.text("SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass(:table)")
                assert conn.execute(inherits, {"table": table}).scalar() == PARTITIONS
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def test_a_store_from_before_0015_gets_its_index_of_who_refers_to_each_key(store_url, backend):
    # Facts that expire at once, some referred to again: those come back as restored, needed by the referrer.
    batches = [
        [Message(m.id, m.role, m.content, m.turn, expires_after_turn=m.turn if m.id[0] == "f" else None) for m in b]
        for b in _facts(range(1, 16))
    ]
    with PruneStore(store_url) as store:
        for name in ("s", "t"):
            for batch in batches:
                store.append(name, batch)
        before = {m.id: store.explain("s", m.id) for m in store.messages("s")}
    needed = {id_: e.needed_by for id_, e in before.items() if e.needed_by}
    assert needed == {f"f{t - 6}": (f"r{t}",) for t in range(9, 16, 3)}  # r6 refers to k0, defined nowhere
    copied = _upgraded_to_fill(store_url, backend, "0014", "prunestore_refs")
    assert copied == 2 * 4  # r6, r9, r12 and r15 in each session
    with PruneStore(store_url) as store:
        assert store.verify().ok
        assert {m.id: store.explain("s", m.id) for m in store.messages("s")} == before
        store.append("s", Message("r99", "user", "again REF:k1", 20))
        assert store.explain("s", "f1").needed_by == ("r99",) and store.verify().ok
        with store.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM prunestore_refs WHERE seq = (SELECT max(seq) FROM prunestore_refs)"))
        found = [(m.what, m.subject) for m in store.verify().mismatches]
        assert found == [("ref", f"k1@{store.messages('s', ['r99'])[0].seq}")]


_WEATHER = [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Rain."},
    {"role": "user", "content": "And now?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "call_2", "content": "Sun."},
    {"role": "user", "content": "Thanks."},
]  # fmt: skip


def test_a_store_from_before_0016_gets_its_index_of_calls(store_url, backend):
    from prunestore.formats import from_openai
    from prunestore.integrations.openai_chat import OPENAI_CHAT

    with PruneStore(store_url) as store:
        for name in ("s", "t"):
            store.append(name, from_openai(_WEATHER))
        assert [m.verdict for m in store.messages("s")][2] == "superseded"  # Rain. goes, and with it call_1
        before = [store.render("s", dropped=d) for d in ("omit", "placeholder")], store.view("s", OPENAI_CHAT)
    copied = _upgraded_to_fill(store_url, backend, "0015", "prunestore_calls")
    assert copied == 2 * 4  # each call made and answered, in each session
    with PruneStore(store_url) as store:
        assert store.verify().ok
        assert ([store.render("s", dropped=d) for d in ("omit", "placeholder")], store.view("s", OPENAI_CHAT)) == before
        assert "superseded" in str(before[0][1].messages)
        with store.engine.begin() as conn:  # without its rows, the pruned result is not read: no reason given
            conn.execute(sa.text("DELETE FROM prunestore_calls WHERE call_id = 'call_1'"))
        assert "superseded" not in str(store.render("t", dropped="placeholder").messages)
        found = sorted((m.session, m.what, m.subject) for m in store.verify().mismatches)
        seqs = [m.seq for m in store.messages("s", ["m1", "call_1"])]
        assert found == sorted((s, "call", f"call_1@{seq}") for s in ("s", "t") for seq in seqs)


def test_the_recall_index_is_made_on_request_and_a_downgrade_below_0021_drops_it(store_url, backend):
    texts = ["Die Straße", "ZEBRA crossing", "nul\x00zebra", "", "zebra again"]  # the last one is in the prompt
    with PruneStore(store_url) as store:
        for name in ("s", "t"):
            store.append(name, [Message(f"m{i}", "tool_output", t, i, tool_key="k") for i, t in enumerate(texts)])
            store.append(name, Message("last", "user", "what was the zebra?", 9))
        before = [store.recall("s", text=words) for words in ("strasse", "zebra", "NUL")]
        assert [[m.id for m in found] for found in before] == [["m0"], ["m1", "m2"], ["m2"]]
        assert recall_index.create(store.engine) and not recall_index.create(store.engine)
        if backend == "sqlite":
            assert recall_index.TABLES <= tables(store.engine)
            with store.engine.connect() as conn:  # each message with text, once
                assert conn.execute(sa.text("SELECT count(*) FROM prunestore_recall")).scalar_one() == 2 * 5
        assert _recall_indexes(store.engine) == (backend != "sqlite")
        assert store.verify().ok
        assert [store.recall("s", text=words) for words in ("strasse", "zebra", "NUL")] == before
    engine = db.make_engine(store_url)
    try:
        db.downgrade(engine, "0020")
        assert not recall_index.TABLES & tables(engine) and not _recall_indexes(engine)
        db.upgrade(engine)
    finally:
        engine.dispose()
    with PruneStore(store_url) as store:
        store.append("s", Message("more", "user", "one more zebra", 10))  # no trigger is left to call the fold
        assert store.verify().ok
        assert [store.recall("s", text=words) for words in ("strasse", "zebra", "NUL")] == before


def _recall_indexes(engine) -> bool:
    """Whether PostgreSQL's two indexes of the recall index are there (never on SQLite)."""
    if engine.dialect.name != "postgresql":
        return False
    with engine.connect() as conn:
        names = [recall_index.PG_TRIGRAMS, recall_index.PG_UNUSUAL]
        found = conn.execute(sa.text("SELECT count(to_regclass(n)) FROM unnest(CAST(:n AS text[])) AS n"), {"n": names})
        return found.scalar_one() == 2
