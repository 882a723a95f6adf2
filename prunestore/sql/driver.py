"""Plain SQL on the driver's own connection, inside a SQLAlchemy transaction.

SQLAlchemy opens, locks and commits the transaction; the statements of the
append and read paths then go straight to the DBAPI cursor. Through Core, a
text statement costs about 0.1 ms of Python per execution, several times
what SQLite itself needs, and an append runs several of them.

Statements are written once with ``:name`` parameters and rendered for the
driver's parameter style (sqlite3: ``:name``; psycopg: ``%(name)s``). A list
value expands in place, so ``IN :ids`` becomes ``IN (:ids_0, :ids_1)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Dialect

from ..errors import DatabaseError, database_error

_PARAM = re.compile(r"(?<![:\w]):(\w+)")
_LIST_PARAM = re.compile(r"\bIN :(\w+)")


class Statement:
    """One SQL text, rendered and cached per parameter style and list lengths."""

    __slots__ = ("text", "_lists", "_rendered")

    def __init__(self, text: str) -> None:
        self.text = " ".join(text.split())
        self._lists = _LIST_PARAM.findall(self.text)  # parameters written as ``IN :name``
        self._rendered: dict[tuple, str] = {}

    def render(self, pyformat: bool, params: dict[str, Any] | tuple) -> tuple[str, Any]:
        """The SQL for the driver, and the parameters to send with it.

        A tuple of parameters is positional: its values in the order the names
        appear in the text (binding by position skips a lookup per value,
        which shows in bulk inserts).
        """
        if isinstance(params, tuple):
            sql = self._rendered.get((pyformat, tuple))
            if sql is None:
                sql = self._rendered[(pyformat, tuple)] = (
                    _PARAM.sub("%s", self.text.replace("%", "%%")) if pyformat else _PARAM.sub("?", self.text)
                )
            return sql, params
        if not self._lists:
            sql = self._rendered.get((pyformat,))
            if sql is None:
                sql = self._rendered[(pyformat,)] = (
                    _PARAM.sub(r"%(\1)s", self.text.replace("%", "%%")) if pyformat else self.text
                )
            return sql, params
        lists = tuple((name, len(params[name])) for name in self._lists)
        if lists:
            params = dict(params)
            for name, _ in lists:
                values = params.pop(name)
                params.update((f"{name}_{i}", v) for i, v in enumerate(values))
        key = (pyformat, lists)
        sql = self._rendered.get(key)
        if sql is None:
            sql = self.text
            for name, n in lists:
                sql = re.sub(rf":{name}\b", "(" + ", ".join(f":{name}_{i}" for i in range(n)) + ")", sql)
            if pyformat:
                sql = _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
            self._rendered[key] = sql
        return sql, params

    def __repr__(self) -> str:
        return f"Statement({self.text!r})"


class Driver:
    """Executes `Statement`s on a DBAPI connection (sqlite3 or psycopg)."""

    __slots__ = ("raw", "postgres", "pyformat", "_errors")

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self.raw = raw
        self.postgres = dialect.name == "postgresql"
        self.pyformat = dialect.paramstyle == "pyformat"
        # The driver's errors, and what it raises for a value no column can hold.
        self._errors = (dialect.loaded_dbapi.Error, UnicodeEncodeError, OverflowError)

    @contextmanager
    def errors_as(self, action: str) -> Iterator[None]:
        """Turn the driver's errors into `DatabaseError`, naming what was being done."""
        try:
            yield
        except self._errors as exc:
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise database_error(action, detail) from exc

    def execute_plain(self, sql: str) -> None:
        """A statement with no parameters and no result (BEGIN, SET ...); the caller wraps its errors."""
        cursor = self.raw.cursor()
        try:
            cursor.execute(sql)
        finally:
            cursor.close()

    @property
    def can_pipeline(self) -> bool:
        """Whether statements can be sent ahead of their results: psycopg's own connection (not SQLite,
        not psycopg through asyncio)."""
        return self.postgres and hasattr(self.raw, "pipeline")

    @property
    def pipelining(self) -> bool:
        """Whether the connection is in pipeline mode now: statements go out together at the next read."""
        return self.can_pipeline and bool(self.raw.pgconn.pipeline_status)  # pq.PipelineStatus.OFF is 0

    @contextmanager
    def pipeline(self) -> Iterator[None]:
        """Send the statements of the block together (psycopg's pipeline mode); a no-op on SQLite, and
        inside a transaction that pipelines already (`db.transaction`), whose end sends them.

        psycopg reports a failed statement of the pipeline when the block ends,
        so the end is wrapped too.
        """
        if not self.can_pipeline or self.pipelining:
            yield
            return
        with self.errors_as("pipelined write"), self.raw.pipeline():
            yield

    def _fail(self, statement: Statement, exc: Exception) -> DatabaseError:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return database_error(f"{statement.text[:50]}...", detail)

    def _cursor(self, statement: Statement) -> Any:
        try:
            return self.raw.cursor()  # psycopg: fails on a connection it knows is closed
        except self._errors as exc:
            raise self._fail(statement, exc) from exc

    def _run(self, statement: Statement, params: dict[str, Any]):
        sql, params = statement.render(self.pyformat, params)
        cursor = self._cursor(statement)
        try:
            cursor.execute(sql, params)
        except self._errors as exc:
            cursor.close()
            raise self._fail(statement, exc) from exc
        return cursor

    def send(self, statement: Statement, params: dict[str, Any]) -> Pending:
        """Run a query whose rows are read later (`Pending.rows`): while pipelining, queries sent one
        after another travel in one round trip."""
        return Pending(self, statement, self._run(statement, params))

    def all(self, statement: Statement, params: dict[str, Any]) -> list[tuple]:
        return self._rows(statement, self._run(statement, params))

    def _rows(self, statement: Statement, cursor: Any) -> list[tuple]:
        try:
            return cursor.fetchall()  # SQLite reads the rows here: a damaged file shows here
        except self._errors as exc:
            raise self._fail(statement, exc) from exc
        finally:
            cursor.close()

    def first(self, statement: Statement, params: dict[str, Any]) -> tuple | None:
        cursor = self._run(statement, params)
        try:
            return cursor.fetchone()
        except self._errors as exc:
            raise self._fail(statement, exc) from exc
        finally:
            cursor.close()

    def scalar(self, statement: Statement, params: dict[str, Any]) -> Any:
        row = self.first(statement, params)
        return row[0] if row else None

    def run(self, statement: Statement, params: dict[str, Any]) -> None:
        self._run(statement, params).close()

    def run_many(self, statement: Statement, rows: Sequence[dict[str, Any]] | Sequence[tuple]) -> None:
        if not rows:
            return
        sql, _ = statement.render(self.pyformat, rows[0])
        cursor = self._cursor(statement)
        try:
            cursor.executemany(sql, rows)
        except self._errors as exc:
            raise self._fail(statement, exc) from exc
        finally:
            cursor.close()

    def chunks(self, statement: Statement, params: dict[str, Any], name: str, values: Iterable, size: int = 500):
        """Rows of `statement` with the list parameter `name` taken `size` values at a time."""
        values = list(values)
        rows: list[tuple] = []
        for start in range(0, len(values), size):
            rows.extend(self.all(statement, {**params, name: values[start : start + size]}))
        return rows


class Pending:
    """A query sent with `Driver.send`, its rows not read yet."""

    __slots__ = ("_driver", "_statement", "_cursor")

    def __init__(self, driver: Driver, statement: Statement, cursor: Any) -> None:
        self._driver, self._statement, self._cursor = driver, statement, cursor

    def rows(self) -> list[tuple]:
        return self._driver._rows(self._statement, self._cursor)
