"""The ``prunestore`` command: a thin layer over the library.

Every command opens the store, makes one call and prints the result: aligned
tables for people, ``--json`` for machines. A `PruneStoreError` becomes one
line on standard error and exit status 2; ``verify`` exits 1 on a mismatch.
"""

from . import cost, reading, schema, serve, showcase, writing  # noqa: F401 (importing them adds their commands to main)
from .common import main

__all__ = ["main"]
