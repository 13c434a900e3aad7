"""Writes of the usage roll-up (:class:`agents.models.UsageBucket`): a finished turn adds
itself to its minute's and its hour's rows (in each of the three shapes,
:class:`UsageBucket.Shape`) in the transaction that stores its reply, one ``INSERT ... ON
CONFLICT DO UPDATE`` statement of six rows (PostgreSQL and SQLite alike)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from agents.models import Message, UsageBucket
from agents.models.usage import SPANS, usage_bin

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


_ROWS_PER_STATEMENT = 500  # SQLite takes 32,766 parameters in a statement; a row has 9 to 12
_KEY = ["span", "shape", "start", "agent_id", "key_id", "model", "error_kind"]


def usage_record(*, turn: UsageTurn) -> None:
    """Add ``turn`` to its minute's and hour's buckets. Call inside the transaction that
    stores the turn's reply: the figures and the messages never disagree."""
    usage_record_many(turns=[turn])


def usage_record_many(*, turns: Iterable[UsageTurn]) -> int:
    """Add ``turns`` to the roll-up: they are summed per bucket first, then written with
    one upsert per bucket row. Returns how many rows were written."""
    rows: dict[tuple[Any, ...], dict[str, int]] = {}
    shape = UsageBucket.Shape
    for t in turns:
        ttft = f"ttft_{usage_bin(t.ttft_ms)}" if t.ttft_ms is not None else None
        duration = f"duration_{usage_bin(t.latency_ms)}" if t.latency_ms is not None else None
        model = t.model[:200]
        for span in SPANS:
            at = bucket_start(t.at, span)
            for key in ((span, shape.FULL, at, t.agent_id, t.key_id, model, t.error_kind),
                        (span, shape.AGENT_MODEL, at, t.agent_id, 0, model, t.error_kind),
                        (span, shape.KEY, at, 0, t.key_id, "", t.error_kind)):
                row = rows.get(key)
                if row is None:
                    row = rows[key] = {"requests": 0, "input_tokens": 0, "output_tokens": 0}
                row["requests"] += 1
                row["input_tokens"] += t.input_tokens or 0
                row["output_tokens"] += t.output_tokens or 0
                if ttft is not None:
                    row[ttft] = row.get(ttft, 0) + 1
                if duration is not None:
                    row[duration] = row.get(duration, 0) + 1
    if not rows:
        return 0
    table = connection.ops.quote_name(UsageBucket._meta.db_table)
    field = UsageBucket._meta.get_field("start")
    with connection.cursor() as cursor:
        # Rows of the same shape (the same bins) go in one statement.
        shapes: dict[tuple[str, ...], list[tuple[tuple[Any, ...], dict[str, int]]]] = {}
        for key, row in rows.items():
            shapes.setdefault(tuple(row), []).append((key, row))
        for columns, group in shapes.items():
            names = _KEY + list(columns)
            sets = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in columns)
            one = "(" + ", ".join(["%s"] * len(names)) + ")"
            for i in range(0, len(group), _ROWS_PER_STATEMENT):
                batch = group[i:i + _ROWS_PER_STATEMENT]
                sql = (f"INSERT INTO {table} ({', '.join(names)}) VALUES "  # noqa: S608
                       + ", ".join([one] * len(batch))
                       + f" ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET {sets}")
                params: list[Any] = []
                for key, row in batch:
                    span, shape_, start, *rest = key
                    params += [span, int(shape_), field.get_db_prep_save(start, connection),
                               *rest, *(row[c] for c in columns)]
                cursor.execute(sql, params)
    return len(rows)


@transaction.atomic
def usage_rebuild(*, chunk: int = 20000) -> int:
    """Build the roll-up again from the stored replies (the client-facing assistant
    messages): for a database whose turns finished before the roll-up existed. The upstream
    model of an old reply is unknown: its agent's current model stands in. Returns how many
    replies were counted.

    Replies are read in time order, so the roll-up's rows are written in the order turns
    write them: a range of time is then a run of neighbouring rows on disk, not rows
    scattered over the whole table (at 1M messages on SQLite, a day's read went from 1.05 s
    to 0.35 s, scripts/perf/usage.py)."""
    from agents.models import Agent

    UsageBucket.objects.all().delete()
    models = {a.pk: a.model_name for a in Agent.objects.select_related("provider")}
    replies = (Message.objects.filter(role=Message.Role.ASSISTANT, internal=False)
               .values_list("created_at", "thread__agent_id", "thread__api_key_id",
                            "finish_reason", "error", "input_tokens", "output_tokens",
                            "ttft_ms", "latency_ms")
               .order_by("created_at", "pk"))
    counted = 0
    batch: list[UsageTurn] = []
    for at, agent_id, key_id, finish, error, tin, tout, ttft, latency in replies.iterator(
            chunk_size=chunk):
        batch.append(UsageTurn(at=at, agent_id=agent_id, key_id=key_id or 0,
                               model=models.get(agent_id, ""),
                               error_kind=usage_error_kind(finish_reason=finish, error=error),
                               input_tokens=tin or 0, output_tokens=tout or 0,
                               ttft_ms=ttft, latency_ms=latency))
        if len(batch) >= chunk:
            usage_record_many(turns=batch)
            counted += len(batch)
            batch = []
    usage_record_many(turns=batch)
    return counted + len(batch)
