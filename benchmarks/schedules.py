"""Replay schedules (``kind: replay`` in ``/api/v1/schedules``): the core knows no benchmarks
app, so this app tells it how such a schedule is checked and how a tick starts its replay run
(:func:`agents.services.schedule_target_register`, at startup)."""

from __future__ import annotations

from typing import Any

from agents import services as agent_services
from agents.kernel.exceptions import InvalidRequest
from benchmarks import selectors
from benchmarks.kinds.replay import MAX_AGENTS, _target_check, replay_run_create
from benchmarks.models import BenchmarkSuite


def _suite(name: str) -> BenchmarkSuite:
    suite = selectors.suite_get(ref=name) if name else None
    if suite is None:
        raise InvalidRequest(f"suite: no suite {name!r}.", param="suite", code="suite_not_found")
    if suite.kind != BenchmarkSuite.Kind.CONVERSATIONS:
        raise InvalidRequest(f"suite: {suite.label} holds questions for the mesh; a schedule "
                             "replays a conversation suite.", param="suite")
    return suite


def replay_schedule_check(*, suite: str, targets: list[Any]) -> None:
    """A replay schedule's suite and targets as a replay run would take them (400s)."""
    _suite(suite)
    if not isinstance(targets, list) or not targets:
        raise InvalidRequest("targets: one or more agents to replay against.", param="targets")
    if len(targets) > MAX_AGENTS:
        raise InvalidRequest(f"targets: at most {MAX_AGENTS}.", param="targets")
    for i, target in enumerate(targets):
        _target_check(target, f"targets[{i}]")


def replay_schedule_start(*, schedule: Any) -> int:
    """Queue the replay of the schedule's suite (its newest version) against its targets."""
    run = replay_run_create(suite=_suite(schedule.suite), agents=list(schedule.targets))
    return run.pk


def register() -> None:
    agent_services.schedule_target_register("replay", check=replay_schedule_check,
                                            start=replay_schedule_start)
