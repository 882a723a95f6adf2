"""``prunestore import``: JSON Lines into the store, with parsing in worker processes.

Workers parse lines, validate them and compute each message's derived
columns (tokens, effective keys, content hash) while the main process
appends the oldest prepared batch; a session's first batch is decided as one
batch (`audit.FirstAppend`), later ones incrementally. One transaction per
batch of lines; what a crash leaves behind is whole batches, and rerunning
the import skips what is stored (same-id retries are no-ops). Memory is
bounded by the batches in flight (one per worker, plus the one appended).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import db
from .incremental import MsgState, new_state
from .jsonl import parse_line
from .model import KEPT, Message, unchecked
from .store import PruneStore

__all__ = ["ImportSummary", "import_files"]

Record = tuple  # (session, Message fields as a dict, tokens, defines, refs, hash, metadata): cheap to pickle


@dataclass(frozen=True)
class ImportSummary:
    messages: int
    sessions: int


def prepare_lines(lines: list[bytes], first_number: int, tokenizer: Callable[[str], int]) -> list[Record]:
    """Parse and validate lines; raises `InvalidMessageError` naming the line. Runs in the worker."""
    records = []
    for number, raw in enumerate(lines, first_number):
        line = raw.decode("utf-8")
        if not line.strip():
            continue
        session, message = parse_line(line, number, session_field=True)
        state = new_state(message, tokenizer(message.content))
        fields = vars(message)  # the validated Message fields, exactly
        records.append(
            (session, fields, state.tokens, state.defines, state.refs, state.content_hash, state.metadata_json)
        )
    return records


def _state(record: Record) -> tuple[str, MsgState]:
    """Rebuild a record validated by the worker, without validating it again."""
    session, fields, tokens, defines, refs, content_hash, metadata_json = record
    message = unchecked(Message, fields)
    state = MsgState(
        0,
        fields["id"],
        fields["role"],
        fields["tool_key"],
        fields["expires_after_turn"],
        defines,
        refs,
        content_hash,
        KEPT,
        False,
        message=message,
        tokens=tokens,
        metadata_json=metadata_json,
    )
    return session, state


def _chunks(files: Iterable[Path], size: int, progress: Callable[[int], None]) -> Iterator[tuple[list[bytes], int]]:
    for path in files:
        with path.open("rb") as handle:
            chunk: list[bytes] = []
            first = 1
            for number, raw in enumerate(handle, 1):
                chunk.append(raw)
                if len(chunk) == size:
                    progress(sum(map(len, chunk)))
                    yield chunk, first
                    chunk, first = [], number + 1
            if chunk:
                progress(sum(map(len, chunk)))
                yield chunk, first


# Two workers, though preparing a line costs about what appending it does: on a
# shared 2-core machine one worker now and then fell behind (1M messages: 20,000-
# 27,100 a second over four runs, against 26,800-27,900 with two).
_WORKERS = 2


def import_files(
    store: PruneStore, files: Iterable[Path], batch_size: int = 2000, progress: Callable[[int], None] = lambda n: None
) -> ImportSummary:
    """Append every line of `files` to its session, one transaction per `batch_size` lines."""
    count = 0
    sessions: set[str] = set()
    # fork where there is one: the worker runs only parsing code, and spawn would
    # re-import the caller's main module (a script without a __main__ guard breaks).
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    workers = min(_WORKERS, os.cpu_count() or 1)
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_exit_with_parent, initargs=(os.getpid(),)
    ) as pool:
        pending: deque[Future] = deque()
        for chunk, first in _chunks(files, batch_size, progress):
            pending.append(pool.submit(prepare_lines, chunk, first, store.tokenizer))
            if len(pending) > workers:  # the workers prepare the next batches while the oldest is appended
                count += _append(store, pending.popleft().result(), sessions)
        while pending:
            count += _append(store, pending.popleft().result(), sessions)
    db.analyze(store.engine)  # a bulk load leaves PostgreSQL's statistics behind (see `db.analyze`)
    return ImportSummary(count, len(sessions))


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: end the worker when the import dies.

    An import killed outright (SIGKILL, the OOM killer) cannot stop its
    workers, and they would wait for work forever: the forked workers hold the
    queue's write end themselves, so they never see it close. A worker whose
    parent is gone has been re-parented; that is what this watches for.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="prunestore-parent-watch", daemon=True).start()


def _append(store: PruneStore, records: list[Record], sessions: set[str]) -> int:
    by_session: dict[str, list[MsgState]] = {}
    for record in records:
        session, state = _state(record)
        by_session.setdefault(session, []).append(state)
    store._append_states(by_session.items())
    sessions.update(by_session)
    return len(records)
