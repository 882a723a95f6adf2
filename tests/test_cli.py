"""The command line over both backends: help everywhere, JSON that parses, exit codes, resumable imports."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from prunestore import Message, Policy, PruneStore
from prunestore.cli import main
from prunestore.sql import db

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "session.jsonl"


def all_commands(group: click.Group, prefix=()):
    for name, command in group.commands.items():
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from all_commands(command, prefix + (name,))


@pytest.mark.parametrize("path", [p for p, _ in all_commands(main)], ids=" ".join)
def test_every_command_has_help(path):
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0
    command = dict(all_commands(main))[path]
    assert command.help and command.help.strip()
    assert "-h, --help" in CliRunner().invoke(main, [*path, "-h"]).output


@pytest.fixture
def cli(store_url):
    runner = CliRunner()

    def run(*args, input=None, code=0):
        result = runner.invoke(main, ["--db", store_url, *args], input=input)
        assert result.exit_code == code, (result.output, result.exception)
        return result.output

    return run


@pytest.mark.plain_tables
def test_db_upgrade_current_downgrade(cli, store_url):
    assert "at revision base" in cli("db", "current")
    assert f"at revision {db.head_revision()}" in cli("db", "upgrade")
    with PruneStore(store_url) as store:
        store.append("s", Message("a", "user", "hi", 0))
    cli("db", "downgrade", "base", input="n\n", code=1)  # asks first: base drops every table
    with PruneStore(store_url) as store:
        assert store.sessions() == ["s"]
    assert "at revision base" in cli("db", "downgrade", "base", input="y\n")
    assert "at revision base" in cli("db", "current")
    assert json.loads(cli("db", "upgrade", "--json")) == {"revision": db.head_revision(), "head": db.head_revision()}
    assert json.loads(cli("db", "downgrade", "0001", "--yes", "--json"))["revision"] == "0001"
    assert json.loads(cli("db", "current", "--json"))["revision"] == "0001"


def test_import_and_db_analyze_refresh_planner_statistics(cli, store_url):
    """PostgreSQL plans from statistics; a bulk import (and `db analyze`) brings them up to date."""
    cli("import", str(EXAMPLE))
    if not store_url.startswith("postgresql"):
        assert "nothing to do" in cli("db", "analyze")
        return
    engine = sa.create_engine(store_url)

    def estimated_and_actual_rows() -> tuple[float, int]:
        with engine.connect() as conn:
            estimated = conn.execute(
                sa.text("SELECT reltuples FROM pg_class WHERE oid = 'prunestore_messages'::regclass")
            )
            return estimated.scalar(), conn.execute(sa.text("SELECT count(*) FROM prunestore_messages")).scalar()

    try:
        estimated, actual = estimated_and_actual_rows()
        assert actual == 12 and estimated == actual  # the import analyzed what it loaded
        with PruneStore(store_url) as store:
            store.append("more", [Message(f"m{i}", "user", f"text {i}", 0) for i in range(30)])
        assert estimated_and_actual_rows() == (12, 42)  # appends leave the statistics alone
        assert "statistics refreshed" in cli("db", "analyze")
        assert estimated_and_actual_rows() == (42, 42)
    finally:
        engine.dispose()


def test_import_then_read_everything_back(cli):
    summary = json.loads(cli("import", str(EXAMPLE), "--json"))
    assert summary["messages"] == 12 and summary["sessions"] == 2
    assert json.loads(cli("sessions", "--json")) == ["billing-3", "support-7"]
    live = json.loads(cli("live", "support-7", "--json"))
    assert [m["id"] for m in live] == ["sys", "u1", "d1", "a1", "u2", "t2", "a2", "u3"]
    assert live[1]["verdict"] == "restored" and live[5]["metadata"] == {
        "tool_call_id": "call_2",
        "name": "account_status",
    }
    stored = json.loads(cli("messages", "support-7", "--json"))
    picked = json.loads(cli("messages", "support-7", "--id", stored[2]["id"], "--id", stored[0]["id"], "--json"))
    assert picked == [stored[0], stored[2]]
    assert {m["id"]: m["verdict"] for m in stored}["d2"] == "duplicate"
    why = json.loads(cli("explain", "support-7", "t1", "--json"))
    assert why["verdict"] == "superseded" and why["superseded_by"] == "t2"
    stats = json.loads(cli("stats", "support-7", "--json"))
    assert stats["messages"] == 10 and stats["live_messages"] == 8
    assert json.loads(cli("verify", "--all", "--json"))["ok"] is True

    table = cli("live", "support-7")
    assert table.splitlines()[0].split() == ["seq", "id", "role", "turn", "tokens", "verdict", "content"]
    assert "restored" in table
    assert "superseded by 't2'" in cli("explain", "support-7", "t1")
    assert "tokens pruned" in cli("stats")
    assert "ok: 2 sessions, 12 messages checked" in cli("verify")


def test_append_reads_json_lines_from_stdin(cli):
    lines = "\n".join(
        json.dumps(m)
        for m in [
            {"id": "a", "role": "user", "content": "DEFINE:k hello", "turn": 0, "expires_after_turn": 0},
            {"id": "b", "role": "user", "content": "REF:k", "turn": 1},
        ]
    )
    assert json.loads(cli("append", "chat", "--json", input=lines)) == {
        "appended": 2,
        "live_added": ["a", "b"],
        "live_removed": [],
        "events": 0,
        "evicted": [],
    }
    assert "0 messages appended (2 already stored)" in cli("append", "chat", input=lines)  # a retry: a no-op
    assert json.loads(cli("append", "chat", "--json", input=lines))["appended"] == 0
    assert [m["verdict"] for m in json.loads(cli("messages", "chat", "--json"))] == ["restored", "kept"]


@pytest.mark.parametrize(
    "command", [["live", "s"], ["stats"], ["sessions"], ["verify", "--all"], ["policy"], ["serve"]]
)
def test_a_command_that_only_reads_creates_no_store(tmp_path, command, monkeypatch):
    """A typo in --db, or an empty folder: one line saying there is no store, and nothing created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PRUNESTORE_URL", raising=False)
    for named in ([], ["--db", f"sqlite:///{tmp_path / 'typo.db'}"]):
        result = CliRunner().invoke(main, [*named, *command])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("Error:") and "no store" in result.output and result.output.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.plain_tables
