"""Every error prunestore raises on purpose derives from `PruneStoreError`.

Database errors are wrapped (and chained with ``raise ... from``) so callers
need to catch exactly one base class.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc

__all__ = [
    "PruneStoreError",
    "InvalidMessageError",
    "InvalidPolicyError",
    "InvalidArgumentError",
    "DuplicateMessageError",
    "TurnOrderError",
    "SessionNotFoundError",
    "StoreNotFoundError",
    "MessageNotFoundError",
    "SessionExistsError",
    "PolicyMismatchError",
    "TokenizerMismatchError",
    "InvalidRevisionError",
    "SessionIdCollisionError",
    "DatabaseError",
    "shorten",
]


class PruneStoreError(Exception):
    """Base class of every error prunestore raises on purpose."""


class InvalidPolicyError(PruneStoreError, ValueError):
    """A `Policy` field has a bad type or value."""


class InvalidArgumentError(PruneStoreError, ValueError):
    """An argument of a call (other than a message, a session name or a policy) has a bad type or value."""


class _MessageError(PruneStoreError):
    """An error about one message of a session; `session` and `message_id` name it when known."""

    def __init__(self, text: str, *, session: str | None = None, message_id: str | None = None) -> None:
        super().__init__(text)
        self.session = session
        self.message_id = message_id


class InvalidMessageError(_MessageError, ValueError):
    """A message field (or a session name) has a bad type or value; where the session's other messages make
    it so (a summary of ids it does not hold), `session` and `message_id` name it."""


class DuplicateMessageError(_MessageError):
    """A message id already in the session was appended with different fields."""


class TurnOrderError(_MessageError):
    """A message's turn is lower than the session's current turn."""


class SessionNotFoundError(PruneStoreError, KeyError):
    """A read named a session the store does not hold."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


def no_such_message(field: str, message_id: object, session: str) -> MessageNotFoundError:
    """The one wording of a message id a session does not hold."""
    return MessageNotFoundError(f"{field}={shorten(message_id)}: no such message in session {shorten(session)}")


class StoreNotFoundError(PruneStoreError):
    """A store opened with ``create=False`` where there is none (a SQLite file that does not exist, an empty
    database): nothing was created."""


class MessageNotFoundError(PruneStoreError, KeyError):
    """A read named a message id the session does not hold."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class SessionExistsError(PruneStoreError):
    """A fork named a new session that the store already holds."""


class SessionIdCollisionError(PruneStoreError):
    """A session name whose id (`prunestore.sessionids`) is already another stored session's.

    `session` is the name asked for and `holder` the stored session's name;
    nothing was written. Another name for the new session is the way out.
    """

    def __init__(self, text: str, *, session: str, holder: str) -> None:
        super().__init__(text)
        self.session = session
        self.holder = holder


class PolicyMismatchError(PruneStoreError):
    """A store was opened with a policy other than the one it was created with."""


class TokenizerMismatchError(PruneStoreError):
    """A store was opened with a tokenizer other than the one that counted its tokens, or that one cannot be loaded."""


class InvalidRevisionError(PruneStoreError, ValueError):
    """A schema revision the installed migrations do not know."""


class DatabaseError(PruneStoreError):
    """The database failed; the original SQLAlchemy error is chained."""


def shorten(value: object, limit: int = 60) -> str:
    """A repr of `value` short enough to put in an error message."""
    try:
        text = repr(value)
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply to show>"
    except ValueError:  # an int past Python's digit limit, alone or inside a container
        if isinstance(value, int):
            return f"<an int of {value.bit_length()} bits>"
        return f"<{type(value).__name__} holding an int too long to show>"
    if len(text) <= limit:
        return text
    return text[: limit - 15] + f"...({len(text)} chars)"


# Causes a database names in words of its own, said as a user meets them: what was being done (often a
# statement's text) says nothing more there.
_CAUSES = {
    "attempt to write a readonly database": (
        "the store cannot be written here: its file, its folder or the disk is read-only (commands that only "
        "read still work)"
    ),
}


def database_error(action: str, detail: str) -> DatabaseError:
    """`DatabaseError` for `action` having failed with the database's `detail` (its first line)."""
    for words, cause in _CAUSES.items():
        if words in detail:
            return DatabaseError(f"{cause} ({detail})")
    return DatabaseError(f"{action} failed: {detail}")


@contextmanager
def wrap_database_errors(action: str, *also: type[Exception]) -> Iterator[None]:
    """Re-raise SQLAlchemy errors (and those of the types in `also`) as `DatabaseError`, naming what was being done."""
    try:
        yield
    except (sa_exc.SQLAlchemyError, *also) as exc:  # type: ignore[misc]
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise database_error(action, detail) from exc
