"""The turn's own writes, without the ORM's per-statement work.

A turn stores its thread and messages and updates the thread when it ends: four or five
statements on every chat request. Through ``save()``, ``bulk_create()`` and ``update()`` each
of them cost 0.2 to 0.4 ms of Python before the database saw it (the query compiler, every
field's ``pre_save`` and ``get_db_prep_save``, expression resolution): together more than the
database's own work and about a third of a turn's CPU (issue 16's profile, in the README).

These helpers do the same writes with the statement's SQL built once per model, database and
shape, and with each value prepared the way Django prepares it, skipped only for the field
types whose database value is the Python value itself (text, integers, booleans). They take
and fill ordinary model instances, so the callers read like ORM code, and they go through
Django's cursor, so query logging, ``CaptureQueriesContext`` and transactions apply as usual.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.conf import settings
from django.db import connections, models

M = TypeVar("M", bound=models.Model)


def rows_cursor(connection: Any, *, prepared: bool = False) -> Any:
    """A cursor for the turn's own writes: Django's, except that on PostgreSQL the values are
    sent apart from the SQL (psycopg's server-side binding) rather than quoted into it.

    Django's PostgreSQL cursor quotes every value into the statement in Python (its
    ``ClientCursor``); a turn writes some 150 values, and quoting them was 0.19 ms of the
    PostgreSQL leg's 0.8 ms extra CPU per chat turn (py-spy, ``scripts/perf/chat.py
    --production``, c=16). Sent apart, they are dumped by psycopg's C code. These statements
    are plain INSERT/UPDATE with a value per column, the case server-side binding always
    handles; the rest of the ORM keeps Django's default. Still a Django cursor: query
    logging, ``CaptureQueriesContext`` and error wrapping apply.

    ``prepared``: the statement is prepared on the connection the first time and executed
    by name afterwards (PostgreSQL plans it once per connection, not per turn). Django turns
    psycopg's own preparing off for connection poolers; Gaia prepares only a turn's few
    statements of a fixed text, and ``GAIA_DB_PREPARED_STATEMENTS=false`` turns it off
    (a transaction-mode pooler older than PgBouncer 1.21). With three budgets a turn's
    statement to store it cost PostgreSQL 1.4 ms to parse, plan and run, 0.8 ms prepared
    (``scripts/perf/spend.py``)."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    from django.db.backends.postgresql.base import is_psycopg3

    if not is_psycopg3:
        return connection.cursor()
    from django.db.backends.postgresql.base import ServerBindingCursor

    kind = ServerBindingCursor
    if prepared and settings.GAIA_DB_PREPARED_STATEMENTS:
        kind = _prepared_cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(kind(connection.connection))


@functools.cache
def _prepared_cursor() -> type:
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparedCursor(ServerBindingCursor):  # type: ignore[misc, valid-type]
        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                    binary: bool | None = None) -> Any:
            return super().execute(query, params, prepare=True if prepare is None else prepare,
                                   binary=binary)

        def _send_query_prepared(self, name: bytes, pgq: Any, *, binary: bool | None = None
                                 ) -> None:
            # What Django's query log reads (last_executed_query): psycopg 3 keeps it of a
            # statement run unprepared only.
            self._query = pgq
            super()._send_query_prepared(name, pgq, binary=binary)

    return PreparedCursor


# Field types stored as the Python value itself on every backend Gaia runs on.
_PLAIN = frozenset({
    "CharField", "TextField", "SlugField", "IntegerField", "BigIntegerField",
    "PositiveIntegerField", "PositiveBigIntegerField", "PositiveSmallIntegerField",
    "SmallIntegerField", "BooleanField", "AutoField", "BigAutoField",
})


def _is_plain(field: models.Field[Any, Any]) -> bool:
    if field.is_relation:
        return field.target_field.get_internal_type() in _PLAIN  # type: ignore[union-attr]
    return field.get_internal_type() in _PLAIN


