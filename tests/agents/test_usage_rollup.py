"""The usage roll-up: log-spaced bins, buckets aligned to the minute and the hour, turns of
one bucket summed into one row in the reply's transaction, an abandoned turn counted as
interrupted, and the summary's window rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agents import selectors, services
from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from agents.models import Thread, UsageBucket
from agents.models.usage import BIN_EDGES_MS, BIN_RATIO, BINS, usage_bin, usage_bin_value

pytestmark = pytest.mark.django_db


def test_bins_are_log_spaced_and_each_value_lands_in_its_own():
    assert usage_bin(0) == 0
    assert usage_bin(9.99) == 0
    for i in range(1, BINS):
        assert usage_bin(BIN_EDGES_MS[i]) == i
        assert usage_bin(BIN_EDGES_MS[i] * 0.999) == i - 1
        assert usage_bin(usage_bin_value(i)) == i  # a percentile reads back in its bin
    assert usage_bin(10**9) == BINS - 1
    assert BIN_EDGES_MS[5] / BIN_EDGES_MS[4] == pytest.approx(BIN_RATIO)


def test_bucket_starts_are_aligned():
    at = datetime(2026, 3, 4, 10, 37, 42, 123456, tzinfo=UTC)
    assert services.usage.bucket_start(at, 60) == datetime(2026, 3, 4, 10, 37, tzinfo=UTC)
    assert services.usage.bucket_start(at, 3600) == datetime(2026, 3, 4, 10, tzinfo=UTC)


def turn(agent, *, key=None, error="", finish="stop", ttft=120, latency=900, tokens=(7, 3)):
    start = services.thread_turn_begin(
        agent=agent, api_key=key, session_key=f"s{timezone.now().timestamp()}", thread_id=None,
        user="u", incoming=[llm.Message(role="user", parts=(llm.TextPart("hi"),))],
        workspace_root=None, dialect="chat", lease_seconds=60)
    services.thread_turn_finish(start=start, dialect="chat", result=services.TurnResult(
        text="" if error else "ok", error=error, finish_reason=finish, ttft_ms=ttft,
        latency_ms=latency, input_tokens=tokens[0], output_tokens=tokens[1], model="m-1"))


def test_turns_of_one_minute_share_a_row_per_span(make_agent, make_key):
    agent = make_agent()
    key = make_key("k", scopes=["chat"])[0]
    turn(agent, key=key)
    turn(agent, key=key, ttft=5000, tokens=(1, 1))
    turn(agent, key=key, error="boom", finish="error", ttft=None, latency=30)
    rows = UsageBucket.objects.filter(agent_id=agent.pk, shape=UsageBucket.Shape.FULL
                                      ).order_by("span", "error_kind")
    # A minute boundary may fall between the turns: at most two minute rows per kind.
    assert {r.span for r in rows} == {60, 3600, 21600}
    hour = [r for r in rows if r.span == 3600]
    assert [(r.error_kind, r.requests, r.key_id, r.model) for r in hour] == [
        ("", 2, key.pk, "m-1"), ("error", 1, key.pk, "m-1")]
    ok = hour[0]
    assert (ok.input_tokens, ok.output_tokens) == (8, 4)
    assert getattr(ok, f"ttft_{usage_bin(120)}") == 1
    assert getattr(ok, f"ttft_{usage_bin(5000)}") == 1
    assert getattr(hour[1], f"duration_{usage_bin(30)}") == 1
    assert sum(getattr(hour[1], f"ttft_{i}") for i in range(BINS)) == 0  # none reported
    assert sum(r.requests for r in rows if r.span == 60) == 3
    # The same turns in the other three shapes: per agent and model, per key, in all; and
    # in the 6-hour span's rows.
    for shape, where in ((UsageBucket.Shape.AGENT_MODEL, {"agent_id": agent.pk, "key_id": 0}),
                         (UsageBucket.Shape.KEY, {"agent_id": 0, "key_id": key.pk}),
                         (UsageBucket.Shape.TOTAL, {"agent_id": 0, "key_id": 0, "model": ""})):
        for span in (3600, 21600):
            same = UsageBucket.objects.filter(shape=shape, span=span, **where)
            assert sorted((r.error_kind, r.requests, r.input_tokens) for r in same) == [
                ("", 2, 8), ("error", 1, 7)]


def test_a_failed_write_leaves_no_usage(make_agent):
    agent = make_agent()

    def turn_then_fail():
        with transaction.atomic():
            turn(agent)
            raise RuntimeError("the reply's transaction rolled back")

    with pytest.raises(RuntimeError):
        turn_then_fail()
    assert not UsageBucket.objects.filter(agent_id=agent.pk).exists()


def test_an_abandoned_turn_counts_as_interrupted(make_agent):
    agent = make_agent()
    thread = Thread.objects.create(agent=agent, session_key="s", history_digest="d",
                                   message_count=1, lock_token="t" * 32,
                                   lock_expires_at=timezone.now() - timedelta(seconds=1))
    thread.messages.create(seq=0, role="user", content="hello")
    assert services.thread_leases_sweep() == 1
    row = UsageBucket.objects.get(agent_id=agent.pk, span=3600,
                                  shape=UsageBucket.Shape.AGENT_MODEL)
    assert (row.error_kind, row.requests, row.model) == ("interrupted", 1, agent.model_name)


def test_window_rules():
    now = datetime(2026, 3, 4, 10, 37, 42, tzinfo=UTC)
    w = selectors.usage_window(range_name="1h", now=now)
    assert (w.since, w.until, w.bucket) == (datetime(2026, 3, 4, 9, 37, tzinfo=UTC),
                                            datetime(2026, 3, 4, 10, 38, tzinfo=UTC), 60)
    assert selectors.usage_window(range_name="7d", now=now).bucket == 3600
    custom = selectors.usage_window(since=now - timedelta(hours=5), now=now)
    assert custom.points <= 400
    assert selectors.usage_window(range_name="30d", bucket="1d", now=now).points == 31
    with pytest.raises(InvalidRequest) as err:
        selectors.usage_window(range_name="30d", bucket="1m", now=now)
    assert err.value.param == "bucket"


def _rows() -> list[tuple]:
    return sorted(tuple(v for k, v in r.items() if k != "id")
                  for r in UsageBucket.objects.values())


def test_every_row_derived_from_the_minute_rows_equals_the_rows_turns_write(make_agent):
    """usage_rebuild writes only the FULL minute rows and sums the rest in SQL
    (usage_derive, which the migration adding day rows runs too): the same rows, to the
    last bin, as the turns' own upserts across minute, hour and 6-hour boundaries."""
    agents = [make_agent(), make_agent()]
    base = datetime(2026, 3, 4, 23, 58, 30, tzinfo=UTC)
    turns = [services.usage.UsageTurn(
        at=base + timedelta(seconds=37 * i), agent_id=agents[i % 2].pk, key_id=i % 3,
        model=f"m{i % 2}", error_kind=("error" if i % 7 == 0 else ""), input_tokens=i,
        output_tokens=2 * i, ttft_ms=(None if i % 5 == 0 else 10 * i), latency_ms=100 * i)
        for i in range(300)]  # three hours over a midnight
    services.usage_record_many(turns=turns)
    written = _rows()
    assert {(r[0], r[1]) for r in written} == {(60, 0), (60, 3)} | {
        (s, h) for s in (3600, 21600) for h in range(4)}
    UsageBucket.objects.all().delete()
    services.usage_record_many(turns=turns, full_minutes_only=True)
    assert {r[:2] for r in _rows()} == {(60, 0)}
    services.usage.usage_derive(targets=services.usage.DERIVED,
                                since=datetime(2026, 3, 4, tzinfo=UTC),
                                until=datetime(2026, 3, 6, tzinfo=UTC))
    assert _rows() == written


