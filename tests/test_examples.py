"""The examples run as tests, so they cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, cwd: Path, url: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PRUNESTORE_URL"}
    if url:
        env["PRUNESTORE_URL"] = url
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_chatbot_turns_on_the_sqlite_default(tmp_path):
    first = run_example("chatbot_turns.py", tmp_path)
    assert (tmp_path / "prunestore.db").exists()
    assert "u0: restored" in first and "verify: ok" in first
    second = run_example("chatbot_turns.py", tmp_path)  # the history is on disk; the session goes on
    assert "86 messages stored" in second and "verify: ok" in second


def test_chatbot_turns_on_the_test_backend(store_url, tmp_path):
    output = run_example("chatbot_turns.py", tmp_path, store_url)
    assert "verify: ok" in output


def test_evicted_notes_change_the_system_prompt_at_events_only(tmp_path):
    output = run_example("evicted_notes.py", tmp_path)
    changes, events = map(int, re.search(r"changed (\d+) times, at (\d+) events", output).groups())
    assert changes == events > 0  # a new note only where an event evicted, and one at each
    tokens = int(re.search(r"(\d+) tokens of a budget of 150", output).group(1))
    assert 0 < tokens <= 150
    assert "no longer shown:\n- turn " in output
    assert "recalled: Day 1: which museum opens early near stop 1?" in output


ROOT = EXAMPLES.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(language: str, page: Path) -> list[str]:
    return [b.split("```", 1)[0] for b in page.read_text().split(f"```{language}\n")[1:]]


def test_the_docs_have_python_to_run():
    assert blocks("python", ROOT / "README.md") and len(DOCS) >= 8
    assert sum(bool(blocks("python", page)) for page in DOCS) >= 4


@pytest.mark.parametrize("page", [p for p in DOCS if blocks("python", p)], ids=lambda p: p.name)
def test_python_blocks_run_alone_and_twice(page, tmp_path, monkeypatch):
    """Each block of each page as a reader would try it: alone, in an empty folder, and then once more."""
    found = blocks("python", page)
    monkeypatch.delenv("PRUNESTORE_URL", raising=False)
    for number, block in enumerate(found):
        folder = tmp_path / f"block{number}"
        folder.mkdir()
        monkeypatch.chdir(folder)
        for _ in range(2):
            exec(compile(block, f"{page.name} block {number}", "exec"), {})


def test_readme_json_lines_are_the_example_files_lines():
    example = (EXAMPLES / "session.jsonl").read_text().splitlines()
    (block,) = blocks("json", ROOT / "docs" / "cli.md")
    assert block.strip() and all(line in example for line in block.strip().splitlines())


def test_readme_quick_start_matches_ci():
    readme = (EXAMPLES.parent / "README.md").read_text()
    ci = (EXAMPLES.parent / ".ci" / "run").read_text()
    test_command = "python -m pip install -e '.[test]' && python -m pytest"
    assert test_command in readme and test_command in ci
    assert "python -m pip install . && prunestore demo" in readme


def test_langchain_agent_example(store_url, tmp_path):
    first = run_example("langchain_agent.py", tmp_path, store_url)
    assert "file listings in the prompt: 1" in first and "verify: ok" in first
    second = run_example("langchain_agent.py", tmp_path, store_url)  # the session goes on
    assert "Write report 2." in first and "Write report 20." in second and "verify: ok" in second


def test_langchain_create_agent_example(store_url, tmp_path):
    first = run_example("langchain_create_agent.py", tmp_path, store_url)
    assert "Write report 2. the model saw 13 of 17 messages" in first
    assert "file listings in the prompt: 1" in first and "checkpointed: 18 messages" in first and "verify: ok" in first
    second = run_example("langchain_create_agent.py", tmp_path, store_url)  # the thread goes on
    assert "Write report 5. the model saw 25 of 35 messages" in second and "verify: ok" in second


def test_recall_tool_example(store_url, tmp_path):
    for _ in range(2):  # each run starts the thread afresh
        out = run_example("recall_tool.py", tmp_path, store_url)
        assert "recall returned:\n[tool_output, turn 1] price of lamp: 240 EUR\nprice readings" in out
        assert "price readings in the prompt: ['price of lamp: 255 EUR']" in out and "verify: ok" in out


def test_pydantic_ai_agent_example(store_url, tmp_path):
    first = run_example("pydantic_ai_agent.py", tmp_path, store_url)
    assert "Write report 2. the model saw 13 messages; stored: 18" in first
    assert "file listings in the prompt: 1" in first and "verify: ok" in first
    second = run_example("pydantic_ai_agent.py", tmp_path, store_url)  # the conversation goes on
    assert "Write report 5. the model saw 25 messages; stored: 36" in second and "verify: ok" in second


def test_openai_agents_session_example(store_url, tmp_path):
    first = run_example("openai_agents_session.py", tmp_path, store_url)
    assert "the next run sends 8 of 12 items; 1 file listing call with its output" in first and "verify: ok" in first
    second = run_example("openai_agents_session.py", tmp_path, store_url)  # the session goes on
    assert "of 24 items; 1 file listing call" in second and "verify: ok" in second


def test_anthropic_messages_example(store_url, tmp_path):
    first = run_example("anthropic_messages.py", tmp_path, store_url)
    assert "Once more for Paris?             -> It is sunny.       prompt: 9 messages" in first
    assert "calls in the prompt: Oslo, Paris; stored: 12 messages" in first and "verify: ok" in first
    second = run_example("anthropic_messages.py", tmp_path, store_url)  # the session goes on
    assert "calls in the prompt: Oslo, Paris; stored: 24 messages" in second and "verify: ok" in second


def test_openai_responses_example(store_url, tmp_path):
    first = run_example("openai_responses.py", tmp_path, store_url)
    assert "Once more, what is in /data?   -> It holds a.csv and b.csv.  input: 11 items" in first
    assert "calls in the input: /logs, /data; stored: 15 items" in first and "verify: ok" in first
    second = run_example("openai_responses.py", tmp_path, store_url)  # the session goes on
    assert "calls in the input: /logs, /data; stored: 30 items" in second and "verify: ok" in second


def test_fastapi_chatbot_over_http(store_url, monkeypatch):
    """Two sessions, driven over HTTP: each prompt holds one file listing however often files are listed."""
    import importlib.util

    from fastapi.testclient import TestClient

    monkeypatch.setenv("PRUNESTORE_URL", store_url)
    spec = importlib.util.spec_from_file_location("fastapi_chatbot", EXAMPLES / "fastapi_chatbot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with TestClient(module.app) as client:
        sizes = []
        for n in range(4):
            for session in ("alice", "bob"):
                response = client.post(f"/sessions/{session}/messages", json={"content": f"Which files now? ({n})"})
                assert response.status_code == 200, response.text
                body = response.json()
                assert body["reply"] == "There are 2 files."
                if session == "alice":
                    sizes.append((body["prompt_messages"], body["stored_messages"]))
        assert client.post("/sessions/alice/messages", json={"content": "hello"}).json()["reply"] == "You said: hello"
        prompt = client.get("/sessions/alice/prompt").json()
        unknown = client.get("/sessions/nobody/prompt")
        assert unknown.status_code == 404 and "nobody" in unknown.json()["detail"]
    assert sum(1 for m in prompt if m["role"] == "tool") == 1  # older listings superseded, with their calls
    assert sizes[-1][1] == 16 and sizes[-1][0] < sizes[-1][1]  # 4 turns x 4 messages stored; fewer sent


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def test_every_link_between_the_docs_resolves():
    """Relative links in the README and docs/ name a file that exists, and a heading in it where they give one."""
    import re

    root = EXAMPLES.parent
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md":
                headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), flags=re.M)}
                if anchor not in headings:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def _brought(line: str) -> set[str]:
    """The distributions a `pip install` line of this project brings, as far as they are installed here (by
    normalized name): prunestore's dependencies, its extras' (from the installed metadata, so the wheel's too)
    and the other names', transitively."""
    from importlib import metadata

    from packaging.requirements import Requirement

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    ours = [Requirement(r) for r in metadata.requires("prunestore") or []]
    todo = [r for r in ours if r.marker is None]
    for word in line.split()[2:]:
        extras = re.fullmatch(r"'?\.(?:\[([\w,-]+)\])?'?", word)
        if extras is None:
            todo.append(Requirement(word.strip("'")))
            continue
        for extra in (extras.group(1) or "").split(",") if extras.group(1) else []:
            assert norm(extra) in map(norm, metadata.metadata("prunestore").get_all("Provides-Extra") or [])
            todo += [r for r in ours if r.marker is not None and r.marker.evaluate({"extra": norm(extra)})]
    found: set[str] = set()
    while todo:
        requirement = todo.pop()
        if norm(requirement.name) in found:
            continue
        found.add(norm(requirement.name))
        try:
            requires = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            nested = Requirement(text)
            if nested.marker is None or any(nested.marker.evaluate({"extra": e}) for e in {*requirement.extras, ""}):
                todo.append(nested)
    return found


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_an_examples_install_line_brings_what_it_imports(example):
    """What an example imports comes with the install line in its docstring (none: the project alone), so a
    dependency that stops bringing another (as the OpenAI SDK stopped bringing httpx) fails here."""
    from importlib import metadata

    source = (EXAMPLES / example).read_text()
    line = re.search(r"^ *(pip install .*?)(?:  +#.*)?$", source, re.MULTILINE)
    brought = _brought(line.group(1) if line else "pip install .")
    distributions = metadata.packages_distributions()
    imported = set(re.findall(r"^(?:import|from) (\w+)", source, re.MULTILINE)) - set(sys.stdlib_module_names)
    for module in sorted(imported - {"prunestore"}):
        names = {re.sub(r"[-_.]+", "-", d).lower() for d in distributions.get(module, [])}
        assert names & brought, f"{example} imports {module} ({names}); its install line does not bring it"