def test_a_command_that_only_reads_creates_no_tables_in_an_empty_database(cli, store_url):
    assert "no store to read" in cli("stats", code=2)
    engine = db.make_engine(store_url)
    try:
        with engine.connect() as conn:
            assert not [t for t in sa.inspect(conn).get_table_names() if t.startswith("prunestore")]
    finally:
        engine.dispose()
    cli("append", "s", input='{"id": "a", "role": "user", "content": "x", "turn": 0}')  # a write creates it
    assert "1" in cli("stats")


@pytest.mark.parametrize(
    "args, stdin, needle",
    [
        (["live", "nope"], None, "session='nope': no such session"),
        (["explain", "nope", "x"], None, "no such session"),
        (["append", "s"], '{"id": "a", "role": "robot", "content": "x", "turn": 0}', "line 1: role='robot'"),
        (["append", "s"], "not json", "line 1: not valid JSON"),
        (["append", "s"], '{"id": "a", "role": "user", "content": "x"}', "line 1: missing field 'turn'"),
        (["append", "s"], '{"id": "a", "role": "user", "content": "x", "turn": 0, "colour": 1}', "unknown field"),
        (["delete", "nope", "--yes"], None, "no such session"),
    ],
)
def test_errors_are_one_line_and_exit_2(cli, store_url, args, stdin, needle):
    PruneStore(store_url).close()  # a store, empty
    output = cli(*args, input=stdin, code=2)
    assert needle in output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1


def test_an_unsupported_url_is_an_error():
    result = CliRunner().invoke(main, ["--db", "mysql://nobody@nowhere/x", "sessions"])
    assert result.exit_code == 2 and "only sqlite and postgresql" in result.output


