"""Writes of the usage roll-up (:class:`agents.models.UsageBucket`): a finished turn adds
itself to its minute's, hour's and 6-hour span's rows (in the shapes stored at each span,
:data:`agents.models.usage.STORED`) in the transaction that stores its reply, one ``INSERT
... ON CONFLICT DO UPDATE`` statement of ten rows (PostgreSQL and SQLite alike). The rows of
every span and shape are sums of the FULL minute rows: :func:`usage_derive` computes them
again from those in SQL (a rebuild, and the migration that added 6-hour rows)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from agents.infra.rows import rows_cursor
from agents.models import Message, UsageBucket, UserUsage
from agents.models.spend import nanos_of
from agents.models.usage import (
    DURATION_COLUMNS,
    SPAN_6H,
    SPAN_HOUR,
    SPAN_MINUTE,
    SPANS,
    STORED,
    TTFT_COLUMNS,
    usage_bin,
)

FAILED_KINDS = ("error", "client_disconnected", "interrupted", "killed")


def usage_error_kind(*, finish_reason: str, error: str) -> str:
    """How a reply failed, as usage counts it ("" for a reply that did not): its finish
    reason when that names a failure, else "error" for any reply that carries an error."""
    if finish_reason in FAILED_KINDS:
        return finish_reason
    return "error" if error else ""


def bucket_start(at: datetime, span: int) -> datetime:
    """The start of the ``span``-second bucket that holds ``at`` (UTC, aligned to the epoch)."""
    seconds = int(at.timestamp())
    return at.replace(microsecond=0) - timedelta(seconds=seconds % span)


@dataclass(frozen=True)
class UsageTurn:
    """What one finished turn adds to the roll-up."""

    at: datetime
    agent_id: int
    key_id: int  # 0: no key
    model: str
    error_kind: str
    input_tokens: int
    output_tokens: int
    ttft_ms: int | None
    latency_ms: int | None
    cost_nanos: int | None = 0  # None: its model has no known price (counted as unpriced)
    user: str = ""  # the end user its client named (with a key: UserUsage), else ""


_ROWS_PER_STATEMENT = 500  # SQLite takes 32,766 parameters in a statement; a row has 9 to 12
_KEY = ["span", "shape", "start", "agent_id", "key_id", "model", "error_kind"]


def usage_record(*, turn: UsageTurn) -> None:
    """Add ``turn`` to its minute's and hour's buckets. Call inside the transaction that
    stores the turn's reply: the figures and the messages never disagree."""
    usage_record_many(turns=[turn])


def usage_record_many(*, turns: Iterable[UsageTurn], full_minutes_only: bool = False) -> int:
    """Add ``turns`` to the roll-up: they are summed per bucket first, then written with
    one upsert per bucket row. ``full_minutes_only``: write only the FULL minute rows (the
    rest to be derived from them by :func:`usage_derive`). Returns how many rows were
    written."""
    statements, count = usage_statements(turns=turns, full_minutes_only=full_minutes_only)
    if statements:
        with rows_cursor(connection) as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
    return count


