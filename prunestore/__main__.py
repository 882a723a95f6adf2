"""``python -m prunestore``: the ``prunestore`` command."""

from .cli import main

main(prog_name="prunestore")