def test_verify_exits_1_on_damage_and_rebuild_repairs(cli, store_url):
    cli("import", str(EXAMPLE))
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE prunestore_messages SET verdict = 'kept' WHERE id = 't1'"))
    engine.dispose()
    assert "verdict t1" in cli("verify", code=1)
    assert json.loads(cli("verify", "support-7", "--json", code=1))["ok"] is False
    assert CliRunner().invoke(main, ["--db", store_url, "rebuild"]).exit_code == 2  # needs SESSION or --all
    assert "rebuilt" in cli("rebuild", "--all")
    assert "ok" in cli("verify", "support-7")


def test_delete_asks_unless_yes(cli):
    cli("import", str(EXAMPLE))
    cli("delete", "billing-3", input="n\n", code=1)
    assert "billing-3" in cli("sessions")
    assert "deleted billing-3" in cli("delete", "billing-3", input="y\n")
    cli("delete", "support-7", "--yes")
    assert cli("sessions").strip() == ""


def test_fork_then_truncate(cli):
    cli("import", str(EXAMPLE))
    ids = [m["id"] for m in json.loads(cli("messages", "support-7", "--json"))]
    assert "forked support-7 at u2 into branch" in cli("fork", "support-7", "u2", "branch")
    assert [m["id"] for m in json.loads(cli("messages", "branch", "--json"))] == ids[: ids.index("u2") + 1]
    cli("fork", "support-7", "u2", "branch", code=2)  # the session exists
    cli("truncate", "support-7", "u2", input="n\n", code=1)
    assert len(json.loads(cli("messages", "support-7", "--json"))) == len(ids)
    delta = json.loads(cli("truncate", "support-7", "u2", "--yes", "--json"))
    assert set(delta) == {"live_added", "live_removed", "appended", "events", "evicted"} and delta["live_removed"]
    assert [m["id"] for m in json.loads(cli("live", "support-7", "--json"))] == [
        m["id"] for m in json.loads(cli("live", "branch", "--json"))
    ]
    assert "no longer live" in cli("truncate", "support-7", "u1", "--yes")
    assert cli("verify", "--all").startswith("ok: 3 sessions")


def test_import_a_provider_transcript_and_render_it(store_url, tmp_path):
    fixtures = Path(__file__).parent / "fixtures"
    runner = CliRunner()

    def run(*args, code=0):
        result = runner.invoke(main, ["--db", store_url, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    summary = json.loads(
        run(
            "import",
            "--format",
            "openai",
            "--document-tool",
            "search_docs",
            str(fixtures / "openai_agent.json"),
            "--json",
        ).stdout
    )
    assert summary["messages"] == 298 and summary["sessions"] == 1
    run("import", "--format", "anthropic", "--session", "claude", str(fixtures / "anthropic_agent.json"))
    assert json.loads(run("sessions", "--json").stdout) == ["claude", "openai_agent"]
    rendered = run("render", "openai_agent")
    messages = json.loads(rendered.stdout)
    assert messages[0]["role"] == "system" and "calls removed" in rendered.stderr
    anthropic = json.loads(run("render", "claude", "--format", "anthropic", "--placeholders").stdout)
    assert set(anthropic) == {"system", "messages"} and "[result pruned" in json.dumps(anthropic)
    assert run("render", "claude", "--format", "text").stdout.startswith("system: You are a data analyst")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "robot", "content": "x"}]')
    failed = run("import", "--format", "openai", str(bad), code=2)
    assert "bad.json" in failed.output and "role='robot'" in failed.output
    run("import", "--format", "openai", "--session", "x", str(bad), str(bad), code=2)


def test_import_shows_no_progress_bar_when_piped(cli):
    output = cli("import", str(EXAMPLE))
    assert "importing" not in output and "imported 12 messages in 2 sessions" in output


def _big_import(tmp_path: Path, batch_size: int = 500) -> tuple[str, list[str], int]:
    """A 200,000-line JSON Lines file (long enough to interrupt on a fast machine): the command, URL and line count."""
    lines = [
        json.dumps(
            {
                "session": f"s{i % 7}",
                "id": f"m{i}",
                "role": "retrieved_doc" if i % 3 else "user",
                "content": f"passage {i % 40} REF:k{i % 5}",
                "turn": i // 50,
            }
        )
        for i in range(200_000)
    ]
    source = tmp_path / "big.jsonl"
    source.write_text("\n".join(lines) + "\n")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    command = [sys.executable, "-m", "prunestore.cli", "--db", url, "import", "--batch-size", str(batch_size)]
    return url, [*command, str(source)], len(lines)


