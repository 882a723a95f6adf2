"""``prunestore import``: JSON Lines into the store, with parsing in worker processes.

Workers parse lines, validate them and compute each message's derived
columns (tokens, effective keys, content hash) while the main process
appends the oldest prepared batch; a session's first batch is decided as one
batch (`engine.first.FirstAppend`), later ones incrementally. One transaction per
batch of lines; what a crash leaves behind is whole batches, and rerunning
the import skips what is stored (same-id retries are no-ops). Memory is
bounded by the batches in flight (one per worker, plus the one appended).
"""

from __future__ import annotations

import gzip
import multiprocessing
import os
import signal
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from .appending import Options, check_session_name
from .clock import micros
from .engine.state import MsgState, new_state
from .errors import DuplicateMessageError, InvalidMessageError, PruneStoreError, TurnOrderError, shorten
from .jsonl import parse_line
from .model import KEPT, Message, unchecked
from .sql import db
from .store import PruneStore

Record = tuple  # (session, Message fields as a dict, tokens, defines, refs, hash, metadata, line): cheap to pickle

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ImportSummary:
    """What an import did: `messages` newly stored, `already_stored` skipped as retries, `sessions` written to."""

    messages: int
    sessions: int
    already_stored: int = 0


class ImportInterrupted(Exception):
    """The import was interrupted (Ctrl-C); `summary` is what was committed before it."""

    def __init__(self, summary: ImportSummary) -> None:
        super().__init__("import interrupted")
        self.summary = summary


def prepare_lines(lines: list[bytes], first_number: int, options: Options, source: str) -> list[Record]:
    """Parse and validate lines against the store's `options`; raises `InvalidMessageError` naming the file and
    line. Runs in the worker."""
    records = []
    for number, raw in enumerate(lines, first_number):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidMessageError(
                f"{source}, line {number}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line)"
            ) from None
        if not line.strip():
            continue
        try:
            session, message = parse_line(line, number, session_field=True)
            check_session_name(session)
            state = new_state(message, options.tokens(message))
            options.check(state)
        except InvalidMessageError as exc:
            where = "" if str(exc).startswith("line ") else f"line {number}: "
            raise InvalidMessageError(f"{source}, {where}{exc}") from None
        fields = vars(message)  # the validated Message fields, exactly
        records.append(
            (session, fields, state.tokens, state.defines, state.refs, state.content_hash, state.metadata_json, number)
        )
    return records


def _state(record: Record) -> tuple[str, MsgState]:
    """Rebuild a record validated by the worker, without validating it again."""
    session, fields, tokens, defines, refs, content_hash, metadata_json, _line = record
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
        turn=message.turn,
        message=message,
        tokens=tokens,
        metadata_json=metadata_json,
        at=None if message.at is None else micros(message.at),
        gaps=0 if message.summarizes else None,
        summarizes=message.summarizes,
    )
    return session, state


@contextmanager
def open_bytes(path: Path) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The file's bytes, decompressed when it is gzip; and the raw file, whose position measures progress."""
    with path.open("rb") as raw:
        if raw.read(2) != _GZIP_MAGIC:
            raw.seek(0)
            yield raw, raw
            return
        raw.seek(0)
        with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            yield cast(BinaryIO, unzipped), raw


def line_limit(options: Options) -> int:
    """The longest line an import reads: room for the largest content and metadata the store takes,
    JSON-escaped, so a line too long to store is refused before it is held in memory whole."""
    return 4 * (options.max_content_bytes + options.max_metadata_bytes) + 2**20


def _lines(handle: BinaryIO, limit: int, path: Path) -> Iterator[tuple[int, bytes]]:
    number = 0
    while line := handle.readline(limit + 1):
        number += 1
        if len(line) > limit:
            raise InvalidMessageError(
                f"{path}, line {number}: longer than {limit} bytes, more than a message the store takes can need "
                "(max_content_bytes, max_metadata_bytes)"
            )
        yield number, line


def _chunks(
    files: Iterable[Path], size: int, progress: Callable[[int], None], limit: int
) -> Iterator[tuple[list[bytes], int, str]]:
    for path in files:
        try:
            with open_bytes(path) as (handle, raw):
                chunk: list[bytes] = []
                first, done = 1, 0
                for number, line in _lines(handle, limit, path):
                    chunk.append(line)
                    if len(chunk) == size:
                        progress(raw.tell() - done)
                        done = raw.tell()
                        yield chunk, first, str(path)
                        chunk, first = [], number + 1
                if chunk:
                    yield chunk, first, str(path)
                progress(raw.tell() - done)
        except (OSError, EOFError, zlib.error) as exc:
            raise InvalidMessageError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from None