def test_a_window_is_read_as_whole_6_hour_spans_then_hours_then_minutes():
    from agents.selectors.usage import _cover

    day, six, hour, minute = 86400, 21600, 3600, 60
    spans = (six, hour, minute)
    # A week from 09:37, aligned to the minute: minutes, hours, 6-hour spans, hours, minutes.
    low = 3 * day + 9 * hour + 37 * minute
    high = low + 7 * day + hour + minute
    pieces = _cover(low, high, spans)
    assert [p[0] for p in pieces] == [minute, hour, six, hour, minute]
    assert pieces[2] == (six, 3 * day + 2 * six, 10 * day + six)
    assert all(a[2] == b[1] for a, b in zip(pieces, pieces[1:], strict=False))  # contiguous
    assert (pieces[0][1], pieces[-1][2]) == (low, high)
    assert _cover(low, low + 5 * minute, spans) == [(minute, low, low + 5 * minute)]
    assert _cover(0, 2 * day, spans) == [(six, 0, 2 * day)]


def test_every_window_and_filter_reads_what_a_count_of_the_turns_says(make_agent, make_key):
    """The summary reads 6-hour, hour and minute rows of four shapes: over turns spread across
    40 days, each range, bucket and filter agrees with counting the turns themselves."""
    from agents.selectors.usage import _percentiles

    agents = [make_agent(), make_agent()]
    keys = [make_key(f"k{i}", scopes=["chat"])[0] for i in range(2)]
    now = datetime(2026, 3, 4, 10, 37, 42, tzinfo=UTC)
    turns = [services.usage.UsageTurn(
        at=now - timedelta(seconds=(i * 7919) % (40 * 86400)), agent_id=agents[i % 2].pk,
        key_id=keys[i % 3 % 2].pk if i % 3 else 0, model=f"m{i % 4 // 2}",
        error_kind=("killed" if i % 11 == 0 else ""), input_tokens=i, output_tokens=1,
        ttft_ms=(i * 37) % 5000, latency_ms=(i * 53) % 90000) for i in range(3000)]
    services.usage_record_many(turns=turns)

    def expect(chosen):
        bins = [0] * BINS
        for t in chosen:
            bins[usage_bin(t.ttft_ms)] += 1
        return (len(chosen), sum(t.input_tokens for t in chosen),
                sum(1 for t in chosen if t.error_kind), _percentiles(bins))

    def got(figures):
        return (figures["requests"], figures["input_tokens"], sum(figures["errors"].values()),
                figures["ttft_ms"])

    windows = [{"range_name": r} for r in ("1h", "1d", "7d", "30d")] + [
        {"range_name": "30d", "bucket": "1d"}, {"range_name": "7d", "bucket": "15m"},
        {"since": now - timedelta(days=9, hours=5), "until": now - timedelta(days=2)}]
    filters = [{}, {"agent_id": agents[1].pk}, {"key_id": keys[0].pk}, {"model": "m1"},
               {"agent_id": agents[0].pk, "key_id": keys[1].pk}]
    for params in windows:
        w = selectors.usage_window(now=now, **params)
        inside = [t for t in turns if w.since <= t.at < w.until]
        for f in filters:
            chosen = [t for t in inside if all(
                getattr(t, k) == v for k, v in f.items())]
            body = selectors.usage_summary(window=w, **f)
            assert got(body["totals"]) == expect(chosen), (params, f)
            for p in body["series"]:
                start = datetime.fromisoformat(p["start"])
                bucket = [t for t in chosen
                          if start <= t.at < start + timedelta(seconds=w.bucket)]
                assert got(p) == expect(bucket), (params, f, p["start"])
            for row in body["by_agent"]:
                pk = next(a.pk for a in agents if a.slug == row["agent"])
                assert got(row) == expect([t for t in chosen if t.agent_id == pk])
            for row in body["by_key"]:
                pk = next((k.pk for k in keys if k.prefix == row["key"]), 0)
                assert got(row) == expect([t for t in chosen if t.key_id == pk])


