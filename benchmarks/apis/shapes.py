"""The shapes ``/api/v1/benchmarks/`` answers with: the selectors' dicts, declared for the
schema (the schema fuzz test checks live bodies against them)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from benchmarks.models import BenchmarkRun

TOOLS_HELP = "Every role -> 'deterministic' or the slug of the agent that plays it."


@extend_schema_serializer(component_name="BenchmarkProgress")
class ProgressOutput(serializers.Serializer):
    questions_done = serializers.IntegerField()
    questions_total = serializers.IntegerField()
    packets = serializers.IntegerField()
    bytes = serializers.IntegerField()


@extend_schema_serializer(component_name="BenchmarkRun")
class RunOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=BenchmarkRun.Kind.choices)
    suite = serializers.CharField()
    suite_id = serializers.IntegerField()
    suite_version = serializers.IntegerField()
    agents = serializers.ListField(child=serializers.CharField(),
                                   help_text="A replay's targets (empty for a mesh run).")
    judge = serializers.CharField(allow_null=True)
    parallel = serializers.IntegerField(help_text="How many workers may share a replay.")
    status = serializers.ChoiceField(choices=BenchmarkRun.Status.choices)
    protocol = serializers.CharField()
    selection = serializers.DictField()
    question_indexes = serializers.ListField(child=serializers.IntegerField())
    tools = serializers.DictField(child=serializers.CharField(), help_text=TOOLS_HELP)
    baseline = serializers.BooleanField()
    quality_label = serializers.CharField()
    question_timeout_s = serializers.FloatField()
    time_limit_s = serializers.FloatField()
    submitted_by = serializers.CharField(allow_null=True)
    celery_task_id = serializers.CharField(allow_null=True)
    worker = serializers.CharField(allow_null=True)
    attempts = serializers.IntegerField()
    heartbeat_at = serializers.CharField(allow_null=True)
    progress = ProgressOutput()
    summary = serializers.DictField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    notes = serializers.ListField(child=serializers.CharField())
    queued_at = serializers.CharField()
    started_at = serializers.CharField(allow_null=True)
    finished_at = serializers.CharField(allow_null=True)


@extend_schema_serializer(component_name="BenchmarkQueue")
class QueueOutput(serializers.Serializer):
    workers = serializers.IntegerField(help_text="Workers (Celery, or servers' embedded "
                                                 "workers) whose beat is fresh.")
    alive = serializers.BooleanField(help_text="False: a queued run waits until one starts.")


@extend_schema_serializer(component_name="BenchmarkRunDetail")
class RunDetailOutput(RunOutput):
    artifacts = serializers.ListField(child=serializers.CharField(),
                                      help_text="Names for GET .../artifacts/{name}.")
    queue = QueueOutput(help_text="Whether any worker is alive to run it.")


@extend_schema_serializer(component_name="BenchmarkResult")
class ResultOutput(serializers.Serializer):
    question_index = serializers.IntegerField()
    agent = serializers.CharField(allow_null=True, help_text="A replay's target.")
    question_id = serializers.CharField(allow_blank=True)
    question = serializers.CharField(allow_blank=True)
    status = serializers.CharField()
    error = serializers.CharField(allow_null=True)
    prediction = serializers.CharField(allow_null=True, allow_blank=True)
    gold = serializers.CharField(allow_blank=True)
    exact_match = serializers.FloatField(allow_null=True)
    f1 = serializers.FloatField(allow_null=True)
    rouge_l = serializers.FloatField(allow_null=True)
    bytes_tx = serializers.IntegerField()
    bytes_rx = serializers.IntegerField()
    packets = serializers.IntegerField()
    header_overhead = serializers.IntegerField()
    tokens = serializers.IntegerField()
    tokens_by_agent = serializers.DictField()
    elapsed_ms = serializers.FloatField()
    similarity = serializers.FloatField(allow_null=True)
    judge_score = serializers.FloatField(allow_null=True)
    judge_verdict = serializers.CharField(allow_null=True)
    judge_reason = serializers.CharField(allow_null=True)
    judge_error = serializers.CharField(allow_null=True)
    ttft_ms = serializers.IntegerField(allow_null=True)
    tool_calls = serializers.IntegerField()
    thread_id = serializers.CharField(allow_null=True)
    artifacts = serializers.ListField(child=serializers.CharField())


@extend_schema_serializer(component_name="BenchmarkRunResults")
class RunResultsOutput(serializers.Serializer):
    run_id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=BenchmarkRun.Status.choices)
    suite = serializers.CharField()
    tools = serializers.DictField(child=serializers.CharField(), help_text=TOOLS_HELP)
    baseline = serializers.BooleanField()
    quality_label = serializers.CharField()
    summary = serializers.DictField(allow_null=True)
    results = ResultOutput(many=True)


@extend_schema_serializer(component_name="BenchmarkCompareRun")
class CompareRunOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=BenchmarkRun.Kind.choices)
    suite = serializers.CharField()
    suite_version = serializers.IntegerField()
    agents = serializers.ListField(child=serializers.CharField())
    judge = serializers.CharField(allow_null=True)
    protocol = serializers.CharField()
    tools = serializers.DictField(child=serializers.CharField(), help_text=TOOLS_HELP)
    status = serializers.ChoiceField(choices=BenchmarkRun.Status.choices)
    baseline = serializers.BooleanField()
    quality_label = serializers.CharField()
    summary = serializers.DictField(allow_null=True)


@extend_schema_serializer(component_name="BenchmarkCompareAnswer")
class CompareAnswerOutput(serializers.Serializer):
    prediction = serializers.CharField(allow_null=True, allow_blank=True)
    status = serializers.CharField()
    exact_match = serializers.FloatField(allow_null=True)
    f1 = serializers.FloatField(allow_null=True)
    rouge_l = serializers.FloatField(allow_null=True)
    similarity = serializers.FloatField(allow_null=True)
    judge_score = serializers.FloatField(allow_null=True)
    bytes = serializers.IntegerField()
    elapsed_ms = serializers.FloatField()


@extend_schema_serializer(component_name="BenchmarkCompareQuestion")
class CompareQuestionOutput(serializers.Serializer):
    question_index = serializers.IntegerField()
    question = serializers.CharField(allow_null=True, allow_blank=True)
    gold = serializers.CharField(allow_null=True, allow_blank=True)
    runs = serializers.DictField(child=CompareAnswerOutput(allow_null=True),
                                 help_text="Column key (a run's id, or 'id:agent' for a "
                                 "replay's target) -> its answer (null: not asked).")
    differs = serializers.BooleanField()


@extend_schema_serializer(component_name="BenchmarkCompareColumn")
class CompareColumnOutput(serializers.Serializer):
    key = serializers.CharField()
    run = serializers.IntegerField()
    agent = serializers.CharField(allow_null=True)
    label = serializers.CharField()
    summary = serializers.DictField(allow_null=True)


@extend_schema_serializer(component_name="BenchmarkCompare")
class CompareOutput(serializers.Serializer):
    runs = CompareRunOutput(many=True)
    columns = CompareColumnOutput(many=True)
    questions = CompareQuestionOutput(many=True)
    differences = serializers.ListField(child=serializers.IntegerField())
    warnings = serializers.ListField(child=serializers.CharField())
