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
    """One version of a suite: HotpotQA-shaped questions for the mesh (``questions``, validated
    by ``mesh.suite.parse_suite``), or conversations to replay against agents (its
    :class:`SuiteCase` rows). A version never changes once made: editing a suite makes the
    next version under the same name, and a run names the version it used."""

    class Kind(models.TextChoices):
        HOTPOTQA = "hotpotqa"
        CONVERSATIONS = "conversations"

    name = models.SlugField(max_length=100)
    version = models.PositiveIntegerField(default=1, editable=False)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.HOTPOTQA)
    # How a conversation suite was made: {"from_threads": {...}} or {"jsonl": {...}}.
    origin = models.JSONField(default=dict, blank=True)
    description = models.TextField(blank=True)
    source = models.CharField(max_length=500, blank=True)
    licence = models.CharField(max_length=200, blank=True)
    questions = models.JSONField(default=list)
    question_count = models.PositiveIntegerField(default=0, editable=False)
    builtin = models.BooleanField(default=False, editable=False)
    created_by = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_by_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                        on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["name", "-version"]
        constraints = [models.UniqueConstraint(fields=["name", "version"],
                                               name="bench_suite_name_version_unique")]

    def __str__(self) -> str:
        what = "cases" if self.kind == self.Kind.CONVERSATIONS else "questions"
        return f"{self.name} v{self.version} ({self.question_count} {what})"

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


class SuiteCase(models.Model):
    """One case of a conversation suite: a conversation up to a user message (``input``, the
    messages as ``{"role", "content"}``) and the reply that was given (``ideal``, the
    reference), with where it came from. A copy: deleting the thread does not change it."""

    suite = models.ForeignKey(BenchmarkSuite, on_delete=models.CASCADE, related_name="cases")
    index = models.PositiveIntegerField()
    input = models.JSONField(default=list)
    ideal = models.TextField(blank=True)
    source_thread = models.UUIDField(null=True, blank=True)
    source_message = models.BigIntegerField(null=True, blank=True)
    source_agent = models.CharField(max_length=100, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["suite", "index"]
        constraints = [models.UniqueConstraint(fields=["suite", "index"],
                                               name="bench_case_suite_index_unique")]

    def __str__(self) -> str:
        return f"{self.suite_id} case {self.index}"


class BenchmarkRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    class Kind(models.TextChoices):
        MESH = "mesh"  # HotpotQA questions through the mesh relay
        REPLAY = "replay"  # a conversation suite replayed against agents

    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.MESH)
    suite = models.ForeignKey(BenchmarkSuite, on_delete=models.PROTECT, related_name="runs")
    # A replay's targets (agent slugs, "auto", "team/<slug>"), its judge (an agent's slug,
    # blank: none), and how many workers may share it (its parts, RunPart) with how many
    # cases in flight in each.
    agents = models.JSONField(default=list, blank=True)
    judge = models.CharField(max_length=100, blank=True)
    parallel = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(32)])
    concurrency = models.PositiveSmallIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(64)])
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


class RunPart(models.Model):
    """A share of a replay run that one worker executes: the run's items (case x agent) at
    positions ``index``, ``index + parts``, ... Parts are claimed, heartbeated and recovered
    like runs, so any number of workers on any machines share a run."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="parts")
    index = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    worker = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"],
                                               name="bench_part_run_index_unique")]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="bench_part_stale")]

    def __str__(self) -> str:
        return f"run {self.run_id} part {self.index} ({self.status})"


class BenchmarkResult(models.Model):
    """One question of a run (one case for one agent, in a replay), written when it ends."""

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="results")
    question_index = models.PositiveIntegerField()
    agent = models.CharField(max_length=100, blank=True)  # a replay's target; mesh: blank
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
    # A replay's scores besides EM/F1/ROUGE-L: embedding similarity to the reference, and the
    # judge's verdict (score 0-1, better/same/worse than the reference, reason) or why none.
    similarity = models.FloatField(null=True, blank=True)
    judge_score = models.FloatField(null=True, blank=True)
    judge_verdict = models.CharField(max_length=10, blank=True)
    judge_reason = models.TextField(blank=True)
    judge_error = models.TextField(blank=True)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    tool_calls = models.PositiveIntegerField(default=0)
    thread_id = models.UUIDField(null=True, blank=True)  # the replayed turn's thread
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["run", "question_index", "agent"]
        constraints = [models.UniqueConstraint(fields=["run", "question_index", "agent"],
                                               name="bench_result_run_question_agent_unique")]

    def __str__(self) -> str:
        return f"run {self.run_id} q{self.question_index} {self.status}"


class QueueWorker(models.Model):
    """A process that executes runs (a Celery worker, or a server's embedded worker), as its
    last beat says: it beats every ``GAIA_BENCH_REAP_SECONDS`` and counts as alive until its
    beat is older than ``GAIA_BENCH_STALE_SECONDS`` (then it is marked lost). Written by
    :mod:`benchmarks.queue`; the run pages and the run API read it to say whether anything
    will run a queued run."""

    class Kind(models.TextChoices):
        CELERY = "celery"
        EMBEDDED = "embedded"

    name = models.CharField(max_length=200, unique=True)  # host:pid (as a run's ``worker``)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    started_at = models.DateTimeField(default=timezone.now)
    beat_at = models.DateTimeField(db_index=True)
    lost_at = models.DateTimeField(null=True, blank=True)  # stopped, or its beat went stale

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.kind} worker {self.name}" + (" (lost)" if self.lost_at else "")