def _preparer(field: models.Field[Any, Any], connection: Any) -> Callable[[Any], Any] | None:
    """How a value of ``field`` becomes a query parameter: ``None`` when it is one already."""
    if _is_plain(field):
        return None
    return lambda value: field.get_db_prep_save(value, connection)


class _Insert:
    """``INSERT`` of a model's rows: SQL and value preparation built once per database."""

    def __init__(self, model: type[models.Model], alias: str) -> None:
        connection = connections[alias]
        meta = model._meta
        self.auto_pk = isinstance(meta.pk, models.AutoField | models.BigAutoField)
        self.fields = [f for f in meta.concrete_fields if not (self.auto_pk and f.primary_key)]
        # auto_now / auto_now_add: their pre_save sets the time, on the instance too.
        self.stamped = [getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
                        for f in self.fields]
        self.prepare = [_preparer(f, connection) for f in self.fields]
        qn = connection.ops.quote_name
        # Names from the model's metadata, values only as parameters.
        self.head = (f"INSERT INTO {qn(meta.db_table)} "  # noqa: S608
                     f"({', '.join(qn(f.column) for f in self.fields)}) VALUES ")
        self.row = "(" + ", ".join(["%s"] * len(self.fields)) + ")"
        self.returning = f" RETURNING {qn(meta.pk.column)}" if self.auto_pk else ""  # type: ignore[union-attr]
        self.features = connection.features

    @functools.lru_cache(maxsize=16)  # noqa: B019 - one per model and database, kept
    def computed(self, computed: tuple[tuple[str, str], ...]) -> tuple[str, list[int]]:
        """A row with ``computed``'s expressions for those fields' values, and the indices of
        the fields still sent as parameters (built once: a turn's reply and its thread's
        first messages are inserted with one each)."""
        by_name = dict(computed)
        skip = [by_name.get(f.attname) for f in self.fields]
        row = "(" + ", ".join(sql or "%s" for sql in skip) + ")"
        return row, [i for i, sql in enumerate(skip) if not sql]

    def params(self, obj: models.Model) -> list[Any]:
        out = []
        for field, stamped, prepare in zip(self.fields, self.stamped, self.prepare,
                                           strict=True):
            value = field.pre_save(obj, True) if stamped else getattr(obj, field.attname)
            out.append(value if prepare is None or value is None else prepare(value))
        return out


_inserts: dict[tuple[type[models.Model], str], _Insert] = {}
_FEWEST_PARAMS = 999  # parameters any supported backend takes in one statement (SQLite's least)


def _insert_for(model: type[models.Model], using: str) -> _Insert:
    insert = _inserts.get((model, using))
    if insert is None:
        insert = _inserts[(model, using)] = _Insert(model, using)
    return insert


def rows_insert_sql(objs: Sequence[models.Model], *, using: str = "default",
                    computed: dict[str, str] | None = None) -> tuple[str, list[Any]]:
    """The one ``INSERT`` statement of :func:`rows_insert` for ``objs`` (all rows, with
    ``RETURNING`` the primary key when it is automatic), for a caller that sends it as part
    of a larger statement; ``auto_now`` times are set on the instances. ``computed`` gives
    an SQL expression (no parameters) for some fields' values in place of the instances'."""
    insert = _insert_for(type(objs[0]), using)
    params: list[Any] = []
    if not computed:
        for obj in objs:
            params.extend(insert.params(obj))
        return (insert.head + ", ".join([insert.row] * len(objs)) + insert.returning, params)
    row, kept = insert.computed(tuple(computed.items()))
    for obj in objs:
        values = insert.params(obj)
        params.extend([values[i] for i in kept])
    return (insert.head + ", ".join([row] * len(objs)) + insert.returning, params)


def rows_inserted(objs: Sequence[M], ids: Sequence[Any], *, using: str = "default"
                  ) -> Sequence[M]:
    """Mark ``objs`` saved, with the automatic primary keys the database returned."""
    pk = type(objs[0])._meta.pk
    assert pk is not None
    if ids:
        for obj, value in zip(objs, ids, strict=True):
            setattr(obj, pk.attname, value)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = using
    return objs