def test_the_migration_adding_6_hour_and_total_rows_fills_them_from_the_stored_rows(make_agent):
    import importlib
    from types import SimpleNamespace

    from django.db import connection

    migration = importlib.import_module("agents.migrations.0019_usage_quarter_days")
    agent = make_agent()
    turns = [services.usage.UsageTurn(
        at=timezone.now() - timedelta(hours=7 * i), agent_id=agent.pk, key_id=0, model="m",
        error_kind="", input_tokens=1, output_tokens=1, ttft_ms=100, latency_ms=900)
        for i in range(20)]
    services.usage_record_many(turns=turns)
    written = _rows()
    # The rows the code before it wrote: minute and hour rows of the first three shapes.
    UsageBucket.objects.filter(shape=UsageBucket.Shape.TOTAL).delete()
    UsageBucket.objects.filter(span=21600).delete()
    # and minute rows per agent and per key, no longer kept
    stale = [UsageBucket.objects.create(span=60, shape=shape, start=t.at.replace(
        second=0, microsecond=0), agent_id=agent.pk, requests=1) for shape in (1, 2)
        for t in turns[:3]]
    migration.fill(None, SimpleNamespace(connection=connection))
    assert not UsageBucket.objects.filter(pk__in=[r.pk for r in stale]).exists()
    assert _rows() == written
