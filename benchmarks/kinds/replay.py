"""The ``replay`` kind of run: a conversation suite's cases replayed against agents (targets:
an agent, ``auto`` or ``team/<slug>``), scored against the replies the conversations had and,
with a judge, judged. Its items (case x target) are split into ``parallel`` parts
(:class:`RunPart`: the items at positions ``index``, ``index + parts``...) that workers claim,
heartbeat and finish one by one through the one lifecycle, so a replay of 10,000
conversations is shared by as many workers as run (:mod:`benchmarks.replay.execute`: what a
worker does with a part); the last part to finish writes the summary
(:func:`benchmarks.replay.reads.replay_summary`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import transaction

from agents.kernel.exceptions import InvalidRequest
from agents.models import Agent, ApiKey, Team
from benchmarks import services
from benchmarks.models import BenchmarkRun, BenchmarkSuite
from benchmarks.registry import kind_register
from benchmarks.replay import reads

MAX_AGENTS = 8
MAX_ITEMS = 100_000


def _target_check(target: Any, param: str) -> str:
    if not isinstance(target, str) or not target:
        raise InvalidRequest(f"{param}: an agent's slug, 'auto' or 'team/<slug>'.", param=param)
    if target == "auto":
        return target
    if target.startswith("team/"):
        if not Team.objects.filter(slug=target[5:]).exists():
            raise InvalidRequest(f"{param}: no team {target[5:]!r}.", param=param,
                                 code="team_not_found")
        return target
    if not Agent.objects.filter(slug=target, enabled=True).exists():
        raise InvalidRequest(f"{param}: no enabled agent {target!r}.", param=param,
                             code="agent_not_found")
    return target


@transaction.atomic
def replay_run_create(
    *, suite: BenchmarkSuite, agents: list[str], judge: str | None = None,
    limit: int | None = None, indexes: list[int] | None = None, parallel: int = 1,
    concurrency: int = 4, question_timeout_s: float = 120.0, time_limit_s: float = 3600.0,
    submitted_by: ApiKey | None = None, submitted_by_user: Any = None,
) -> BenchmarkRun:
    """Queue a replay of ``suite`` (a conversation suite) against ``agents``; raises
    :class:`InvalidRequest` naming the bad field."""
    if suite.kind != BenchmarkSuite.Kind.CONVERSATIONS:
        raise InvalidRequest(f"Suite {suite.label} holds HotpotQA questions: replay a "
                             "conversation suite, or run the mesh on this one.", param="suite")
    if not isinstance(agents, list) or not agents:
        raise InvalidRequest("agents: one or more agents to replay against.", param="agents")
    if len(agents) > MAX_AGENTS:
        raise InvalidRequest(f"agents: at most {MAX_AGENTS}.", param="agents")
    targets = [_target_check(a, f"agents[{i}]") for i, a in enumerate(agents)]
    if len(set(targets)) != len(targets):
        raise InvalidRequest("agents: a target named twice.", param="agents")
    if judge:
        _target_check(judge, "judge")
        if judge in ("auto",) or judge.startswith("team/"):
            raise InvalidRequest("judge: an agent's slug.", param="judge")
    selection, chosen = services.run_selection(suite, limit, indexes)
    if len(chosen) * len(targets) > MAX_ITEMS:
        raise InvalidRequest(f"At most {MAX_ITEMS} replayed turns a run.", param="agents")
    run = BenchmarkRun(
        kind=BenchmarkRun.Kind.REPLAY, suite=suite, selection=selection,
        question_indexes=chosen, protocol="replay", tools={}, agents=targets,
        judge=judge or "", parallel=parallel, concurrency=concurrency,
        question_timeout_s=question_timeout_s, time_limit_s=time_limit_s,
        questions_total=len(chosen) * len(targets))
    # a replay has targets, not mesh roles; its parts are shared by as many workers
    return services.benchmark_run_save(
        run, submitted_by=submitted_by, submitted_by_user=submitted_by_user,
        parts=min(parallel, max(1, run.questions_total)), exclude=("tools",))


class ReplayKind:
    name = BenchmarkRun.Kind.REPLAY.value
    page = ("benchmarks/replay_run.html", "replay_run")

    def accepts(self, suite: BenchmarkSuite, data: dict[str, Any]) -> bool:
        return suite.kind == BenchmarkSuite.Kind.CONVERSATIONS or "agents" in data

    def create(self, *, suite: BenchmarkSuite, data: dict[str, Any],
               submitted_by: Any = None, submitted_by_user: Any = None) -> BenchmarkRun:
        return replay_run_create(
            suite=suite, agents=data.get("agents") or [], judge=data.get("judge"),
            limit=data.get("limit"), indexes=data.get("indexes"),
            parallel=data.get("parallel", 1), concurrency=data.get("concurrency", 4),
            question_timeout_s=data.get("question_timeout_s", 120.0),
            time_limit_s=data.get("time_limit_s", 3600.0), submitted_by=submitted_by,
            submitted_by_user=submitted_by_user)

    def again(self, run: BenchmarkRun, *, submitted_by_user: Any = None) -> BenchmarkRun:
        return replay_run_create(
            suite=run.suite, agents=list(run.agents), judge=run.judge or None,
            **services.run_selection_again(run),
            parallel=run.parallel, concurrency=run.concurrency,
            question_timeout_s=run.question_timeout_s, time_limit_s=run.time_limit_s,
            submitted_by_user=submitted_by_user)

    async def execute(self, claim: services.Claim, db: ThreadPoolExecutor) -> str | None:
        from benchmarks.replay.execute import PartExecution

        return await PartExecution(self, claim, db).execute()

    def summarize(self, run: BenchmarkRun) -> dict[str, Any]:
        return reads.replay_summary(run_id=run.pk)

    def label(self, run: BenchmarkRun) -> str:
        judged = f", judged by {run.judge}" if run.judge else ""
        return f"replay of {run.suite.label} against {', '.join(run.agents)}{judged}"

    def columns(self, run: BenchmarkRun) -> list[tuple[str, str | None]]:
        return [(f"{run.pk}:{agent}", agent) for agent in run.agents]


KIND = kind_register(ReplayKind())
