"""The command line as a person meets it: bad input is one line and exit 2, machine output parses.

Each test drives the real `prunestore` command (click's runner, or a
process where signals and installs matter) the way a new user would.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from prunestore import Message, PruneStore
from prunestore.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "session.jsonl"
FIXTURES = Path(__file__).parent / "fixtures"


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def one_line_error(result, *needles: str) -> str:
    """The run failed as a person should see it: exit 2, one line on standard error, no traceback."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def cli(store_url):
    def run(*args: str, input: str | None = None, code: int = 0):
        result = invoke("--db", store_url, *args, input=input)
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def lines_file(path: Path, messages: list[dict]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


def user(i: int, session: str = "s", turn: int | None = None) -> dict:
    return {
        "session": session,
        "id": f"m{i}",
        "role": "user",
        "content": f"text {i}",
        "turn": i if turn is None else turn,
    }


# -- the database URL -----------------------------------------------------------


@pytest.mark.parametrize(
    "url, needles",
    [
        ("sqlite://relative.db", ["no host part", "sqlite:///relative.db"]),
        ("prunestore.db", ["not a database URL", "sqlite:///prunestore.db"]),
        ("mysql://me:hunter2@db.example/x", ["only sqlite and postgresql"]),
    ],
)
def test_a_bad_url_says_how_to_write_it(url, needles):
    line = one_line_error(invoke("--db", url, "sessions"), *needles)
    assert "hunter2" not in line


def test_a_password_is_never_echoed():
    # Nothing listens on port 1: the connection fails, and the message must not carry the password.
    result = invoke("--db", "postgresql://me:hunter2@127.0.0.1:1/x", "sessions")
    line = one_line_error(result, "failed")
    assert "hunter2" not in result.output and "hunter2" not in line


def test_db_is_accepted_after_the_command_too(tmp_path):
    url = f"sqlite:///{tmp_path / 'after.db'}"
    result = invoke("import", str(EXAMPLE), "--db", url)
    assert result.exit_code == 0, result.output
    with PruneStore(url) as store:
        assert store.sessions() == ["billing-3", "support-7"]
    elsewhere = f"sqlite:///{tmp_path / 'other.db'}"
    result = invoke("--db", elsewhere, "sessions", "--db", url, "--json")  # the later one wins
    assert json.loads(result.stdout) == ["billing-3", "support-7"]


@pytest.mark.sqlite
def test_a_database_in_a_read_only_folder_can_be_read(tmp_path):
    """WAL mode's side files cannot be made there; the store opens the file read-only and immutable instead."""
    if shutil.which("unshare") is None:
        pytest.fail("needs unshare (util-linux) to make a read-only bind mount")
    source, mounted = tmp_path / "src", tmp_path / "ro"
    source.mkdir()
    mounted.mkdir()
    url = f"sqlite:///{source / 'store.db'}"
    assert invoke("--db", url, "import", str(EXAMPLE)).exit_code == 0
    ro_url = f"sqlite:///{mounted / 'store.db'}"
    prunestore = [sys.executable, "-m", "prunestore.cli", "--db", ro_url]
    script = (
        f"mount --bind {source} {mounted} && mount -o remount,bind,ro {mounted} || exit 99\n"
        f"{' '.join(prunestore)} live support-7 --json > {tmp_path / 'live.json'} || exit 1\n"
        f"echo '{json.dumps(user(99, turn=99)).replace(chr(39), '')}' | "
        f"{' '.join(prunestore)} append > /dev/null 2> {tmp_path / 'append.err'}\n"
        f"echo $? > {tmp_path / 'append.rc'}\n"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=ROOT)
    if done.returncode == 99:
        pytest.fail(f"cannot make a read-only bind mount here: {done.stderr}")
    assert done.returncode == 0, done.stderr
    with PruneStore(url) as store:
        expected = [m.id for m in store.live("support-7")]
    assert [m["id"] for m in json.loads((tmp_path / "live.json").read_text())] == expected
    assert (tmp_path / "append.rc").read_text().strip() == "2"  # a write fails cleanly
    error = (tmp_path / "append.err").read_text()
    assert "readonly database" in error and "Traceback" not in error
    assert "cannot be written here" in error and "INSERT" not in error  # the cause, not the statement
    assert not (source / "store.db-wal").exists()


# -- the schema ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["upgrade", "downgrade"])
def test_an_unknown_revision_is_one_line(cli, command):
    args = ("db", command, "0999") + (("--yes",) if command == "downgrade" else ())
    line = one_line_error(cli(*args, code=2), "revision='0999'", "known: base, 0001")
    assert "0003" in line


def test_downgrade_asks_and_the_question_goes_to_stderr(cli, store_url):
    cli("import", str(EXAMPLE))
    refused = cli("db", "downgrade", "base", "--json", input="n\n", code=1)
    assert "drops every prunestore table" in refused.stderr and refused.stdout == ""
    with PruneStore(store_url) as store:
        assert len(store.sessions()) == 2


# -- importing -------------------------------------------------------------------


def test_invalid_utf8_names_the_file_and_line(cli, tmp_path):
    source = tmp_path / "latin1.jsonl"
    source.write_bytes(b'{"session": "s", "id": "a", "role": "user", "content": "caf\xe9", "turn": 0}\n')
    one_line_error(cli("import", str(source), code=2), "latin1.jsonl, line 1", "not UTF-8")


def test_gzip_files_are_read(cli, store_url, tmp_path):
    packed = tmp_path / "session.jsonl.gz"
    packed.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    summary = json.loads(cli("import", str(packed), "--json").stdout)
    assert summary["messages"] == 12 and summary["sessions"] == 2
    transcript = tmp_path / "agent.json.gz"
    transcript.write_bytes(gzip.compress((FIXTURES / "openai_agent.json").read_bytes()))
    assert json.loads(cli("import", "--format", "openai", str(transcript), "--json").stdout)["messages"] == 298
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(EXAMPLE.read_bytes())[:-20])
    one_line_error(cli("import", str(broken), code=2), "broken.jsonl.gz")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["recall", "s", "--limit", "0"], "--limit"),
        (["sessions", "--bogus"], "--bogus"),
        (["--bogus", "sessions"], "--bogus"),
        (["nosuch"], "nosuch"),
        (["policy", "--prices", "cheap"], "--prices"),
        (["recall"], "SESSION"),
    ],
)
def test_a_usage_error_is_one_line_that_points_to_the_help(cli, args, needle):
    one_line_error(cli(*args, code=2), needle, "--help)")


