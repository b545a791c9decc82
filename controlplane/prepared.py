"""Reads compiled to SQL once per process, then run with each call's values.

Django compiles a queryset to SQL every time it is evaluated. For a read with a join and a
subquery that costs 1–2 ms on this project's machines, more than PostgreSQL takes to run it;
on the path from a stage change to its MQTT publish (bench/mqtt) the reads are the same shape
every time and their compiling was most of the wait. `Prepared` compiles its queryset once per
database connection alias, with marker values standing for the call's arguments, and then
substitutes each call's values for the markers in the parameters (SQLAlchemy's compiled cache
does the same). The queryset is still written with the ORM, once: its SQL and its rows are the
ORM's own (tests/unit/controlplane/test_prepared.py compares them).

Only `.values(...)` querysets (each row a dict, converted as the ORM converts it) whose
arguments are compared by equality (`field=value`, `field__in=[...]` of fixed values is fine):
a marker must reach the parameters unchanged, which compiling checks.

On PostgreSQL a read is also planned once per connection: PostgreSQL plans a statement each
time it runs it, which for these joins costs more than running them (0.67 ms planned and run
against 0.15 ms run, for the fleet's locked MQTT row with its assignment). The second time a
connection runs a read, it `PREPARE`s it (a server-side prepared statement, named after its
SQL), and from then on runs it with `EXECUTE name(values)`; PostgreSQL plans it for those
values its first five runs and then keeps a generic plan when that is no worse. A connection
used once (`CONN_MAX_AGE=0` without a pool) never prepares. The `PREPARE` is the connection's
own setup, as its time zone is, and is not one of the read's queries (a query count counts
the `EXECUTE`). Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`) a
statement prepared on one server connection is not on the next: set
`DATABASE_PREPARED_READS=0` there.
"""

import hashlib
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import EmptyResultSet, FullResultSet
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model, QuerySet
from django.db.models.query import ValuesIterable
from django.db.transaction import TransactionManagementError

M = TypeVar("M", bound=Model)

# Markers: integers inside a 32-bit column's range (Django finds nothing for a value outside
# it, without SQL) that no key, count or number of this project reaches.
_MARKER_BASE = 2_146_912_000


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bind(param: Any, by_marker: dict[int, Any]) -> Any:
    """The call's value for a marker, in the marker's type (the backend may have wrapped it, as
    psycopg's `Int4` for a 32-bit column); any other parameter as compiled."""
    if not _is_int(param) or param not in by_marker:
        return param
    value = by_marker[param]
    return type(param)(value) if _is_int(value) and type(param) is not int else value


# A connection prepares a read the second time it runs it (one used once never does).
PREPARE_ON_RUN = 2
# Per PostgreSQL connection (the driver's, which a pool keeps across Django's connections):
# each read's runs on it until prepared, then -1 (prepared).
_runs: "weakref.WeakKeyDictionary[Any, dict[str, int]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    params: list[Any]
    names: list[str]  # each column's key in a row's dict
    converters: list[tuple[int, list[Any], Any]]  # (column, converters, expression), the ORM's
    locks: bool  # a select for update: only inside a transaction
    statement: str  # its server-side name ("" where it is not prepared: not PostgreSQL)
    execute: str  # EXECUTE statement(%s, ...)


def _numbered(sql: str) -> str:
    """Django's SQL (`%s` for a parameter, `%%` for a percent sign) as PostgreSQL's own: `$1`,
    `$2` …, and `%`."""
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match.group() == "%%":
            return "%"
        count += 1
        return f"${count}"

    return re.sub(r"%%|%s", number, sql)


def _server_side(connection: Any, sql: str, params: Sequence[Any]) -> tuple[str, str]:
    """The statement's name and its EXECUTE, where reads are prepared (PostgreSQL, unless
    DATABASE_PREPARED_READS is off); else ("", "")."""
    if connection.vendor != "postgresql" or not getattr(settings, "DATABASE_PREPARED_READS", 1):
        return "", ""
    name = "cp_" + hashlib.sha1(sql.encode(), usedforsecurity=False).hexdigest()[:20]
    arguments = f"({', '.join(['%s'] * len(params))})" if params else ""
    return name, f"EXECUTE {name}{arguments}"


