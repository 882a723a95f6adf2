"""prunestore as a plain (not editable) install: the wheel, installed into a fresh virtual environment.

The rest of the suite runs on an editable install, which sees every file of
the source tree and so cannot notice one the wheel leaves out. Here the
wheel is built and installed, and the examples and integration tests run
against it from a folder outside the source tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import INSTALLED_ENV

ROOT = Path(__file__).resolve().parents[1]
INTEGRATION_TESTS = [
    "test_examples.py",
    "test_langchain.py",
    "test_langchain_agents.py",
    "test_openai_agents.py",
    "test_anthropic_messages.py",
    "test_openai_responses.py",
    "test_pydantic_ai.py",
    "test_recall_tools.py",
    "test_usage_tokens.py",
    "test_web_app.py",
    "test_web.py",
]

pytestmark = [pytest.mark.slow, pytest.mark.sqlite]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From a copy: setuptools reuses a build/ folder left in the tree, which may hold modules the wheel would miss.
    source = tmp_path_factory.mktemp("source") / "prunestore"
    leave_out = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__", "*.db*")
    shutil.copytree(ROOT, source, ignore=leave_out)
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        str(source),
    ]
    subprocess.run(build, check=True, capture_output=True)
    (built,) = out.glob("prunestore-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The python of a fresh virtual environment holding the wheel (its dependencies: this environment's)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # The dependencies come from this environment, after the venv's own packages. A path line in a
    # .pth file is only appended to sys.path: the .pth files there (this editable install) are not run.
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_the_wheel_holds_every_module_of_the_source_tree(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = [p.relative_to(ROOT).as_posix() for p in (ROOT / "prunestore").rglob("*.py")]
    migrations = ["prunestore/" + p.relative_to(ROOT).as_posix() for p in (ROOT / "migrations").rglob("*.py")]
    templates = [p.relative_to(ROOT).as_posix() for p in (ROOT / "prunestore" / "web" / "templates").iterdir()]
    missing = [name for name in sources + migrations + templates + ["prunestore/py.typed"] if name not in names]
    assert not missing, f"left out of the wheel: {missing}"


def test_examples_and_integrations_run_on_the_installed_wheel(installed, tmp_path):
    """The integration tests, the web view and every example (test_examples runs them), outside the source tree."""
    copy = tmp_path / "outside"
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "examples", copy / "examples", ignore=shutil.ignore_patterns("__pycache__", "*.db*"))
    for name in ("README.md", "CHANGELOG.md", ".ci", "docs"):  # the docs and the files they link to
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, copy / name)
    env = {**os.environ, INSTALLED_ENV: str(installed.parent.parent)}
    env.pop("PRUNESTORE_URL", None)
    run = subprocess.run(
        [str(installed), "-m", "pytest", "-q", "-p", "no:cacheprovider", *(f"tests/{t}" for t in INTEGRATION_TESTS)],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout


@pytest.mark.parametrize(
    "command",
    [
        [
            "-c",
            "from prunestore import Message, PruneStore; s = PruneStore('sqlite:///{db}'); "
            "s.append('s', Message('a', 'user', 'hi', 0)); print(len(s.live('s')), s.verify().ok)",
        ],
        ["-m", "prunestore.cli", "--db", "sqlite:///{db}", "db", "current"],
    ],
    ids=["python -c", "python -m prunestore.cli"],
)
def test_the_install_works_from_the_checkout_root(installed, tmp_path, command):
    """Run from the checkout, the source tree's prunestore/ shadows the install; the migrations are still found."""
    args = [part.replace("{db}", str(tmp_path / "root.db")) for part in command]
    run = subprocess.run([str(installed), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "1 True" in run.stdout or "at revision" in run.stdout


def test_cost_on_the_demos_store_gives_the_benchmarks_figures(installed, tmp_path):
    """`prunestore cost`, installed, prices the demo's sessions as bench/cost.py prices the same sessions."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"

    def run(*args: str) -> str:
        done = subprocess.run([str(installed), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    run("-m", "prunestore.cli", "--db", url, "demo", "--sizes", "200", "--budget", "0")
    for session in ("agent-200", "chat-200"):
        budget = ["--budget", "3000"]
        # The demo's policy has no prices: the replays take the default preset, the benchmark's.
        ours = json.loads(
            run("-m", "prunestore.cli", "--db", url, "cost", session, *budget, "--clear-at-least", "1000", "--json")
        )
        bench = json.loads(
            run(
                str(ROOT / "bench" / "cost.py"),
                "--db",
                url,
                "--sessions",
                session,
                *budget,
                "--clear",
                "1000",
                "--json",
            )
        )
        by_strategy = {row["strategy"]: row for row in bench}
        assert set(by_strategy) == {
            "send everything",
            "prunestore, the store's policy",
            "prunestore, the store's policy, budget 3000, events >= 1000",
        }
        store_policy, budgeted = ours
        assert budgeted["policy"]["budget"] == 3000 and store_policy["policy"]["budget"] is None
        for replay, strategy in zip(ours, list(by_strategy)[1:], strict=True):
            row = by_strategy[strategy]
            assert replay["cost"] == pytest.approx(row["cost"], rel=1e-12), strategy
            assert replay["breaks"] == row["breaks"] and replay["peak"] == row["peak"], strategy
            assert replay["cost_everything"] == pytest.approx(by_strategy["send everything"]["cost"], rel=1e-12)
            assert replay["turns"] == row["turns"]
        assert budgeted["cost"] < store_policy["cost"]  # the figures differ where the policies do
