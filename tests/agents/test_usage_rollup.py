"""The usage roll-up: log-spaced bins, buckets aligned to the minute and the hour, turns of
one bucket summed into one row in the reply's transaction, an abandoned turn counted as
interrupted, and the summary's window rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agents import llm, selectors, services
from agents.exceptions import InvalidRequest
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
    assert {r.span for r in rows} == {60, 3600}
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
    # The same turns in the other two shapes: per agent and model, and per key.
    for shape, where in ((UsageBucket.Shape.AGENT_MODEL, {"agent_id": agent.pk, "key_id": 0}),
                         (UsageBucket.Shape.KEY, {"agent_id": 0, "key_id": key.pk})):
        same = UsageBucket.objects.filter(shape=shape, span=3600, **where)
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
