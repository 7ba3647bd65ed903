"""A read statement run on the driver's cursor: compiled once per dialect, rows as tuples.

A polled read (a run's rounds, a node, a payout's rewards) is two or three small statements.
Through SQLAlchemy's execution path (execution context, cursor result, ``Row`` objects) each cost
about 0.4 ms of the ledger's CPU, measured with ``bench.ledger``'s reads phase, against 0.15 ms
for the same statement on psycopg's cursor. :class:`RawSelect` keeps SQLAlchemy where it does
the work (building the statement, compiling it for the dialect, binding and result types) and
skips it where it only costs: the statement is compiled once per dialect, its parameters put in
the driver's style, and each column's result processor (SQLite's text datetimes and integer
booleans, :class:`ledger.core.models.UtcDateTime`) applied to the rows, so a row holds what
``Connection.execute`` would have given.

Statements must not need SQL rendered at execution (an ``IN`` list: expanding parameters, whose
SQL SQLAlchemy renders again at every execution); :class:`Keyed` builds a statement over a list
of keys with ``=`` for the one-key case (nearly every call: a node that never rotated its key, a
payout with one node) and ``IN`` through SQLAlchemy for the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, bindparam
from sqlalchemy.exc import DBAPIError


class _Compiled:
    def __init__(self, stmt: Select[Any], conn: Connection) -> None:
        dialect = conn.dialect
        compiled = stmt.compile(dialect=dialect)
        if "POSTCOMPILE" in compiled.string:
            raise ValueError("RawSelect: a statement with an IN list (expanding parameter)")
        self.sql = compiled.string
        self.defaults = compiled.construct_params({}, _check=False)
        self.positions = compiled.positiontup  # None: named parameters (psycopg's %(name)s)
        self.binds: dict[str, Any] = dict(compiled._bind_processors)
        self.dialect = dialect
        # psycopg prepares a statement after its 5th execution on a connection; a read's
        # statements run on every pooled connection, so most executions were planned again
        self.prepare = dialect.driver == "psycopg"
        self.columns = compiled._result_columns
        self.names = tuple(column[0] for column in self.columns)
        # each column's processor, resolved at the first execution: it may depend on the type
        # the driver reports (cursor.description), as in SQLAlchemy's own cursor result
        self.processors: list[tuple[int, Callable[[Any], Any]]] | None = None

    def resolve(self, description: Sequence[Any]) -> list[tuple[int, Callable[[Any], Any]]]:
        processors: list[tuple[int, Callable[[Any], Any]]] = []
        for i, (column, described) in enumerate(zip(self.columns, description, strict=True)):
            process = column[3]._cached_result_processor(self.dialect, described[1])
            if process is not None:
                processors.append((i, process))
        self.processors = processors
        return processors

    def parameters(self, values: Mapping[str, Any]) -> Any:
        params = {**self.defaults, **values}
        for name, process in self.binds.items():
            params[name] = process(params[name])
        if self.positions is None:
            return params
        return [params[name] for name in self.positions]


class RawSelect:
    """``stmt`` (a Core select) compiled once per dialect and run on the driver's cursor."""

    def __init__(self, stmt: Select[Any]) -> None:
        self.stmt = stmt
        self._by_dialect: dict[str, _Compiled] = {}

    def _compiled(self, conn: Connection) -> _Compiled:
        compiled = self._by_dialect.get(conn.dialect.name)
        if compiled is None:
            compiled = self._by_dialect[conn.dialect.name] = _Compiled(self.stmt, conn)
        return compiled

    def names(self, conn: Connection) -> tuple[str, ...]:
        """The result's column names, in order."""
        return self._compiled(conn).names

    def rows(
        self, conn: Connection, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Every row, each column as ``Connection.execute`` would give it."""
        compiled = self._compiled(conn)
        dbapi = conn.connection.dbapi_connection
        cursor: Any = dbapi.cursor()  # type: ignore[union-attr]
        bound = compiled.parameters(params or {})
        try:
            if compiled.prepare:  # a server-side prepared statement from the first execution
                cursor.execute(compiled.sql, bound, prepare=True)
            else:
                cursor.execute(compiled.sql, bound)
            rows = cursor.fetchall()
            processors = compiled.processors
            if processors is None:
                processors = compiled.resolve(cursor.description)
        except conn.dialect.loaded_dbapi.Error as exc:  # as SQLAlchemy raises it: a 503 when
            # the database is down (ledger.api.errors), the connection dropped from the pool
            lost = conn.dialect.is_disconnect(exc, dbapi, cursor)
            if lost:
                conn.invalidate(exc)
            raise DBAPIError.instance(
                compiled.sql,
                bound,
                exc,
                conn.dialect.loaded_dbapi.Error,
                connection_invalidated=lost,
                dialect=conn.dialect,
            ) from exc
        finally:
            cursor.close()
        if not processors:
            return [tuple(row) for row in rows]
        out = []
        for row in rows:
            values = list(row)
            for i, process in processors:
                values[i] = process(values[i])
            out.append(tuple(values))
        return out

    def one(self, conn: Connection, params: Mapping[str, Any] | None = None) -> tuple[Any, ...]:
        """The one row (a statement of scalar subqueries, an aggregate)."""
        rows = self.rows(conn, params)
        if len(rows) != 1:
            raise LookupError(f"RawSelect.one: {len(rows)} rows")
        return rows[0]


class Keyed:
    """``build(condition)`` once with ``column = :keys`` (a :class:`RawSelect`) and once with
    ``column IN :keys`` (run by SQLAlchemy)."""

    def __init__(self, column: Any, build: Callable[[ColumnElement[bool]], Select[Any]]) -> None:
        self.one = RawSelect(build(column == bindparam("keys")))
        self.many = build(column.in_(bindparam("keys", expanding=True)))

    def rows(
        self, conn: Connection, keys: Sequence[str], params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        if len(keys) == 1:
            return self.one.rows(conn, {**params, "keys": keys[0]})
        return [tuple(row) for row in conn.execute(self.many, {**params, "keys": list(keys)})]
