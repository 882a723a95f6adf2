"""``python -m prunestore.cli``."""

from . import main

main()