def test_a_recall_that_finds_nothing_says_so(cli):
    cli("append", "s", input=json.dumps(user(0)) + "\n")
    said = cli("recall", "s", "--text", "zebra").stdout
    assert said == "Nothing matches: no message of session 's' out of the prompt.\n"
    assert json.loads(cli("recall", "s", "--text", "zebra", "--json").stdout) == []


def test_a_question_answered_no_changes_nothing_and_says_so(cli, store_url):
    cli("append", "s", input=json.dumps(user(0)) + "\n")
    refused = cli("erase", "s", "m0", input="n\n", code=1)
    assert refused.stderr.strip().endswith("Nothing done: the answer was no.") and "Aborted" not in refused.output
    with PruneStore(store_url) as store:
        assert store.messages("s")[0].role == "user"


@pytest.mark.parametrize("size", ["0", "-5"])
def test_batch_size_must_be_positive(cli, size):
    result = cli("import", "--batch-size", size, str(EXAMPLE), code=2)
    assert "--batch-size" in result.output and "Traceback" not in result.output


def test_counts_leave_out_what_was_stored_already(cli):
    first = json.loads(cli("import", str(EXAMPLE), "--json").stdout)
    assert (first["messages"], first["already_stored"], first["sessions"]) == (12, 0, 2)
    again = cli("import", str(EXAMPLE))
    assert "imported 0 messages (12 already stored) in 0 sessions" in again.stdout
    line = json.dumps({k: v for k, v in json.loads(EXAMPLE.read_text().splitlines()[0]).items() if k != "session"})
    assert json.loads(cli("append", "support-7", "--json", input=line).stdout)["appended"] == 0


