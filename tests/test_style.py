"""The linter and the type checker, run as tests so that CI fails on a finding."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "prunestore", "tests", "examples", "bench"],
        ["ruff", "format", "--check", "prunestore", "tests", "examples", "bench"],
        ["mypy"],
    ],
    ids=["ruff check", "ruff format", "mypy"],
)
def test_clean(command):
    tool = shutil.which(command[0], path=str(Path(sys.executable).parent)) or shutil.which(command[0])
    assert tool, f"{command[0]} is not installed: pip install -e '.[test]'"
    run = subprocess.run([tool, *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
