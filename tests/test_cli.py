"""The command line: every command has help, and `db` drives Alembic from code."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from prunestore import Message, PruneStore
from prunestore.cli import main


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


def test_db_upgrade_current_downgrade(store_url):
    runner = CliRunner()
    result = runner.invoke(main, ["--db", store_url, "db", "current"])
    assert result.exit_code == 0 and "current: base" in result.output
    result = runner.invoke(main, ["--db", store_url, "db", "upgrade"])
    assert result.exit_code == 0 and "at revision 0001" in result.output
    with PruneStore(store_url) as store:
        store.append("s", Message("a", "user", "hi", 0))
    result = runner.invoke(main, ["--db", store_url, "db", "downgrade", "base"])
    assert result.exit_code == 0 and "at revision base" in result.output
    result = runner.invoke(main, ["--db", store_url, "db", "current"])
    assert "current: base" in result.output


def test_errors_are_one_line_and_exit_2():
    result = CliRunner().invoke(main, ["--db", "mysql://nobody@nowhere/x", "db", "current"])
    assert result.exit_code == 2
    assert "only sqlite and postgresql" in result.output
    assert "Traceback" not in result.output


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "prunestore" in result.output
