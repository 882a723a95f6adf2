"""``python -m prunestore.cli``."""

from . import main

main(prog_name="prunestore")