def test_errors_name_the_file_and_say_what_was_kept(cli, store_url, tmp_path):
    good = lines_file(tmp_path / "good.jsonl", [user(i) for i in range(3)])
    bad = lines_file(tmp_path / "bad.jsonl", [user(10, "t"), {"session": "t", "id": "x", "role": "robot"}])
    line = one_line_error(cli("import", str(good), str(bad), code=2), "bad.jsonl, line 2")
    assert "the 3 messages imported before it are stored" in line
    with PruneStore(store_url) as store:
        assert store.sessions() == ["s"]


def test_turn_order_and_duplicate_errors_carry_their_line(cli, tmp_path):
    backwards = lines_file(tmp_path / "backwards.jsonl", [user(0, turn=5), user(1, turn=6), user(2, turn=3)])
    one_line_error(cli("import", str(backwards), code=2), "backwards.jsonl, line 3", "turn=3")
    changed = dict(user(0, turn=5), content="other text")
    clash = lines_file(tmp_path / "clash.jsonl", [user(7, turn=7), changed])
    one_line_error(cli("import", str(clash), code=2), "clash.jsonl, line 2", "id='m0'")


def test_a_transcript_in_the_other_format_is_refused(cli, store_url):
    line = one_line_error(
        cli("import", "--format", "openai", str(FIXTURES / "anthropic_agent.json"), code=2),
        "anthropic_agent.json",
        "not a Chat Completions content part",
        "--format anthropic",
    )
    assert "tool_use" in line or "tool_result" in line
    one_line_error(cli("import", "--format", "anthropic", str(FIXTURES / "openai_agent.json"), code=2), "openai_agent")
    with PruneStore(store_url) as store:
        assert store.sessions() == []


def test_transcripts_are_checked_before_anything_is_written(cli, store_url, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "robot", "content": "x"}]')
    one_line_error(
        cli("import", "--format", "openai", str(FIXTURES / "openai_agent.json"), str(bad), code=2), "bad.json"
    )
    with PruneStore(store_url) as store:
        assert store.sessions() == []


