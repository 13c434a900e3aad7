"""Benchmark suites, runs and per-question results (issue 12, reference 002)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from agents.models import ApiKey

# The deterministic tools were written against the built-in 30 questions: their scores there are
# a baseline, not a model of the task. Every place that shows quality says so.
BASELINE_LABEL = ("baseline: deterministic tools (written against the built-in 30 HotpotQA "
                  "questions; EM 0.11 / F1 0.17 on 70 others), not a model of the task")
DETERMINISTIC = "deterministic"


class BenchmarkSuite(models.Model):
    """A set of HotpotQA-shaped questions (validated by ``mesh.suite.parse_suite``)."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    source = models.CharField(max_length=500, blank=True)
    licence = models.CharField(max_length=200, blank=True)
    questions = models.JSONField(default=list)
    question_count = models.PositiveIntegerField(default=0, editable=False)
    builtin = models.BooleanField(default=False, editable=False)
    created_by = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.question_count} questions)"


class BenchmarkRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    suite = models.ForeignKey(BenchmarkSuite, on_delete=models.PROTECT, related_name="runs")
    # {"mode": "all"} | {"mode": "first", "limit": N} | {"mode": "indexes", "indexes": [...]}
    selection = models.JSONField(default=dict)
    question_indexes = models.JSONField(default=list, editable=False)
    protocol = models.CharField(max_length=100, default="json")
    # role -> "deterministic" or an agent slug
    tools = models.JSONField(default=dict)
    question_timeout_s = models.FloatField(
        default=60.0, validators=[MinValueValidator(0.5), MaxValueValidator(3600)])
    time_limit_s = models.FloatField(
        default=3600.0, validators=[MinValueValidator(1), MaxValueValidator(24 * 3600)],
        help_text="The whole run; past it the run ends failed.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED,
                              db_index=True)
    submitted_by = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    submitted_by_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                          on_delete=models.SET_NULL, related_name="+")
    celery_task_id = models.CharField(max_length=100, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    questions_done = models.PositiveIntegerField(default=0)
    questions_total = models.PositiveIntegerField(default=0)
    packets = models.PositiveBigIntegerField(default=0)
    bytes = models.PositiveBigIntegerField(default=0)
    summary = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    notes = models.TextField(blank=True, help_text="Recoveries: one line each.")
    queued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-queued_at", "-id"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="bench_run_stale")]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.suite_id}, {self.status})"

    @property
    def baseline(self) -> bool:
        """Whether any role ran the deterministic tool (its quality is a baseline)."""
        return any(v == DETERMINISTIC for v in (self.tools or {}).values()) or not self.tools


class BenchmarkResult(models.Model):
    """One question of a run, written when it finishes."""

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="results")
    question_index = models.PositiveIntegerField()
    question_id = models.CharField(max_length=100, blank=True)
    question = models.TextField(blank=True)
    status = models.CharField(max_length=20)  # completed | failed
    error = models.TextField(blank=True)
    # None: no answer came (a failed question), which is not the empty answer.
    prediction = models.TextField(null=True, blank=True)  # noqa: DJ001
    gold = models.TextField(blank=True)
    exact_match = models.FloatField(null=True, blank=True)
    f1 = models.FloatField(null=True, blank=True)
    rouge_l = models.FloatField(null=True, blank=True)
    bytes_tx = models.PositiveBigIntegerField(default=0)
    bytes_rx = models.PositiveBigIntegerField(default=0)
    packets = models.PositiveIntegerField(default=0)
    header_overhead = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    tokens_by_agent = models.JSONField(default=dict, blank=True)
    elapsed_ms = models.FloatField(default=0.0)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["run", "question_index"]
        constraints = [models.UniqueConstraint(fields=["run", "question_index"],
                                               name="bench_result_run_question_unique")]

    def __str__(self) -> str:
        return f"run {self.run_id} q{self.question_index} {self.status}"