def rows_insert(objs: Sequence[M], *, using: str = "default") -> Sequence[M]:
    """Insert ``objs`` (unsaved instances of one model) in one statement, as
    ``bulk_create`` would: auto-increment primary keys are set on them, and so are
    ``auto_now``/``auto_now_add`` times. No signals (Gaia uses none on these models)."""
    if not objs:
        return objs
    model = type(objs[0])
    insert = _insert_for(model, using)
    if insert.auto_pk and not insert.features.can_return_rows_from_bulk_insert:
        return model.objects.using(using).bulk_create(objs)  # a backend Gaia does not test
    connection = connections[using]
    # As many rows per statement as the backend takes parameters (bulk_create's rule). A
    # turn's few rows fit in one on every backend (SQLite takes at least 999 parameters):
    # asked only past that, since SQLite's answer walks every field (56 calls a statement).
    if len(objs) * len(insert.fields) <= _FEWEST_PARAMS:
        size = len(objs)
    else:
        size = max(1, connection.ops.bulk_batch_size(insert.fields, objs))
    ids: list[Any] = []
    with rows_cursor(connection) as cursor:
        for i in range(0, len(objs), size):
            cursor.execute(*rows_insert_sql(objs[i:i + size], using=using))
            if insert.auto_pk:
                ids += [row[0] for row in cursor.fetchall()]
    return rows_inserted(objs, ids, using=using)


class Add:
    """``column = column + value`` in :func:`rows_update` (``F(name) + value``)."""

    def __init__(self, value: Any) -> None:
        self.value = value


_updates: dict[tuple[Any, ...], tuple[str, list[Callable[[Any], Any] | None]]] = {}


def rows_update_sql(model: type[models.Model], *, where: dict[str, Any],
                    values: dict[str, Any], using: str = "default") -> tuple[str, list[Any]]:
    """The statement of :func:`rows_update`, for a caller that sends it as part of a larger
    one."""
    if any(value is None for value in where.values()):
        raise ValueError("rows_update: a condition on NULL needs IS NULL; use the ORM")
    shape = (model, using, tuple(values), tuple(where),
             tuple(isinstance(v, Add) for v in values.values()))
    held = _updates.get(shape)
    if held is None:
        connection = connections[using]
        qn = connection.ops.quote_name
        meta = model._meta
        sets, prepare = [], []
        for name, value in values.items():
            field = meta.get_field(name)
            column = qn(field.column)  # type: ignore[union-attr]
            sets.append(f"{column} = {column} + %s" if isinstance(value, Add)
                        else f"{column} = %s")
            prepare.append(_preparer(field, connection))  # type: ignore[arg-type]
        conditions = []
        for name in where:
            field = meta.get_field(name)
            conditions.append(f"{qn(field.column)} = %s")  # type: ignore[union-attr]
            prepare.append(_preparer(field, connection))  # type: ignore[arg-type]
        sql = (f"UPDATE {qn(meta.db_table)} SET {', '.join(sets)} "  # noqa: S608
               f"WHERE {' AND '.join(conditions)}")
        held = _updates[shape] = (sql, prepare)
    sql, prepare = held
    params = []
    for value, prep in zip([*values.values(), *where.values()], prepare, strict=True):
        if isinstance(value, Add):
            value = value.value
        params.append(value if prep is None or value is None else prep(value))
    return sql, params


def rows_update(model: type[models.Model], *, where: dict[str, Any], values: dict[str, Any],
                using: str = "default") -> int:
    """``model.objects.filter(**where).update(**values)`` for plain equality filters, with
    :class:`Add` for increments; returns the number of rows changed. ``auto_now`` fields are
    not touched: pass them in ``values``."""
    sql, params = rows_update_sql(model, where=where, values=values, using=using)
    with rows_cursor(connections[using]) as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