def usage_statements(*, turns: Iterable[UsageTurn], full_minutes_only: bool = False
                     ) -> tuple[list[tuple[str, list[Any]]], int]:
    """The upserts of :func:`usage_record_many` (one per shape of row, usually one in all)
    and how many rows they write, for a caller that sends them itself."""
    rows: dict[tuple[Any, ...], dict[str, int]] = {}
    shape = UsageBucket.Shape
    spans = (SPAN_MINUTE,) if full_minutes_only else SPANS
    for t in turns:
        ttft = f"ttft_{usage_bin(t.ttft_ms)}" if t.ttft_ms is not None else None
        duration = f"duration_{usage_bin(t.latency_ms)}" if t.latency_ms is not None else None
        model = t.model[:200]
        for span in spans:
            at = bucket_start(t.at, span)
            keys = [(span, shape.FULL, at, t.agent_id, t.key_id, model, t.error_kind)]
            if not full_minutes_only:
                keys += [(span, shape.AGENT_MODEL, at, t.agent_id, 0, model, t.error_kind),
                         (span, shape.KEY, at, 0, t.key_id, "", t.error_kind),
                         (span, shape.TOTAL, at, 0, 0, "", t.error_kind)]
            for key in keys:
                if key[1] not in STORED[span]:
                    continue
                row = rows.get(key)
                if row is None:
                    row = rows[key] = {"requests": 0, "input_tokens": 0, "output_tokens": 0}
                row["requests"] += 1
                row["input_tokens"] += t.input_tokens or 0
                row["output_tokens"] += t.output_tokens or 0
                if t.cost_nanos:
                    row["cost_nanos"] = row.get("cost_nanos", 0) + t.cost_nanos
                elif t.cost_nanos is None:
                    row["unpriced"] = row.get("unpriced", 0) + 1
                if ttft is not None:
                    row[ttft] = row.get(ttft, 0) + 1
                if duration is not None:
                    row[duration] = row.get(duration, 0) + 1
    users = [] if full_minutes_only else [t for t in turns if t.user and t.key_id]
    if not rows:
        return [], 0
    db = connections[DEFAULT_DB_ALIAS]  # one look-up: the proxy's is per attribute
    prep = UsageBucket._meta.get_field("start").get_db_prep_save
    starts: dict[datetime, Any] = {}  # each span's start prepared once, not once per row
    statements: list[tuple[str, list[Any]]] = []
    # Rows of the same shape (the same bins) go in one statement.
    shapes: dict[tuple[str, ...], list[tuple[tuple[Any, ...], dict[str, int]]]] = {}
    for key, row in rows.items():
        shapes.setdefault(tuple(row), []).append((key, row))
    for columns, group in shapes.items():
        for i in range(0, len(group), _ROWS_PER_STATEMENT):
            batch = group[i:i + _ROWS_PER_STATEMENT]
            params: list[Any] = []
            for key, row in batch:
                span, shape_, start, *rest = key
                prepared = starts.get(start)
                if prepared is None:
                    prepared = starts[start] = prep(start, db)
                params += [span, int(shape_), prepared, *rest, *map(row.__getitem__, columns)]
            statements.append((_upsert_sql(db.vendor, columns, len(batch)), params))
    if users:
        statements.append(_user_statement(users, db))
    return statements, len(rows)


_USER_KEY = ["span", "start", "key_id", "user", "agent_id"]
_USER_SUMS = ["requests", "input_tokens", "output_tokens", "cost_nanos", "unpriced"]


def _user_statement(turns: list[UsageTurn], db: Any) -> tuple[str, list[Any]]:
    """The upsert of the turns' hours per end user (:class:`agents.models.UserUsage`)."""
    rows: dict[tuple[Any, ...], list[int]] = {}
    for t in turns:
        for span in (UserUsage.HOUR, UserUsage.DAY):  # the day's for long ranges
            key = (span, bucket_start(t.at, span), t.key_id, t.user[:300], t.agent_id)
            row = rows.setdefault(key, [0, 0, 0, 0, 0])
            row[0] += 1
            row[1] += t.input_tokens or 0
            row[2] += t.output_tokens or 0
            row[3] += t.cost_nanos or 0
            row[4] += 1 if t.cost_nanos is None else 0
    prep = UserUsage._meta.get_field("start").get_db_prep_save
    params: list[Any] = []
    for (span, start, key_id, user, agent_id), sums in rows.items():
        params += [span, prep(start, db), key_id, user, agent_id, *sums]
    table = db.ops.quote_name(UserUsage._meta.db_table)
    names = [db.ops.quote_name(c) for c in _USER_KEY + _USER_SUMS]
    one = "(" + ", ".join(["%s"] * len(names)) + ")"
    sets = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in names[len(_USER_KEY):])
    return (f"INSERT INTO {table} ({', '.join(names)}) VALUES "  # noqa: S608
            + ", ".join([one] * len(rows))
            + f" ON CONFLICT ({', '.join(names[:len(_USER_KEY)])}) DO UPDATE SET {sets}",
            params)


@functools.lru_cache(maxsize=64)
def _upsert_sql(vendor: str, columns: tuple[str, ...], count: int) -> str:
    """The upsert of ``count`` rows with the bins ``columns`` (built once per shape: a turn
    writes the same one or two every time)."""
    table = connections[DEFAULT_DB_ALIAS].ops.quote_name(UsageBucket._meta.db_table)
    names = _KEY + list(columns)
    sets = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in columns)
    one = "(" + ", ".join(["%s"] * len(names)) + ")"
    return (f"INSERT INTO {table} ({', '.join(names)}) VALUES "  # noqa: S608
            + ", ".join([one] * count)
            + f" ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET {sets}")


