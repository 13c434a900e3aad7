"""Schedules: an agent asked a prompt, or a replay suite run against agents, on a cron
expression in a time zone. Each owns a ``django_celery_beat`` periodic task (the beat's
database scheduler fires it); :mod:`agents.services.schedules` keeps the two in step."""

from __future__ import annotations

from django.db import models

from agents.models.agents import Agent
from agents.models.threads import Thread


class Schedule(models.Model):
    class Kind(models.TextChoices):
        AGENT = "agent"  # an agent answers a prompt
        REPLAY = "replay"  # a conversation suite replayed against agents

    class ThreadMode(models.TextChoices):
        NEW = "new"  # a new thread each run
        CONTINUE = "continue"  # the schedule's one thread gets a new turn each run

    class Status(models.TextChoices):
        NEVER = "never"
        RUNNING = "running"
        OK = "ok"
        FAILED = "failed"

    name = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True)
    cron = models.CharField(max_length=200, help_text="Five fields: minute hour day-of-month "
                            "month day-of-week (Celery's crontab).")
    timezone = models.CharField(max_length=64, default="UTC", help_text="An IANA time zone.")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.AGENT)
    # kind agent: SET_NULL so that a schedule whose agent was deleted stays, and fails visibly
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="schedules")
    prompt = models.TextField(blank=True)
    thread_mode = models.CharField(max_length=10, choices=ThreadMode.choices,
                                   default=ThreadMode.NEW)
    # kind replay: the suite's name (its newest version at each run) and the targets; the
    # core knows no benchmarks app, so by name (benchmarks registers the runner).
    suite = models.CharField(max_length=100, blank=True)
    targets = models.JSONField(default=list, blank=True)
    # The schedule's thread (continue), or the newest run's thread (new).
    thread = models.ForeignKey(Thread, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    last_run_id = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="The newest replay run it started.")
    # The tick (its scheduled time, UTC) the newest firing claimed: a conditional update
    # moves it forward, so two beats firing the same tick make one run.
    last_fired_for = models.DateTimeField(null=True, blank=True, editable=False)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_status = models.CharField(max_length=10, choices=Status.choices,
                                   default=Status.NEVER)
    last_error = models.TextField(blank=True)
    run_count = models.PositiveIntegerField(default=0)
    periodic_task = models.OneToOneField("django_celery_beat.PeriodicTask", null=True,
                                         blank=True, on_delete=models.SET_NULL,
                                         related_name="gaia_schedule", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