def _statement(connection: Any, compiled: _Compiled) -> str:
    """What to run on `connection` for `compiled`: its EXECUTE once the connection has prepared
    it (on its `PREPARE_ON_RUN`th run, here), else its SQL."""
    if not compiled.statement:
        return compiled.sql
    raw = connection.connection  # connected: called with a cursor open
    runs = _runs.setdefault(raw, {})
    count = runs.get(compiled.statement, 0)
    if count < 0:
        return compiled.execute
    if count + 1 < PREPARE_ON_RUN:
        runs[compiled.statement] = count + 1
        return compiled.sql
    # The driver's own cursor: the connection's setup, not one of the read's queries (Django's
    # cursor would log and count it). Not undone by a rollback (PostgreSQL keeps it for the
    # session), so it is prepared once whatever the transaction does.
    with raw.cursor() as setup:
        setup.execute(f"PREPARE {compiled.statement} AS {_numbered(compiled.sql)}")
    runs[compiled.statement] = -1
    return compiled.execute


def _names(query: Any) -> list[str]:
    """Each column's key, as `ValuesIterable` names them: in the order `.values()` was given
    them (Django 5.2: an annotation may come between fields), else extra, fields, annotations."""
    if query.selected:
        return list(query.selected)
    return [*query.extra_select, *query.values_select, *query.annotation_select]


class Prepared:
    """`build(**markers)` gives the queryset; `rows(**values)` runs it with `values`.

    `build` receives one marker per argument name (an int) and must use each as a whole
    parameter, e.g. `Model.objects.filter(fleet_id=fleet_id).values(...)`; the values are a
    caller's own keys (in their columns' range: the ORM would answer an impossible value without
    asking the database). A select for update runs only inside a transaction, as with the ORM.
    """

    def __init__(self, build: Callable[..., QuerySet[Any, Any]], *arguments: str) -> None:
        self._build = build
        self._markers = {name: _MARKER_BASE - index for index, name in enumerate(arguments)}
        self._compiled: dict[str, _Compiled] = {}

    def _compile(self, using: str) -> _Compiled:
        compiled = self._compiled.get(using)
        if compiled is not None:
            return compiled
        queryset = self._build(**self._markers)
        query = queryset.query
        if queryset._iterable_class is not ValuesIterable:
            raise TypeError("Prepared reads .values(...) querysets only")
        compiler = query.get_compiler(using=using)
        try:
            sql, params = compiler.as_sql()
        except (EmptyResultSet, FullResultSet):
            # The ORM decided on a marker's value without SQL (out of its column's range).
            sql, params = "", ()
        found = {p for p in params if _is_int(p) and p in self._markers.values()}
        missing = [name for name, marker in self._markers.items() if marker not in found]
        if missing:
            raise TypeError(f"Prepared: argument(s) {missing} do not reach the SQL's parameters")
        columns = [selected[0] for selected in compiler.select[: compiler.col_count]]
        compiled = _Compiled(
            sql=sql,
            params=list(params),
            names=_names(query),
            converters=[
                (column, converters, expression)
                for column, (converters, expression) in compiler.get_converters(columns).items()
            ],
            locks=query.select_for_update and compiler.connection.features.has_select_for_update,
            statement=(server_side := _server_side(compiler.connection, sql, params))[0],
            execute=server_side[1],
        )
        self._compiled[using] = compiled
        return compiled

    def rows(self, using: str = "default", **values: Any) -> list[dict[str, Any]]:
        """The rows for `values` (one per argument name), as `.values()` gives them."""
        if values.keys() != self._markers.keys():
            raise TypeError(f"Prepared: expected {sorted(self._markers)}, got {sorted(values)}")
        connection = connections[using]
        compiled = self._compile(using)  # the first compile refuses a lock outside a transaction
        if compiled.locks and connection.get_autocommit():
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction."
            )
        by_marker = {self._markers[name]: value for name, value in values.items()}
        with connection.cursor() as cursor:
            params = [_bind(p, by_marker) for p in compiled.params]
            cursor.execute(_statement(connection, compiled), params)
            fetched = cursor.fetchall()
        rows = []
        for values_row in fetched:
            row = list(values_row)
            for column, converters, expression in compiled.converters:
                for converter in converters:
                    row[column] = converter(row[column], expression, connection)
            rows.append(dict(zip(compiled.names, row, strict=True)))
        return rows

    def first(self, using: str = "default", **values: Any) -> dict[str, Any] | None:
        """The first row for `values`, or None (the queryset orders and limits as it needs)."""
        found = self.rows(using, **values)
        return found[0] if found else None


def loaded(
    model: type[M], row: Mapping[str, Any], columns: Sequence[str], using: str = DEFAULT_DB_ALIAS
) -> M:
    """The instance the ORM builds from these `columns` of a prepared read's `row` (attribute
    names, e.g. `candidate_id`); the model's other fields are deferred, as with `.only()`, and
    load if asked for."""
    return model.from_db(using, list(columns), [row[column] for column in columns])