# What each shape keeps of a FULL row's key (the others are 0 or "").
_SHAPE_KEEPS = {UsageBucket.Shape.FULL: ("agent_id", "key_id", "model"),
                UsageBucket.Shape.AGENT_MODEL: ("agent_id", "model"),
                UsageBucket.Shape.KEY: ("key_id",),
                UsageBucket.Shape.TOTAL: ()}
_BLANK = {"agent_id": "0", "key_id": "0", "model": "''"}
_SUMMED = ["requests", "input_tokens", "output_tokens", "cost_nanos", "unpriced", *TTFT_COLUMNS,
           *DURATION_COLUMNS]
# Where each (span, shape) is summed from: a span's FULL rows from the next finer span's.
_SOURCE = {SPAN_MINUTE: SPAN_MINUTE, SPAN_HOUR: SPAN_MINUTE, SPAN_6H: SPAN_HOUR}


def usage_derive(*, targets: Iterable[tuple[int, int]], since: datetime, until: datetime
                 ) -> None:
    """Compute the roll-up's rows of each ``(span, shape)`` in ``targets`` whose bucket
    starts in [``since``, ``until``) again from the FULL rows of the finer span (minute
    rows for hour rows, hour rows for 6-hour rows), in SQL: the rows there are deleted and
    inserted anew. ``since`` and ``until`` must be aligned to the largest span derived, and
    a FULL target must come before the targets derived from it (hour before 6 hours). Call in
    a transaction that holds off the turns' writes (PostgreSQL: a lock on the table)."""
    qn = connection.ops.quote_name
    table = qn(UsageBucket._meta.db_table)
    field = UsageBucket._meta.get_field("start")
    low, high = (field.get_db_prep_value(v, connection) for v in (since, until))
    sums = ", ".join(f"SUM({qn(c)})" for c in _SUMMED)
    with connection.cursor() as cursor:
        for span, shape in targets:
            source = _SOURCE[span]
            if (span, shape) == (source, UsageBucket.Shape.FULL):
                continue  # the FULL minute rows are the source of all
            if connection.vendor == "postgresql":
                floor = (f"to_timestamp(floor(extract(epoch FROM {qn('start')}) / {span}) "
                         f"* {span})")
            else:
                floor = (f"datetime((CAST(strftime('%%s', {qn('start')}) AS INTEGER) / {span})"
                         f" * {span}, 'unixepoch')")
            kept = _SHAPE_KEEPS[UsageBucket.Shape(shape)]
            keys = [qn(c) if c in kept else _BLANK[c]
                    for c in ("agent_id", "key_id", "model")]
            group = ", ".join([floor, *(qn(c) for c in kept), qn("error_kind")])
            cursor.execute(f"DELETE FROM {table} WHERE {qn('span')} = %s AND "  # noqa: S608
                           f"{qn('shape')} = %s AND {qn('start')} >= %s AND {qn('start')} < %s",
                           [span, int(shape), low, high])
            names = ", ".join(qn(c) for c in [*_KEY, *_SUMMED])
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT %s, %s, {floor}, "  # noqa: S608
                f"{', '.join(keys)}, {qn('error_kind')}, {sums} FROM {table} "
                f"WHERE {qn('span')} = %s AND {qn('shape')} = %s AND {qn('start')} >= %s "
                f"AND {qn('start')} < %s GROUP BY {group}",
                [span, int(shape), source, int(UsageBucket.Shape.FULL), low, high])


# Every (span, shape) but the FULL minute rows, in an order usage_derive can follow.
DERIVED = [(span, shape) for span in SPANS for shape in STORED[span]
           if (span, shape) != (SPAN_MINUTE, UsageBucket.Shape.FULL)]


