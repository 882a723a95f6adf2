"""The ``prunestore`` command (a thin layer over `PruneStore`)."""

import click


@click.group()
def main() -> None:
    """prunestore: a persistent, incremental prompt-pruning store."""
