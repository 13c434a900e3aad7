"""The ``mesh`` kind of run: HotpotQA questions through the mesh relay, on a wire protocol, with
a tool backend per role (``deterministic``, or a Gaia agent). Claimed whole by one worker
(:mod:`.mesh_execute`); each question is recorded with its artifacts, and the summary is
``mesh.results``' with the tokens per agent and the baseline label."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import transaction

from agents.kernel.exceptions import InvalidRequest
from agents.models import Agent, ApiKey
from benchmarks import services
from benchmarks.models import (
    BASELINE_LABEL,
    DETERMINISTIC,
    BenchmarkRun,
    BenchmarkSuite,
)
from benchmarks.registry import kind_register
from benchmarks.services import Claim

ROLES = ("search", "extract", "triple", "reason")


def _resolve_tools(tools: dict[str, str] | str | None) -> dict[str, str]:
    """Every role -> ``"deterministic"`` or the slug of an enabled agent.

    ``"agents"`` is shorthand for the default ``mesh-<role>`` agents on every role."""
    if tools is None or tools == DETERMINISTIC:
        return dict.fromkeys(ROLES, DETERMINISTIC)
    if tools == "agents":
        tools = {role: f"mesh-{role}" for role in ROLES}
    if not isinstance(tools, dict):
        raise InvalidRequest("tools: 'deterministic', 'agents' or {role: backend}.",
                             param="tools")
    unknown = sorted(set(tools) - set(ROLES))
    if unknown:
        raise InvalidRequest(f"tools: unknown role(s) {unknown}; roles are {list(ROLES)}.",
                             param="tools")
    resolved = dict.fromkeys(ROLES, DETERMINISTIC)
    for role, backend in tools.items():
        if not isinstance(backend, str) or not backend:
            raise InvalidRequest(f"tools.{role}: a backend name.", param=f"tools.{role}")
        if backend != DETERMINISTIC and not Agent.objects.filter(slug=backend,
                                                                 enabled=True).exists():
            raise InvalidRequest(f"tools.{role}: no enabled agent {backend!r}.",
                                 param=f"tools.{role}", code="agent_not_found")
        resolved[role] = backend
    return resolved


@transaction.atomic
def benchmark_run_create(
    *, suite: BenchmarkSuite, protocol: str = "json", limit: int | None = None,
    indexes: list[int] | None = None, tools: dict[str, str] | str | None = None,
    question_timeout_s: float = 60.0, time_limit_s: float = 3600.0,
    submitted_by: ApiKey | None = None, submitted_by_user: Any = None,
) -> BenchmarkRun:
    """Queue a mesh run; it is dispatched (Celery, or the embedded worker) once this commits.

    Raises :class:`InvalidRequest` naming the bad field."""
    from mesh.protocols import get_adapter, needs_signing_seed

    if suite.kind != BenchmarkSuite.Kind.HOTPOTQA:
        raise InvalidRequest(f"Suite {suite.label} holds conversations: replay it against "
                             "agents; the mesh runs HotpotQA questions.", param="suite")
    try:
        get_adapter(protocol, signing_seed=bytes(32) if needs_signing_seed(protocol) else None)
    except ValueError as exc:
        raise InvalidRequest(f"protocol: {exc}", param="protocol") from exc
    selection, chosen = services.run_selection(suite, limit, indexes)
    run = BenchmarkRun(
        kind=BenchmarkRun.Kind.MESH, suite=suite, selection=selection,
        question_indexes=chosen, protocol=protocol, tools=_resolve_tools(tools),
        question_timeout_s=question_timeout_s, time_limit_s=time_limit_s,
        questions_total=len(chosen))
    return services.benchmark_run_save(run, submitted_by=submitted_by,
                                       submitted_by_user=submitted_by_user)


class MeshKind:
    name = BenchmarkRun.Kind.MESH.value
    page = ("benchmarks/run.html", "run")

    def accepts(self, suite: BenchmarkSuite, data: dict[str, Any]) -> bool:
        return False  # the default kind: what no other kind claims

    def create(self, *, suite: BenchmarkSuite, data: dict[str, Any],
               submitted_by: Any = None, submitted_by_user: Any = None) -> BenchmarkRun:
        return benchmark_run_create(
            suite=suite, protocol=data.get("protocol", "json"), limit=data.get("limit"),
            indexes=data.get("indexes"), tools=data.get("tools"),
            question_timeout_s=data.get("question_timeout_s", 60.0),
            time_limit_s=data.get("time_limit_s", 3600.0), submitted_by=submitted_by,
            submitted_by_user=submitted_by_user)

    def again(self, run: BenchmarkRun, *, submitted_by_user: Any = None) -> BenchmarkRun:
        return benchmark_run_create(
            suite=run.suite, protocol=run.protocol, tools=dict(run.tools),
            **services.run_selection_again(run),
            question_timeout_s=run.question_timeout_s, time_limit_s=run.time_limit_s,
            submitted_by_user=submitted_by_user)

    async def execute(self, claim: Claim, db: ThreadPoolExecutor) -> str | None:
        from benchmarks.kinds.mesh_execute import MeshExecution

        return await MeshExecution(self, claim, db).execute()

    def summarize(self, run: BenchmarkRun) -> dict[str, Any]:
        from benchmarks.kinds.mesh_execute import all_metrics
        from mesh.results import summarize

        metrics = all_metrics(run_id=run.pk)
        summary = summarize(metrics, suite=run.suite.name, protocol=run.protocol)
        tokens: dict[str, int] = {}
        for m in metrics:
            for slug, n in (m.get("tokens_by_agent") or {}).items():
                tokens[slug] = tokens.get(slug, 0) + int(n)
        summary.update({
            "run_id": run.pk, "tools": run.tools, "baseline": run.baseline,
            "quality_label": self.label(run), "tokens_by_agent": tokens,
        })
        return summary

    def label(self, run: BenchmarkRun) -> str:
        if run.baseline:
            return BASELINE_LABEL
        return "agents: " + ", ".join(f"{r}={b}" for r, b in sorted(run.tools.items()))

    def columns(self, run: BenchmarkRun) -> list[tuple[str, str | None]]:
        return [(str(run.pk), None)]


KIND = kind_register(MeshKind())