@transaction.atomic
def usage_rebuild(*, chunk: int = 20000) -> int:
    """Build the roll-up again from the stored replies (the client-facing assistant
    messages): for a database whose turns finished before the roll-up existed. The upstream
    model of an old reply is unknown: its agent's current model stands in. Returns how many
    replies were counted.

    Replies are read in time order into FULL minute rows, so a range of time is a run of
    neighbouring rows on disk, not rows scattered over the whole table (at 1M messages on
    SQLite, a day's read went from 1.05 s to 0.35 s, scripts/perf/usage.py); every other
    row is then summed from those in SQL (:func:`usage_derive`)."""
    from agents.models import Agent

    UsageBucket.objects.all().delete()
    models = {a.pk: a.model_name for a in Agent.objects.select_related("provider")}
    replies = (Message.objects.filter(role=Message.Role.ASSISTANT, internal=False)
               .values_list("created_at", "thread__agent_id", "thread__api_key_id",
                            "finish_reason", "error", "input_tokens", "output_tokens",
                            "ttft_ms", "latency_ms", "cost", "cost_source")
               .order_by("created_at", "pk"))
    counted = 0
    batch: list[UsageTurn] = []
    for (at, agent_id, key_id, finish, error, tin, tout, ttft, latency, cost,
         source) in replies.iterator(chunk_size=chunk):
        batch.append(UsageTurn(at=at, agent_id=agent_id, key_id=key_id or 0,
                               model=models.get(agent_id, ""),
                               error_kind=usage_error_kind(finish_reason=finish, error=error),
                               input_tokens=tin or 0, output_tokens=tout or 0,
                               ttft_ms=ttft, latency_ms=latency,
                               cost_nanos=None if source == "unknown" else nanos_of(cost or 0)))
        if len(batch) >= chunk:
            usage_record_many(turns=batch, full_minutes_only=True)
            counted += len(batch)
            batch = []
    usage_record_many(turns=batch, full_minutes_only=True)
    first = UsageBucket.objects.order_by("start").values_list("start", flat=True).first()
    if first is not None:
        since = bucket_start(first, SPAN_6H)
        last = UsageBucket.objects.order_by("-start").values_list("start", flat=True).first()
        usage_derive(targets=DERIVED, since=since,
                     until=bucket_start(last, SPAN_6H) + timedelta(seconds=SPAN_6H))
    user_usage_rebuild()
    return counted + len(batch)


def user_usage_rebuild() -> int:
    """The end users' hours and days (:class:`agents.models.UserUsage`) again from the stored
    replies of threads a key's client named a user on, summed in SQL. Returns the rows
    written."""
    qn = connection.ops.quote_name
    UserUsage.objects.all().delete()
    if connection.vendor == "postgresql":
        hour, day = "date_trunc('hour', m.created_at)", f"date_trunc('day', {qn('start')})"
    else:
        hour = "strftime('%%Y-%%m-%%d %%H:00:00', m.created_at)"
        day = f"strftime('%%Y-%%m-%%d 00:00:00', {qn('start')})"
    table = qn(UserUsage._meta.db_table)
    names = ", ".join(qn(c) for c in _USER_KEY + _USER_SUMS)
    sums = ", ".join(f"SUM({qn(c)})" for c in _USER_SUMS)
    keys = f"{qn('key_id')}, {qn('user')}, {qn('agent_id')}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({names}) "  # noqa: S608
            f"SELECT %s, {hour}, t.api_key_id, t.{qn('user')}, t.agent_id, COUNT(*), "
            "SUM(COALESCE(m.input_tokens, 0)), SUM(COALESCE(m.output_tokens, 0)), "
            "SUM(CAST(COALESCE(m.cost, 0) * 1000000000 AS BIGINT)), "
            "SUM(CASE WHEN m.cost_source = 'unknown' THEN 1 ELSE 0 END) "
            f"FROM {qn(Message._meta.db_table)} m JOIN agents_thread t ON t.id = m.thread_id "
            "WHERE m.role = 'assistant' AND m.internal = %s AND t.api_key_id IS NOT NULL "
            f"AND t.{qn('user')} <> '' GROUP BY {hour}, t.api_key_id, t.{qn('user')}, "
            "t.agent_id", [UserUsage.HOUR, False])
        written = cursor.rowcount
        cursor.execute(
            f"INSERT INTO {table} ({names}) SELECT %s, {day}, {keys}, {sums} "  # noqa: S608
            f"FROM {table} WHERE {qn('span')} = %s GROUP BY {day}, {keys}",
            [UserUsage.DAY, UserUsage.HOUR])
        return written + cursor.rowcount
