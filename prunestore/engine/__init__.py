"""The engine: the passes kept up to date one append at a time, with no I/O.

`state` holds the per-message and per-key state and the `Rows` protocol the
engine reads storage through; `maintainer` applies appends; `hashgroups` is
pass 2's index; `prompt` keeps the prompt under a budget; `first` decides
the first append to an empty session as a batch.
"""