def _wait_until_stored(child: subprocess.Popen, url: str, count: int) -> int:
    """Poll the store while `child` imports; return once it holds more than `count` messages (or the import ended)."""
    engine = sa.create_engine(url)
    deadline = time.monotonic() + 60
    stored = 0
    try:
        while time.monotonic() < deadline and child.poll() is None and stored <= count:
            time.sleep(0.05)
            try:
                with engine.connect() as conn:
                    stored = conn.execute(sa.text("SELECT count(*) FROM prunestore_messages")).scalar_one()
            except sa.exc.OperationalError:
                continue
    finally:
        engine.dispose()
    return stored


def _finish_and_check(url: str, command: list[str], total: int) -> None:
    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    with PruneStore(url) as store:
        assert sum(len(store.messages(s)) for s in store.sessions()) == total
        assert store.verify().ok


@pytest.mark.sqlite
def test_an_interrupted_import_resumes(tmp_path):
    """Kill an import half way (SIGKILL), then run it again: everything is stored exactly once."""
    url, command, total = _big_import(tmp_path)
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stored = _wait_until_stored(child, url, 5000)
    workers = _children(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert 0 < stored < total, "the import was not interrupted part way"
    if Path("/proc").is_dir():  # the parsing workers must not outlive a killed import
        assert workers, "no worker processes found"
        deadline = time.monotonic() + 10
        while any(map(_running, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(_running, workers)), "orphaned import workers"
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        partial = conn.execute(sa.text("SELECT count(*) FROM prunestore_messages")).scalar()
    engine.dispose()
    assert partial % 500 == 0  # whole batches only: each transaction holds 500 lines of 7 sessions
    _finish_and_check(url, command, total)


@pytest.mark.sqlite
def test_ctrl_c_stops_an_import_in_one_line_and_loses_nothing(tmp_path):
    url, command, total = _big_import(tmp_path)
    # A terminal's Ctrl-C reaches the whole process group: the import and its workers. The child
    # gets Ctrl-C's default handling even where this run ignores it (a shell's background job).
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    stored = _wait_until_stored(child, url, 3000)
    signalled = time.monotonic()
    os.killpg(child.pid, signal.SIGINT)
    out, err = child.communicate(timeout=60)
    took = time.monotonic() - signalled
    assert child.returncode == 130, (f"{stored} messages stored at Ctrl-C, exit {took:.1f} s later", out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "Interrupted" in err and "run the same command again" in err
    _finish_and_check(url, command, total)


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (Linux /proc; empty elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (a container's init may not reap orphans)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_demo_on_small_sizes(cli):
    rows = json.loads(cli("demo", "--sizes", "5,20", "--json"))
    assert [(r["workload"], r["turns"]) for r in rows] == [(w, n) for w in ("chat", "rag", "agent") for n in (5, 20)]
    assert all(r["incremental_equals_batch"] and r["idempotent"] for r in rows)
    assert all(r["required_kept"] == r["required"] for r in rows)
    refused = cli("demo", "--sizes", "5", code=2)  # the store holds the demo's sessions: they are not replaced silently
    assert "session='agent-5'" in refused and "--replace" in refused and len(refused.strip().splitlines()) == 1
    table = cli("demo", "--sizes", "5", "--replace", "--budget", "600", "--clear-at-least", "200")
    assert "reduction" in table and "incremental state equals batch pruning" in table
    assert "prunestore explain" in table
    peak = re.search(r"prompt at most ([\d,]+) tokens", table)
    assert peak and int(peak[1].replace(",", "")) <= 600
    assert re.search(r"facts in every turn's prompt: (\d+)/\1\b", table)


@pytest.mark.sqlite
def test_bench_prints_side_by_side(tmp_path):
    result = CliRunner().invoke(main, ["bench", "--turns", "5,20", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["turns"] for r in rows] == [5, 20]
    assert all(
        r[k] > 0
        for r in rows
        for k in ("incremental_ms", "incremental_patch_ms", "incremental_live_ms", "batch_ms", "sql_batch_ms")
    )


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "prunestore" in result.output


def test_import_stops_at_a_bad_line_naming_it(cli, tmp_path):
    good = [{"session": "s", "id": f"m{i}", "role": "user", "content": "x", "turn": i} for i in range(4)]
    lines = (
        [json.dumps(m) for m in good[:2]]
        + ['{"session": "s", "id": "bad", "role": "user"}']
        + [json.dumps(m) for m in good[2:]]
    )
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join(lines) + "\n")
    output = cli("import", "--batch-size", "2", str(source), code=2)
    assert "line 3: missing field 'content'" in output
    assert [m["id"] for m in json.loads(cli("messages", "s", "--json"))] == ["m0", "m1"]  # the batch before it


def test_policy_shows_and_changes_the_budget(cli, store_url):
    cli("import", str(EXAMPLE))
    shown = json.loads(cli("policy", "--json"))
    assert shown["budget"] is None and shown["clear_at_least"] == 0 and shown["pinned_roles"] == ["system"]
    assert "budget" not in cli("stats")  # no budget, no budget line
    cli("policy", "--budget", "60", "--clear-at-least", "20", input="n\n", code=1)  # asks first
    assert json.loads(cli("policy", "--json"))["budget"] is None
    changed = json.loads(cli("policy", "--budget", "60", "--clear-at-least", "20", "--yes", "--json"))
    assert (changed["budget"], changed["clear_at_least"]) == (60, 20)
    with PruneStore(store_url) as store:
        assert store.policy == Policy(budget=60, clear_at_least=20)
        assert store.verify().ok
        session = "support-7"
        tokens = sum(m.tokens for m in store.live(session))
        evicted = [m.id for m in store.messages(session) if m.verdict == "evicted"]
    assert evicted  # the example holds more than 60 tokens
    assert "budget: 60 tokens" in cli("stats", session)
    with PruneStore(store_url) as store:
        counts = store.stats(session)
    breaks = f"prompt cache breaks besides events: {counts.comebacks} comebacks, {counts.late_joins} late joins"
    assert breaks in cli("stats", session)
    assert f"prompt: {tokens:,} tokens of a budget of 60" in cli("live", session)
    assert "evicted to stay under the budget of 60 tokens" in cli("explain", session, evicted[0])
    assert "prompt:" in cli("render", session)
    changed = json.loads(cli("policy", "--evict", "definers_last", "--yes", "--json"))
    assert changed["evict"] == "definers_last" and changed["budget"] == 60
    with PruneStore(store_url) as store:
        assert store.policy == Policy(budget=60, clear_at_least=20, evict="definers_last")
        assert store.verify(session).ok
    assert "'oldest'" in cli("policy", "--evict", "newest", code=2)
    assert "'none'" in cli("policy", "--budget", "lots", code=2)
    assert "clear_at_least=-1" in cli("policy", "--clear-at-least", "-1", "--yes", code=2)
    assert json.loads(cli("policy", "--budget", "none", "--clear-at-least", "0", "--yes", "--json"))["budget"] is None
    with PruneStore(store_url) as store:
        assert not [m for m in store.messages(session) if m.verdict in ("evicted", "pending")]


def test_append_says_what_the_budget_evicted(cli):
    cli("policy", "--budget", "20", "--clear-at-least", "5", "--yes")
    first = [
        {"id": "s", "role": "system", "content": "Be brief.", "turn": 0},
        {"id": "u1", "role": "user", "content": "I prefer CSV. DEFINE:format", "turn": 1},
        {"id": "t1", "role": "tool_output", "content": "a.csv b.csv c.csv", "turn": 1, "tool_key": "ls"},
    ]
    later = {"id": "t2", "role": "tool_output", "content": "a.csv b.csv", "turn": 2, "tool_key": "ls"}
    for session in ("a", "b"):
        assert "evicted" not in cli("append", session, input="\n".join(map(json.dumps, first)))
    delta = json.loads(cli("append", "a", "--json", input=json.dumps(later)))
    assert (delta["live_removed"], delta["evicted"]) == (["u1", "t1"], ["u1"])  # t1 superseded, u1 evicted
    assert "1 message appended; live +1 -2 (1 evicted by the budget)" in cli("append", "b", input=json.dumps(later))