def test_an_empty_transcript_creates_and_reports_nothing(cli, store_url, tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    summary = json.loads(cli("import", "--format", "openai", str(empty), "--json").stdout)
    assert (summary["messages"], summary["sessions"]) == (0, 0)
    with PruneStore(store_url) as store:
        assert store.sessions() == []


def test_keys_given_as_a_string_are_explained_as_a_list(cli):
    line = '{"id": "a", "role": "user", "content": "x", "turn": 0, "refs": "k1"}'
    one_line_error(cli("append", "s", input=line, code=2), "line 1: refs='k1'", "must be a list of keys")


# -- appending -------------------------------------------------------------------


def test_append_follows_the_session_field(cli, store_url):
    lines = "\n".join(json.dumps(user(i, session=f"s{i % 2}")) for i in range(4))
    result = json.loads(cli("append", "--json", input=lines).stdout)
    assert result["appended"] == 4 and set(result["sessions"]) == {"s0", "s1"}
    one_line_error(cli("append", "other", input=json.dumps(user(9, session="s0")), code=2), "session='s0' differs")
    assert json.loads(cli("append", "s0", "--json", input=json.dumps(user(8, session="s0"))).stdout)["appended"] == 1
    one_line_error(cli("append", input=json.dumps({**user(7), "session": None}), code=2), "line 1: no session")
    with PruneStore(store_url) as store:
        assert [m.id for m in store.messages("s0")] == ["m0", "m2", "m8"]


# -- printing ----------------------------------------------------------------------


def leaf_commands(group: click.Group, prefix=()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from leaf_commands(command, prefix + (name,))
        else:
            yield prefix + (name,), command


@pytest.mark.parametrize("path", [p for p, _ in leaf_commands(main)], ids=" ".join)
def test_every_command_takes_json_and_db(path):
    command = dict(leaf_commands(main))[path]
    options = {opt for param in command.params for opt in getattr(param, "opts", [])}
    assert {"--json", "--db"} <= options


@pytest.mark.parametrize("path", [p for p, _ in leaf_commands(main)], ids=" ".join)
def test_every_command_is_documented(path):
    page = (ROOT / "docs" / "cli.md").read_text()
    assert f"`{' '.join(path)}" in page, f"docs/cli.md does not describe {' '.join(path)}"


def test_every_command_prints_json_that_parses(cli, store_url):
    """Each command with --json prints one JSON document on standard output, whatever it asks or reports."""
    cli("import", str(EXAMPLE))
    runs = [
        ("sessions",),
        ("stats",),
        ("stats", "support-7"),
        ("live", "support-7"),
        ("messages", "support-7"),
        ("explain", "support-7", "t1"),
        ("verify",),
        ("render", "support-7"),
        ("render", "support-7", "--format", "anthropic"),
        ("render", "support-7", "--format", "text"),
        ("fork", "support-7", "u2", "branch"),
        ("truncate", "branch", "u1"),  # asks on standard error; answered below
        ("rebuild", "--all"),
        ("rebuild", "support-7"),
        ("delete", "branch"),
        ("db", "current"),
        ("db", "upgrade"),
        ("db", "analyze"),
        ("demo", "--sizes", "3"),
    ]
    for args in runs:
        result = cli(*args, "--json", input="y\n")
        json.loads(result.stdout), args
    rendered = json.loads(cli("render", "support-7", "--json").stdout)
    assert rendered["format"] == "openai" and rendered["report"]["messages_out"] == len(rendered["messages"])
    assert json.loads(cli("fork", "support-7", "u2", "b2", "--json").stdout)["session"] == "b2"


def test_truncate_json_is_not_broken_by_its_question(cli):
    cli("import", str(EXAMPLE))
    result = cli("truncate", "support-7", "u2", "--json", input="y\n")
    assert "Drop every message" in result.stderr
    assert set(json.loads(result.stdout)) == {"live_added", "live_removed", "appended", "events", "evicted"}


def test_control_characters_are_shown_escaped(cli, store_url):
    with PruneStore(store_url) as store:
        store.append("s", Message("a", "user", "nul\x00 esc\x1b[31mred bidi\u202eevil", 0))
    table = cli("live", "s").stdout
    assert "\x00" not in table and "\x1b" not in table and "\u202e" not in table
    assert "nul\\x00 esc\\x1b[31mred bidi\\u202eevil" in table
    assert json.loads(cli("live", "s", "--json").stdout)[0]["content"] == "nul\x00 esc\x1b[31mred bidi\u202eevil"


def test_explain_agrees_in_number(store):
    store.append("s", [Message("d", "user", "DEFINE:k", 0, expires_after_turn=0), Message("r", "user", "REF:k", 1)])
    assert "which 'r' refers to" in store.explain("s", "d").reason
    store.append("s", Message("r2", "user", "REF:k", 1))
    assert "which 'r', 'r2' refer to" in store.explain("s", "d").reason


@pytest.mark.sqlite
def test_bench_plot_without_matplotlib_fails_before_measuring(monkeypatch, tmp_path):
    import prunestore.showcase.bench

    def measured(*args, **kwargs):
        raise AssertionError("the benchmark ran before the missing matplotlib was noticed")

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(prunestore.showcase.bench, "compare_per_turn", measured)
    one_line_error(invoke("bench", "--turns", "5", "--plot", str(tmp_path / "p.png")), ".[plot]")


def test_the_async_store_on_sqlite_needs_no_asyncio_driver(monkeypatch, tmp_path):
    """On SQLite, AsyncPruneStore runs the blocking store in worker threads: no aiosqlite, no greenlet."""
    import asyncio

    from prunestore import AsyncPruneStore

    monkeypatch.setitem(sys.modules, "aiosqlite", None)
    monkeypatch.setitem(sys.modules, "greenlet", None)

    async def main() -> list[str]:
        async with AsyncPruneStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
            await store.append("s", Message("a", "user", "hi", 0))
            return [m.id for m in await store.live("s")]

    assert asyncio.run(main()) == ["a"]


@pytest.mark.sqlite
def test_a_damaged_sqlite_file_is_one_line(tmp_path):
    """Pages of the messages table overwritten: what reads them says so in one line, CLI and API alike."""
    from prunestore import DatabaseError

    path = tmp_path / "damaged.db"
    with PruneStore(f"sqlite:///{path}") as store:
        for n in range(4):
            store.append(f"s{n}", [Message(f"m{i}", "user", f"message {i} " * 40, i) for i in range(300)])
    size = path.stat().st_size
    with open(path, "r+b") as file:  # the store is closed, its log written back: the file is all there is
        for offset in range(size // 3, size - 4096, 16384):
            file.seek(offset)
            file.write(bytes(range(256)) * 16)
    line = one_line_error(invoke("--db", f"sqlite:///{path}", "verify", "--all"))
    assert line.startswith("Error:"), line
    with PruneStore(f"sqlite:///{path}") as store, pytest.raises(DatabaseError) as info:
        for name in store.sessions():
            store.messages(name)
            store.verify(name)
    assert "\n" not in str(info.value)


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ({**user(2), "session": "a\x00b"}, "line 3: session='a\\x00b': must not contain NUL"),
        ({**user(2), "content": "x" * 300}, "line 3: content="),
        ({**user(2), "content": "REF:" + "k" * 1100}, "line 3: content="),
        ({**user(2), "summarizes": ["m9"]}, "line 3: summarizes='m9': no earlier message of the session has this id"),
    ],
)
def test_import_names_the_line_of_a_session_or_content_the_store_refuses(tmp_path, line, needle):
    from prunestore import InvalidMessageError
    from prunestore.importer import import_files

    path = lines_file(tmp_path / "in.jsonl", [user(0), user(1), line])
    with PruneStore(f"sqlite:///{tmp_path / 'store.db'}", max_content_bytes=200) as store:
        with pytest.raises(InvalidMessageError) as info:
            import_files(store, [path])
        assert str(info.value).startswith(f"{path}, {needle}"), str(info.value)
        assert store.sessions() == []  # the batch holding it was not written


@pytest.mark.sqlite
def test_import_refuses_a_line_longer_than_any_message_before_reading_it_whole(tmp_path):
    from prunestore import InvalidMessageError
    from prunestore.importer import import_files, line_limit

    path = tmp_path / "long.jsonl"
    with PruneStore(f"sqlite:///{tmp_path / 'store.db'}", max_content_bytes=100, max_metadata_bytes=100) as store:
        limit = line_limit(store.options)
        path.write_text(json.dumps(user(0)) + "\n" + json.dumps({**user(1), "content": "x" * (limit + 10)}) + "\n")
        with pytest.raises(InvalidMessageError, match=f"line 2: longer than {limit} bytes"):
            import_files(store, [path])


@pytest.mark.parametrize("url", ["postgresql://[::1/x", "sqlite:///" + "a" * 100_000, "postgresql://u@h:notaport/db"])
def test_a_url_nothing_can_open_is_one_line(url):
    line = one_line_error(invoke("--db", url, "stats"), "Error:", "url=")
    assert len(line) < 400


def test_a_missing_folder_and_a_read_only_store_say_so_not_what_sqlite_was_doing(tmp_path):
    missing = tmp_path / "no" / "store.db"
    line = one_line_error(invoke("--db", f"sqlite:///{missing}", "import", str(EXAMPLE)), str(missing.parent))
    assert "schema" not in line and not missing.parent.exists()


def test_a_one_line_file_with_a_bad_message_gets_no_transcript_hint(cli, tmp_path):
    path = lines_file(tmp_path / "one.jsonl", [{k: v for k, v in user(0).items() if k != "content"}])
    line = one_line_error(cli("import", str(path), code=2), "line 1: missing field 'content'")
    assert "transcript" not in line


@pytest.mark.parametrize(
    ("name", "said"),
    [("nosuch", "not a counter"), ("nosuch_module:f", "cannot be imported"), ("os:sep", "is not a function")],
)
def test_a_tokenizer_name_that_names_nothing_is_refused_as_the_callers_choice(tmp_path, name, said):
    from prunestore import InvalidPolicyError

    with pytest.raises(InvalidPolicyError, match=f"tokenizer='{name}': {said}.*; give one of word_pieces"):
        PruneStore(f"sqlite:///{tmp_path / 'store.db'}", tokenizer=name)
    assert not (tmp_path / "store.db").exists()


def test_append_names_the_line_of_a_turn_order_or_duplicate_error(cli):
    first = json.dumps({"id": "a", "role": "user", "content": "x", "turn": 5})
    cli("append", "s", input=first + "\n")
    older = json.dumps({"id": "b", "role": "user", "content": "y", "turn": 2})
    line = one_line_error(cli("append", "s", input=first + "\n\n" + older + "\n", code=2), "line 3:", "turn=2")
    assert "older than the current turn 5" in line
    changed = json.dumps({"id": "a", "role": "user", "content": "other", "turn": 5})
    one_line_error(cli("append", "s", input=changed + "\n", code=2), "line 1:", "id='a'")


def test_a_json_error_names_its_own_line_and_column(cli):
    line = one_line_error(cli("append", "s", input='{"id": "a", "role": "user"\n', code=2), "line 1:")
    assert "column 27" in line and "line 2" not in line


@pytest.mark.parametrize(
    ("args", "lines", "said"),
    [
        (["append", "s"], [user(0)], "1 message appended;"),
        (["append", "s"], [user(0), user(1)], "2 messages appended;"),
    ],
)
def test_counts_are_in_the_singular_for_one(cli, args, lines, said):
    assert said in cli(*args, input="".join(json.dumps(m) + "\n" for m in lines)).stdout
    assert "ok: 1 session, " in cli("verify", "--all").stdout
    assert "\n1 session;" in cli("stats").stdout


def test_python_m_prunestore_is_the_command():
    done = subprocess.run([sys.executable, "-m", "prunestore", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "Usage: prunestore" in done.stdout, done.stderr


def test_an_integration_without_its_extra_says_which_to_install():
    code = "import sys; sys.modules['langchain_core'] = None; import prunestore.integrations.langchain"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "ModuleNotFoundError: prunestore.integrations.langchain needs langchain-core" in done.stderr
    assert "pip install '.[langchain]'" in done.stderr


def test_asyncio_on_postgresql_without_greenlet_says_which_extra():
    code = (
        "import sys; sys.modules['greenlet'] = None\n"
        "from prunestore.sql import db\n"
        "try:\n    db.make_async_engine('postgresql://u@127.0.0.1:9/x')\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.startswith("PruneStoreError") and "install the asyncio extra" in done.stdout, done
    assert "sqlalchemy[asyncio]" not in done.stdout


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (
            ["import", str(FIXTURES / "openai_agent.json")],
            "(a JSON transcript? use --format openai or --format anthropic",
        ),
        (
            ["import", "--format", "anthropic", str(FIXTURES / "openai_agent.json")],
            "(an OpenAI transcript? use --format openai)",
        ),
        (
            ["import", "--format", "openai", str(FIXTURES / "anthropic_agent.json")],
            "(an Anthropic transcript? use --format anthropic)",
        ),
        (["import", "--format", "openai", str(EXAMPLE)], "(JSON Lines? import them without --format)"),
    ],
)
def test_a_file_of_the_other_kind_gets_one_hint(cli, args, hint):
    line = one_line_error(cli(*args, code=2), hint)
    assert line.count("transcript?") + line.count("JSON Lines?") == 1, line


def test_a_missing_message_is_worded_one_way(cli):
    cli("append", "s", input=json.dumps({"id": "a", "role": "user", "content": "x", "turn": 1}) + "\n")
    lines = [
        one_line_error(cli(*args, code=2), "='nope': no such message in session 's'")
        for args in (["explain", "s", "nope"], ["messages", "s", "--id", "nope"], ["truncate", "s", "nope", "--yes"])
    ]
    assert len(lines) == 3


def test_a_negative_budget_and_a_missing_session_say_what_is_wanted(cli):
    assert "at least 1, or 'none'" in cli("policy", "--budget", "-5", code=2).stderr
    line = one_line_error(
        cli("append", input=json.dumps({"id": "a", "role": "user", "content": "x", "turn": 1}), code=2)
    )
    assert "line 1: no session" in line and "None" not in line


def test_a_text_prompt_shows_control_characters_escaped_and_keeps_its_lines(cli):
    hostile = {"id": "a", "role": "user", "content": "one\x00two\u202eevil\nnext\tline", "turn": 1}
    cli("append", "s", input=json.dumps(hostile) + "\n")
    shown = cli("render", "s", "--format", "text").stdout
    assert "\x00" not in shown and "\u202e" not in shown
    assert "one\\x00two\\u202eevil\nnext\tline" in shown


def test_stats_shows_budget_verdicts_only_under_a_budget_and_names_sessions_over_it(cli, store_url):
    cli("import", str(EXAMPLE))
    shown = cli("stats").stdout
    assert "evicted" not in shown and "pending" not in shown
    cli("policy", "--budget", "5", "--clear-at-least", "1", "--yes")  # the system prompt alone is over it
    shown = cli("stats").stdout
    assert "evicted" in shown and "sessions over budget: 2 (billing-3, support-7)" in shown


def test_live_tail_and_messages_as_json_lines_that_import_takes_back(cli, tmp_path):
    cli("import", str(EXAMPLE))
    every = json.loads(cli("live", "support-7", "--json").stdout)
    assert json.loads(cli("live", "support-7", "--tail", "2", "--json").stdout) == every[-2:]
    dump = tmp_path / "dump.jsonl"
    dump.write_text(cli("messages", "support-7", "--jsonl").stdout)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert invoke("--db", other, "import", str(dump)).exit_code == 0
    again = json.loads(invoke("--db", other, "messages", "support-7", "--json").stdout)
    assert again == json.loads(cli("messages", "support-7", "--json").stdout)


def test_demo_says_when_its_budget_run_went_over_and_refuses_a_negative_budget_first(cli):
    shown = cli("demo", "--sizes", "20", "--budget", "100", "--clear-at-least", "10")
    assert "over the budget at" in shown.stdout and "0.00M" not in shown.stdout
    assert re.search(r"prompt cache .*, against [0-9.]+k sending everything", shown.stderr)
    assert re.search(r"the rules alone, as above: [0-9.]+k \([0-9.]+x (less|more)\)", shown.stdout)
    assert re.search(r"under Policy\(budget=100, clear_at_least=10\): [0-9.]+k \([0-9.]+x less\)", shown.stdout)
    assert re.search(r'with evict="definers_last" .*: [0-9.]+k \([0-9.]+x less\), comebacks \d+ -> \d+', shown.stdout)
    refused = cli("demo", "--sizes", "20", "--budget", "-1", code=2)
    assert refused.stdout == "" and "writing the demo" not in refused.stderr and "--budget" in refused.stderr


def test_append_on_a_terminal_says_what_it_reads_and_how_to_end(tmp_path):
    """A person who types `prunestore append s` at a prompt is told that it waits for lines, and how to end them."""
    import os
    import pty

    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "prunestore", "--db", f"sqlite:///{tmp_path / 's.db'}", "append", "s"]
    child = subprocess.Popen(command, stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(follower)
    os.write(leader, b'{"id": "a", "role": "user", "content": "typed", "turn": 1}\n\x04')  # a line, then Ctrl-D
    out, err = child.communicate(timeout=60)
    os.close(leader)
    assert "Reading JSON Lines" in err and "Ctrl-D" in err
    assert child.returncode == 0 and "1 message appended" in out
