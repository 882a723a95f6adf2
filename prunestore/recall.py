"""Recall: the messages out of the prompt that an agent asks for again (docs/api.md, "Recall").

Pruning keeps what the passes and the budget decide; an agent that needs an
older detail back asks for it by the key that defined it, by words it held,
or by where it stood. Recall reads; it changes no verdict. What it returns
reaches the model the way any lookup does: as the result of the call that
asked (a tool result), which is then a message of the session like any other.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .errors import InvalidArgumentError, shorten
from .model import StoredMessage, effective_defines
from .sql import recall_index
from .sql.driver import Driver, Statement
from .sql.rows import FULL_COLUMNS, IN_PROMPT, stored_message
from .text import KEY_PATTERN

_CHUNK = 256  # rows read at a time, newest first, until enough match
_LAST_DEFINER = Statement("SELECT definer_seq FROM prunestore_keys WHERE session_id = :sid AND key = :key")
_CANDIDATES = Statement(
    f"SELECT rowid FROM {recall_index.TABLE} WHERE {recall_index.TABLE} MATCH :match "
    "AND rowid >= :first AND rowid <= :last ORDER BY rowid DESC LIMIT :chunk"
)
_OUT_OF_PROMPT_AT = (
    f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq IN :seqs AND NOT ({IN_PROMPT})"
)
_AT = {
    False: Statement(f"{_OUT_OF_PROMPT_AT} ORDER BY seq DESC"),
    True: Statement(f"{_OUT_OF_PROMPT_AT} AND ' ' || eff_defines || ' ' LIKE :key_pattern ORDER BY seq DESC"),
}

_STATEMENTS: dict[tuple, Statement] = {}
_TRIGRAM = re.compile("[a-z0-9]{3}")  # what pg_trgm takes a trigram of from a LIKE pattern (casefolded)


def _statement(postgres: bool, has_key: bool, words: tuple[str, ...]) -> Statement:
    """The session's messages out of the prompt, newest first, that may match: the conditions only narrow.

    A key is looked for with LIKE (whose "_" matches any character, and which ignores ASCII case on
    SQLite); a word in the content with ASCII case folded, where the content is ASCII (there folding
    ASCII is all that casefold does); other content (non-ASCII, or stored escaped for its NULs) goes
    through, and it alone may hold a word that is not ASCII or holds NUL. Each row is then checked exactly.
    """
    shape = (postgres, has_key, tuple(map(_plain, words)))
    cached = _STATEMENTS.get(shape)
    if cached is None:
        conditions = [" AND ' ' || eff_defines || ' ' LIKE :key_pattern"] if has_key else []
        if postgres:  # lower() under the "C" collation folds ASCII only, whatever the database's locale
            found = 'strpos(lower(content COLLATE "C"), :w{i}) > 0'
            unusual = "content_escaped = 1 OR octet_length(convert_to(content, 'UTF8')) <> char_length(content)"
        else:  # SQLite's lower() folds ASCII only
            found = "instr(lower(content), :w{i}) > 0"
            unusual = "content_escaped = 1 OR length(CAST(content AS BLOB)) <> length(content)"
        for i, plain in enumerate(shape[2]):  # a word that is not plain can only be in unusual content
            word = found.format(i=i)
            conditions.append(f" AND ({word} OR {unusual})" if plain else f" AND ({unusual})")
        cached = _STATEMENTS[shape] = Statement(
            f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq >= :low AND seq <= :high "
            f"AND NOT ({IN_PROMPT}){''.join(conditions)} ORDER BY seq DESC LIMIT :chunk"
        )
    return cached


def _indexed_statement(has_key: bool, words: tuple[str, ...]) -> Statement:
    """`_statement` on PostgreSQL with the recall index, in two parts its two indexes can each answer.

    The ASCII content that holds every word, and the unusual content (the partial index), each newest
    first; PostgreSQL plans each part itself. A word with a trigram of letters and digits is looked for
    with LIKE, which the trigram index serves; a shorter one with ``strpos``, which it does not (a LIKE
    with no trigram would make the index read all of itself). Both find what ``strpos`` finds.
    """
    kinds = tuple(_kind(word) for word in words)
    shape = ("indexed", has_key, kinds)
    cached = _STATEMENTS.get(shape)
    if cached is None:
        base = (
            f"SELECT {FULL_COLUMNS} FROM prunestore_messages WHERE session_id = :sid AND seq >= :low "
            f"AND seq <= :high AND NOT ({IN_PROMPT})"
        ) + (" AND ' ' || eff_defines || ' ' LIKE :key_pattern" if has_key else "")
        unusual = recall_index.PG_UNUSUAL_CONTENT
        newest = " ORDER BY seq DESC LIMIT :chunk"
        text = f"{base} AND ({unusual}){newest}"
        if "unusual" not in kinds:  # a word that is not plain can only be in unusual content
            folded = recall_index.PG_FOLDED
            found = "".join(
                f" AND {folded} LIKE :w{i} ESCAPE '\\'" if kind == "trigrams" else f" AND strpos({folded}, :w{i}) > 0"
                for i, kind in enumerate(kinds)
            )
            text = f"({base}{found} AND NOT ({unusual}){newest}) UNION ALL ({text}){newest}"
        cached = _STATEMENTS[shape] = Statement(text)
    return cached


def _kind(word: str) -> str:
    """How the indexed statement looks for `word`: through its trigrams, by ``strpos``, or not (unusual)."""
    if not _plain(word):
        return "unusual"
    return "trigrams" if _TRIGRAM.search(word) else "strpos"


def _indexed_value(word: str) -> str:
    """What the indexed statement is given for `word`: a LIKE pattern escaped with backslashes, or the word."""
    if _kind(word) != "trigrams":
        return word
    return "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _plain(word: str) -> bool:
    """Whether the database looks for `word` itself: ASCII without NUL (other words only in unusual content)."""
    return word.isascii() and "\x00" not in word


@dataclass(frozen=True)
class Query:
    """What a recall looks for: all of a defined key, the words of a text (case aside), a seq range."""

    key: str | None
    words: tuple[str, ...]
    low: int
    high: int

    @classmethod
    def of(cls, key: str | None, text: str | None, low: int, high: int) -> Query:
        if key is not None and (not isinstance(key, str) or not KEY_PATTERN.fullmatch(key)):
            raise InvalidArgumentError(f"key={shorten(key)}: must match {KEY_PATTERN.pattern}")
        if text is not None and not isinstance(text, str):
            raise InvalidArgumentError(f"text={shorten(text)}: must be a str")
        words = tuple(text.casefold().split()) if text is not None else ()
        if text is not None and not words:
            raise InvalidArgumentError(f"text={shorten(text)}: holds no word to look for")
        return cls(key, words, low, high)

    def matches(self, message: StoredMessage) -> bool:
        if self.key is not None and self.key not in effective_defines(message):
            return False
        if self.words:
            content = message.content.casefold()
            return all(word in content for word in self.words)
        return True


def recall(driver: Driver, sid: int, query: Query, limit: int) -> list[StoredMessage]:
    """The latest `limit` messages out of the prompt that match `query`, in append order."""
    high = query.high
    if query.key is not None:  # no message after the key's last definer defines it: start there
        high = min(high, driver.scalar(_LAST_DEFINER, {"sid": sid, "key": query.key}) or 0)
    return list(itertools.islice(_matches(driver, sid, query, high, limit), limit))[::-1]


def _matches(driver: Driver, sid: int, query: Query, high: int, limit: int) -> Iterator[StoredMessage]:
    """The session's messages out of the prompt that match, from seq `high` back to the query's start.

    Read a chunk at a time, newest first. Where the index or the statement's conditions narrow, a
    chunk is what is still wanted, then twice as many each time rows fail the exact check: few
    round trips either way, and none reading far past the matches that suffice.
    """
    read = _reader(driver, sid, query)
    filtered = query.key is not None or query.words
    wanted, reads = limit, 0
    while high >= query.low:
        chunk = min(max(wanted, 1) << reads, _CHUNK) if filtered else _CHUNK
        rows, lowest, more = read(high, chunk)
        for message in map(stored_message, rows):
            if query.matches(message):
                wanted -= 1
                yield message
        if not more:
            return
        high, reads = lowest - 1, reads + 1


# Reads up to `chunk` candidates from seq `high` back: the rows among them out of the prompt, the
# lowest seq looked at, and whether there may be more before it.
Reader = Callable[[int, int], tuple[list[tuple], int, bool]]


def _reader(driver: Driver, sid: int, query: Query) -> Reader:
    """Through the recall index where it can look for one of the words, else through the session's rows."""
    key = {"key_pattern": f"% {query.key} %"} if query.key is not None else {}
    match = None if driver.postgres else recall_index.match_expression(query.words)
    if match is not None and recall_index.present(driver):
        number = recall_index.number(driver, sid)  # none: the session has no text, nothing can match
        at, first = _AT[query.key is not None], recall_index.entry(number or 0, query.low)

        def indexed(high: int, chunk: int) -> tuple[list[tuple], int, bool]:
            if number is None:
                return [], high, False
            last = recall_index.entry(number, high)
            found = driver.all(_CANDIDATES, {"match": match, "first": first, "last": last, "chunk": chunk})
            seqs = [recall_index.seq_of(rowid) for (rowid,) in found]
            rows = driver.all(at, {"sid": sid, "seqs": seqs, **key}) if seqs else []
            return rows, seqs[-1] if seqs else high, len(seqs) == chunk

        return indexed
    params: dict = {"sid": sid, "low": query.low, **key}
    if driver.postgres and query.words and recall_index.present(driver):
        statement = _indexed_statement(query.key is not None, query.words)
        params.update((f"w{i}", _indexed_value(word)) for i, word in enumerate(query.words) if _plain(word))
    else:
        statement = _statement(driver.postgres, query.key is not None, query.words)
        params.update((f"w{i}", word) for i, word in enumerate(query.words) if _plain(word))

    def scanned(high: int, chunk: int) -> tuple[list[tuple], int, bool]:
        rows = driver.all(statement, {**params, "high": high, "chunk": chunk})
        return rows, rows[-1][0] if rows else high, len(rows) == chunk

    return scanned
