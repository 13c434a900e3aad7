"""``GET /api/v1/usage``: usage over time (requests, tokens, errors by kind, p50/p95 of time
to first token and duration) per bucket and per agent, key and upstream model, for Grafana,
scripts and the console's charts. The same edge as :mod:`agents.apis`; the window's rules
and the figures live in :mod:`agents.selectors.usage`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors
from agents.apis import OperatorApi
from agents.http.rest import StrictSerializer
from agents.selectors.usage import BUCKETS, RANGES


class UsagePercentiles(serializers.Serializer):
    p50 = serializers.FloatField(allow_null=True)
    p95 = serializers.FloatField(allow_null=True)


class UsageFigures(serializers.Serializer):
    requests = serializers.IntegerField(help_text="Finished turns (failed ones too).")
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost_usd = serializers.CharField(help_text="What the priced turns cost, USD (a decimal).")
    unpriced_requests = serializers.IntegerField(
        help_text="Turns that used tokens of a model with no known price (not in cost_usd).")
    errors = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Failed turns by kind: error, client_disconnected, interrupted, killed.")
    ttft_ms = UsagePercentiles(help_text="Time to first token, ms (to within a histogram "
                               "bin: a factor of 1.5; null: no turn reported one).")
    duration_ms = UsagePercentiles(help_text="Turn duration, ms (to within a bin).")


class UsagePoint(UsageFigures):
    start = serializers.DateTimeField(help_text="The bucket's start (UTC).")


class UsageByAgent(UsageFigures):
    agent = serializers.CharField()


class UsageByKey(UsageFigures):
    key = serializers.CharField(allow_null=True, help_text="The key's prefix (null: none, or "
                                "a deleted key).")
    name = serializers.CharField()


class UsageByModel(UsageFigures):
    model = serializers.CharField(allow_blank=True, help_text="The upstream model.")


class UsageByUser(serializers.Serializer):
    key = serializers.CharField(allow_null=True, help_text="The key whose user it is.")
    name = serializers.CharField(help_text="The key's name.")
    user = serializers.CharField(help_text="The end user as the key's clients name them.")
    requests = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost_usd = serializers.CharField()
    unpriced_requests = serializers.IntegerField()


class UsageOutput(serializers.Serializer):
    since = serializers.DateTimeField(help_text="The window's start, aligned to a bucket.")
    until = serializers.DateTimeField(help_text="Its end (exclusive), aligned up.")
    bucket_seconds = serializers.IntegerField()
    bins = serializers.IntegerField(help_text="Histogram bins behind each percentile.")
    totals = UsageFigures()
    series = UsagePoint(many=True, help_text="One point per bucket, empty ones included.")
    by_agent = UsageByAgent(many=True)
    by_key = UsageByKey(many=True)
    by_model = UsageByModel(many=True)
    by_user = UsageByUser(many=True, help_text="The 50 end users with the most turns, in "
                          "whole hours (a user is their key's); not narrowed by model.")


class UsageApi(OperatorApi):
    schema_errors = (404,)

    class FilterSerializer(StrictSerializer):
        range = serializers.ChoiceField(
            choices=list(RANGES), required=False,
            help_text="A window ending now (default 1d); or give since/until.")
        since = serializers.DateTimeField(required=False)
        until = serializers.DateTimeField(required=False, help_text="Default: now.")
        bucket = serializers.ChoiceField(
            choices=list(BUCKETS), required=False,
            help_text="Bucket size (default: the range's; at most 2000 buckets).")
        agent = serializers.CharField(required=False, max_length=100,
                                      help_text="An agent's slug (404 if unknown).")
        key = serializers.CharField(required=False, max_length=32,
                                    help_text="An API key's prefix or id (404 if unknown).")
        model = serializers.CharField(required=False, max_length=200,
                                      help_text="An upstream model.")

    @extend_schema(parameters=[FilterSerializer], responses=UsageOutput,
                   summary="Usage over time, per agent, key and upstream model",
                   operation_id="usage_retrieve")
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        window = selectors.usage_window(range_name=f.get("range"), since=f.get("since"),
                                        until=f.get("until"), bucket=f.get("bucket"))
        agent_id, key_id = selectors.usage_filters_resolve(agent=f.get("agent"),
                                                           key=f.get("key"))
        # The selector's dict is already the documented shape (UsageOutput): rendering a
        # 2000-point series through DRF's serializers would cost more than the query.
        return Response(selectors.usage_summary(window=window, agent_id=agent_id,
                                                key_id=key_id, model=f.get("model")))
