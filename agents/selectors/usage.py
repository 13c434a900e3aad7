"""Reads of usage over time (the roll-up :class:`agents.models.UsageBucket`): requests,
tokens, errors by kind and the p50/p95 of time to first token and duration, over a window,
per bucket and per agent, key and upstream model. ``/api/v1/usage`` and the console's
charts (which read that API) both come here."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from agents.kernel.exceptions import InvalidRequest, NotFound
from agents.models import Agent, ApiKey, UsageBucket, UserUsage
from agents.models.spend import dollars_of
from agents.models.usage import (
    BINS,
    DURATION_COLUMNS,
    SPANS,
    TTFT_COLUMNS,
    usage_bin_value,
    usage_stored_shape,
)

# Named windows, with the bucket each is charted in unless another is asked for.
RANGES = {"1h": (timedelta(hours=1), 60), "1d": (timedelta(days=1), 900),
          "7d": (timedelta(days=7), 3600), "30d": (timedelta(days=30), 21600)}
BUCKETS = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "1d": 86400}
MAX_POINTS = 2000
PERCENTILES = (50, 95)
_SUMS = ["requests", "input_tokens", "output_tokens", *TTFT_COLUMNS, *DURATION_COLUMNS,
         "cost_nanos", "unpriced"]


@dataclass(frozen=True)
class UsageWindow:
    since: datetime  # aligned to the bucket
    until: datetime  # aligned up to the bucket
    bucket: int  # seconds

    @property
    def points(self) -> int:
        return int((self.until - self.since).total_seconds()) // self.bucket


def _floor(at: datetime, seconds: int) -> datetime:
    return at.replace(microsecond=0) - timedelta(seconds=int(at.timestamp()) % seconds)


def usage_window(*, range_name: str | None = None, since: datetime | None = None,
                 until: datetime | None = None, bucket: str | None = None,
                 now: datetime | None = None) -> UsageWindow:
    """The window a usage query covers: a named range (``1h``, ``1d``, ``7d``, ``30d``,
    ending now) or ``since`` [``until``, default now]; buckets of ``bucket`` (``1m`` ...
    ``1d``; default: the range's, or the smallest with at most 400 points). The window is
    widened to whole buckets. Raises :class:`InvalidRequest` naming the bad parameter."""
    now = now or timezone.now()
    if range_name is not None and (since is not None or until is not None):
        raise InvalidRequest("Give either range or since/until, not both.", param="range",
                             code="invalid_range")
    if range_name is not None:
        if range_name not in RANGES:
            raise InvalidRequest(f"range must be one of {', '.join(RANGES)}.", param="range",
                                 code="invalid_range")
        length, default_bucket = RANGES[range_name]
        since, until = now - length, now
    else:
        if since is None:
            if until is not None:
                raise InvalidRequest("until needs since.", param="since", code="invalid_range")
            length, default_bucket = RANGES["1d"]
            since, until = now - length, now
        else:
            until = until or now
            if until <= since:
                raise InvalidRequest("until must be after since.", param="until",
                                     code="invalid_range")
            seconds = (until - since).total_seconds()
            default_bucket = next((b for b in BUCKETS.values() if seconds / b <= 400),
                                  BUCKETS["1d"])
    if bucket is not None and bucket not in BUCKETS:
        raise InvalidRequest(f"bucket must be one of {', '.join(BUCKETS)}.", param="bucket",
                             code="invalid_bucket")
    size = BUCKETS[bucket] if bucket is not None else default_bucket
    try:
        start = _floor(since, size)
        end = _floor(until, size)
        if end < until:
            end += timedelta(seconds=size)
    except (OverflowError, ValueError, OSError):  # at the ends of the calendar
        raise InvalidRequest("The window is out of range.", param="since",
                             code="invalid_range") from None
    window = UsageWindow(start, end, size)
    if window.points > MAX_POINTS:
        raise InvalidRequest(
            f"{window.points} buckets of {size} s: at most {MAX_POINTS}; ask for larger "
            "buckets or a shorter range.", param="bucket", code="too_many_buckets")
    return window


def _percentiles(counts: list[int] | tuple[int, ...]) -> dict[str, float | None]:
    total = sum(counts)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        if not total:
            out[f"p{p}"] = None
            continue
        want, seen = total * p / 100, 0
        for i, n in enumerate(counts):
            seen += n
            if seen >= want:
                out[f"p{p}"] = round(usage_bin_value(i), 1)
                break
    return out


_N = len(_SUMS)
_TTFT = slice(3, 3 + BINS)
_DURATION = slice(3 + BINS, 3 + 2 * BINS)


class _Acc:
    """Sums of one group's rows (the columns of ``_SUMS``) and its errors by kind."""

    __slots__ = ("errors", "sums")

    def __init__(self) -> None:
        self.sums: list[int] = [0] * _N
        self.errors: dict[str, int] = {}

    def add(self, kind: str, values: tuple[Any, ...]) -> None:
        self.sums = list(map(operator.add, self.sums, (v or 0 for v in values)))
        if kind:
            self.errors[kind] = self.errors.get(kind, 0) + (values[0] or 0)

    def figures(self) -> dict[str, Any]:
        s = self.sums
        return {
            "requests": int(s[0]), "input_tokens": int(s[1]), "output_tokens": int(s[2]),
            "cost_usd": str(dollars_of(int(s[-2]))), "unpriced_requests": int(s[-1]),
            "errors": dict(sorted(self.errors.items())),
            "ttft_ms": _percentiles(s[_TTFT]),
            "duration_ms": _percentiles(s[_DURATION]),
        }


def usage_filters_resolve(*, agent: str | None = None, key: str | None = None
                          ) -> tuple[int | None, int | None]:
    """The ids of the agent (by slug) and the API key (by prefix or id) a usage query is
    filtered by. Raises :class:`NotFound` for an unknown one."""
    agent_id = key_id = None
    if agent is not None:
        agent_id = Agent.objects.filter(slug=agent).values_list("pk", flat=True).first()
        if agent_id is None:
            raise NotFound(f"No agent {agent!r}.", param="agent", code="agent_not_found")
    if key is not None:
        match = ApiKey.objects.filter(prefix=key)
        if key.isdecimal():
            match = ApiKey.objects.filter(pk=int(key)) | match
        key_id = match.values_list("pk", flat=True).first()
        if key_id is None:
            raise NotFound(f"No API key {key!r} (give its prefix or id).", param="key",
                           code="key_not_found")
    return agent_id, key_id


def _cover(low: int, high: int, spans: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """[``low``, ``high``) (epoch seconds, whole minutes) as the fewest stored buckets:
    whole 6-hour spans, then hours and minutes at the edges. ``(span, since, until)``
    pieces."""
    if low >= high:
        return []
    span, finer = spans[0], spans[1:]
    if not finer:
        return [(span, low, high)]
    first, last = -(-low // span) * span, high // span * span
    if first >= last:
        return _cover(low, high, finer)
    return [*_cover(low, first, finer), (span, first, last), *_cover(last, high, finer)]


def usage_summary(*, window: UsageWindow, agent_id: int | None = None,
                  key_id: int | None = None, model: str | None = None) -> dict[str, Any]:
    """Usage in ``window``: totals, one point per bucket (every bucket, empty ones too) and
    the breakdowns per agent, per key and per upstream model, each with requests, tokens,
    errors by kind and p50/p95 of time to first token and duration (ms, to within a bin).

    Three grouped reads of the roll-up, each of the shape that holds the least for its
    part (UsageBucket.Shape): the series from rows of the largest span that divides the
    bucket; the breakdowns from the window cut into whole 6-hour spans, then hours and
    minutes at its edges (a week: 27 6-hour rows and 10 hour rows per group, not 168). In SQL
    without the ORM: rows of 67 sums, whose per-value converters in the ORM cost more than
    the database's work (scripts/perf/usage.py)."""
    qn = connection.ops.quote_name
    start_field = UsageBucket._meta.get_field("start")

    def at(epoch: int) -> Any:
        return start_field.get_db_prep_value(datetime.fromtimestamp(epoch, UTC), connection)

    # As integers (PostgreSQL's SUM of a bigint is a numeric, read as a slower Decimal).
    sums = ", ".join(f"CAST(SUM({qn(c)}) AS BIGINT)" for c in _SUMS)
    table = qn(UsageBucket._meta.db_table)

    def grouped(shape: int, columns: list[str], filters: dict[str, Any],
                pieces: list[tuple[int, int, int]]) -> list[tuple[Any, ...]]:
        ranges, params = [], []
        for span, low, high in pieces:
            ranges.append(f"({qn('span')} = %s AND {qn('shape')} = %s AND {qn('start')} >= %s"
                          f" AND {qn('start')} < %s)")
            params += [span, usage_stored_shape(shape, span), at(low), at(high)]
        where = [f"({' OR '.join(ranges)})"]
        for column, value in filters.items():
            if value is not None:
                where.append(f"{qn(column)} = %s")
                params.append(value)
        names = ", ".join(c if c.startswith("(") else qn(c) for c in columns)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {names}, {sums} FROM {table} "  # noqa: S608
                           f"WHERE {' AND '.join(where)} GROUP BY {names}", params)
            return cursor.fetchall()

    # Which rows answer which part (UsageBucket.Shape): the fewest that hold it.
    shape = UsageBucket.Shape
    narrowed = {"agent_id": agent_id, "model": model}
    keyed = {**narrowed, "key_id": key_id}
    narrow = agent_id is not None or model is not None
    if key_id is None:
        main, main_filters = shape.AGENT_MODEL, narrowed
        series, series_filters = (shape.AGENT_MODEL, narrowed) if narrow else (shape.TOTAL, {})
    else:
        main, main_filters = shape.FULL, keyed
        series, series_filters = (shape.FULL, keyed) if narrow else (shape.KEY, keyed)
    low, high = int(window.since.timestamp()), int(window.until.timestamp())
    whole = _cover(low, high, tuple(reversed(SPANS)))

    # The series: rows summed per bucket in the database (a day of 15-minute buckets reads
    # 1,440 minutes' rows and hands back about 200).
    points = [_Acc() for _ in range(window.points)]
    span = max(s for s in SPANS if window.bucket % s == 0)
    if connection.vendor == "postgresql":
        epoch = f"CAST(extract(epoch FROM {qn('start')}) AS bigint)"
    else:
        epoch = f"CAST(strftime('%%s', {qn('start')}) AS INTEGER)"
    point = f"(({epoch} - {low}) / {window.bucket})"
    for i, kind, *values in grouped(series, [point, "error_kind"], series_filters,
                                    [(span, low, high)]):
        if 0 <= int(i) < len(points):
            points[int(i)].add(kind, values)

    totals = _Acc()
    by: dict[str, dict[Any, _Acc]] = {"agent": {}, "key": {}, "model": {}}

    def tally(group: str, value: Any, kind: str, values: tuple[Any, ...]) -> None:
        acc = by[group].get(value)
        if acc is None:
            acc = by[group][value] = _Acc()
        acc.add(kind, values)

    for agent, model_name, kind, *values in grouped(
            main, ["agent_id", "model", "error_kind"], main_filters, whole):
        totals.add(kind, values)
        tally("agent", agent, kind, values)
        tally("model", model_name, kind, values)
    if narrow:
        by_key = grouped(shape.FULL, ["key_id", "error_kind"], keyed, whole)
    else:
        by_key = grouped(shape.KEY, ["key_id", "error_kind"], {"key_id": key_id}, whole)
    for key, kind, *values in by_key:
        tally("key", key, kind, values)

    users = usage_by_user(since=window.since, until=window.until, agent_id=agent_id,
                          key_id=key_id)
    slugs = dict(Agent.objects.filter(pk__in=list(by["agent"])).values_list("pk", "slug"))
    keys = {k.pk: k for k in ApiKey.objects.filter(
        pk__in=list(by["key"]) + [u[0] for u in users]).only("pk", "prefix", "name")}

    def ranked(group: dict[Any, _Acc], label: Any) -> list[dict[str, Any]]:
        out = [{**label(k), **v.figures()} for k, v in group.items()]
        return sorted(out, key=lambda r: -r["requests"])

    def key_label(pk: int) -> dict[str, Any]:
        k = keys.get(pk)
        return {"key": k.prefix if k else None,
                "name": k.name if k else ("no key" if pk == 0 else "deleted key")}

    return {
        "since": window.since.isoformat(),
        "until": window.until.isoformat(),
        "bucket_seconds": window.bucket,
        "bins": BINS,
        "totals": totals.figures(),
        "series": [{"start": (window.since + timedelta(seconds=i * window.bucket)).isoformat(),
                    **p.figures()} for i, p in enumerate(points)],
        "by_agent": ranked(by["agent"], lambda pk: {"agent": slugs.get(pk, str(pk))}),
        "by_key": ranked(by["key"], key_label),
        "by_model": ranked(by["model"], lambda m: {"model": m}),
        "by_user": [{**key_label(key), "user": user, "requests": int(n), "input_tokens": int(i),
                     "output_tokens": int(o), "cost_usd": str(dollars_of(int(c))),
                     "unpriced_requests": int(u)}
                    for key, user, n, i, o, c, u in users],
    }


USERS_SHOWN = 50


def usage_by_user(*, since: datetime, until: datetime, agent_id: int | None = None,
                  key_id: int | None = None) -> list[tuple[Any, ...]]:
    """The end users with the most turns in the hours that overlap [``since``, ``until``):
    ``(key_id, user, requests, input, output, cost_nanos, unpriced)``, at most
    :data:`USERS_SHOWN` (a user is their key's: :class:`agents.models.UserUsage`)."""
    qn = connection.ops.quote_name
    prep = UserUsage._meta.get_field("start").get_db_prep_value
    span, start = qn("span"), qn("start")
    first = _floor(since, UserUsage.HOUR)
    days = (_floor(first + timedelta(seconds=UserUsage.DAY - 1), UserUsage.DAY),
            _floor(until, UserUsage.DAY))  # the whole days inside: their day rows
    if days[0] < days[1]:
        spans = [(UserUsage.HOUR, first, days[0]), (UserUsage.DAY, *days),
                 (UserUsage.HOUR, days[1], until)]
    else:
        spans = [(UserUsage.HOUR, first, until)]
    parts, params = [], []
    for size, low, high in spans:
        parts.append(f"({span} = %s AND {start} >= %s AND {start} < %s)")
        params += [size, prep(low, connection), prep(high, connection)]
    where = ["(" + " OR ".join(parts) + ")"]
    for column, value in (("agent_id", agent_id), ("key_id", key_id)):
        if value is not None:
            where.append(f"{qn(column)} = %s")
            params.append(value)
    sums = ", ".join(f"CAST(SUM({qn(c)}) AS BIGINT)" for c in (
        "requests", "input_tokens", "output_tokens", "cost_nanos", "unpriced"))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {qn('key_id')}, {qn('user')}, {sums} "  # noqa: S608
                       f"FROM {qn(UserUsage._meta.db_table)} WHERE {' AND '.join(where)} "
                       f"GROUP BY {qn('key_id')}, {qn('user')} "
                       f"ORDER BY 3 DESC, 6 DESC LIMIT {USERS_SHOWN}", params)
        return cursor.fetchall()