# Two workers, though preparing a line costs about what appending it does: on a
# shared 2-core machine one worker now and then fell behind (1M messages: 20,000-
# 27,100 a second over four runs, against 26,800-27,900 with two).
_WORKERS = 2


class _Progress:
    """What an import has committed so far."""

    def __init__(self) -> None:
        self.messages = 0
        self.already_stored = 0
        self.sessions: set[str] = set()

    def summary(self) -> ImportSummary:
        return ImportSummary(self.messages, len(self.sessions), self.already_stored)


def import_files(
    store: PruneStore, files: Iterable[Path], batch_size: int = 2000, progress: Callable[[int], None] = lambda n: None
) -> ImportSummary:
    """Append every line of `files` to its session, one transaction per `batch_size` lines.

    A bad line raises `InvalidMessageError` naming its file and line; the
    batches before it stay committed (the message says how many messages),
    so importing the same files again after a fix finishes the job. Ctrl-C
    raises `ImportInterrupted` the same way.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidMessageError(f"batch_size={shorten(batch_size)}: must be a whole number of lines, at least 1")
    done = _Progress()
    # fork where there is one: the worker runs only parsing code, and spawn would
    # re-import the caller's main module (a script without a __main__ guard breaks).
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    workers = min(_WORKERS, os.cpu_count() or 1)
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_worker_setup, initargs=(os.getpid(),)
    )
    try:
        with _between_batches() as interrupted:
            pending: deque[tuple[Future, str]] = deque()
            for chunk, first, source in _chunks(files, batch_size, progress, line_limit(store.options)):
                pending.append((pool.submit(prepare_lines, chunk, first, store.options, source), source))
                if len(pending) > workers:  # the workers prepare the next batches while the oldest is appended
                    _append(store, *pending.popleft(), done)
                    interrupted()
            while pending:
                _append(store, *pending.popleft(), done)
                interrupted()
    except KeyboardInterrupt:
        raise ImportInterrupted(done.summary()) from None
    except PruneStoreError as exc:
        before = f"{done.messages:,} message{'' if done.messages == 1 else 's'}"
        kept = f"; the {before} imported before it are stored" if done.messages else ""
        raise type(exc)(
            f"{exc} (nothing of its batch was written{kept}; importing again skips what is stored)"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    db.analyze(store.engine)  # a bulk load leaves PostgreSQL's statistics behind (see `db.analyze`)
    return done.summary()


@contextmanager
def _between_batches() -> Iterator[Callable[[], None]]:
    """Ctrl-C, noted and acted on between batches: yields a check that raises `KeyboardInterrupt` once one came.

    A KeyboardInterrupt raised wherever the main thread happens to be can land
    inside the database driver or the connection pool, which then print their
    own traceback beside the import's one line. A batch is committed whole or
    not at all either way; this only chooses where the interrupt is felt. A
    second Ctrl-C interrupts at once. Where Ctrl-C is not Python's default
    (ignored, the caller's own handler, or a thread other than the main one),
    nothing changes.
    """
    seen: list[int] = []

    def note(signum: int, frame: object) -> None:
        seen.append(signum)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def check() -> None:
        if seen:
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield check
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield check
        return
    signal.signal(signal.SIGINT, note)
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)


def _worker_setup(parent: int) -> None:
    """Worker initializer: leave Ctrl-C to the importing process, and end the worker when it dies.

    Ctrl-C reaches every process of the terminal's group; the import itself
    stops cleanly and shuts the pool down, so the workers ignore it. An
    import killed outright (SIGKILL, the OOM killer) cannot stop its
    workers, and they would wait for work forever: the forked workers hold the
    queue's write end themselves, so they never see it close. A worker whose
    parent is gone has been re-parented; that is what this watches for.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="prunestore-parent-watch", daemon=True).start()


def _append(store: PruneStore, prepared: Future, source: str, done: _Progress) -> None:
    records: list[Record] = prepared.result()
    by_session: dict[str, list[MsgState]] = {}
    for record in records:
        session, state = _state(record)
        by_session.setdefault(session, []).append(state)
    try:
        deltas = store._append_states(by_session.items())
    except (DuplicateMessageError, TurnOrderError, InvalidMessageError) as exc:
        lines = [
            line for session, fields, *_, line in records if (session, fields["id"]) == (exc.session, exc.message_id)
        ]
        if not lines:
            raise
        line = lines[1] if isinstance(exc, DuplicateMessageError) and len(lines) > 1 else lines[0]
        raise type(exc)(f"{source}, line {line}: {exc}", session=exc.session, message_id=exc.message_id) from None
    appended = sum(d.appended for d in deltas.values())
    done.messages += appended
    done.already_stored += len(records) - appended
    done.sessions.update(name for name, delta in deltas.items() if delta.appended)
