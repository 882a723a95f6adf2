"""A migration is never edited once a release holds it: a new revision changes the schema instead.

`fixtures/released_migrations.json` records, per release tag, the SHA-256 of
every migration file the tag holds. The files must still hash the same; where
the checkout has the tags, each record must also be what the tag holds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RELEASED = json.loads((Path(__file__).parent / "fixtures" / "released_migrations.json").read_text())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("tag", sorted(RELEASED))
def test_no_released_migration_was_edited(tag):
    files = RELEASED[tag]
    assert files, f"{tag} records no migration"
    edited = [path for path, digest in files.items() if _sha256((ROOT / path).read_bytes()) != digest]
    assert not edited, f"edited after {tag} released them (add a new revision instead): {edited}"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=False)


def _tags() -> list[str]:
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        return []
    return [t for t in _git("tag", "--list", "v*").stdout.decode().split() if t]


@pytest.mark.parametrize("tag", _tags() or [pytest.param(None, marks=pytest.mark.skip(reason="no release tags here"))])
def test_each_release_tag_has_its_migrations_recorded(tag):
    listed = _git("ls-tree", "--name-only", tag, "migrations/versions/").stdout.decode().split()
    held = {path: _sha256(_git("show", f"{tag}:{path}").stdout) for path in listed if path.endswith(".py")}
    assert RELEASED.get(tag) == held, f"record {tag}'s migrations in fixtures/released_migrations.json"
