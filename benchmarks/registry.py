"""The kinds of benchmark run, registered once: the submit view, the executor, the pages, the
admin and the reads ask here instead of branching on ``BenchmarkRun.kind``.

A kind is a module-level object (:class:`RunKind`) that says how its runs are made
(``create``, ``again``), what a worker does with a claim of one (``execute``: the whole run, or
one part), how they sum up (``summarize``) and how their results read (``label``,
``columns``, ``page``). Everything else (queue, claim, heartbeat, record, finish, cancel,
resume, recovery) is the one lifecycle of :mod:`benchmarks.services.runs`. The built-in kinds
(:mod:`benchmarks.kinds`: ``mesh``, ``replay``) register when the app is ready; a new kind is a
module that calls :func:`kind_register`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from agents.kernel.exceptions import InvalidRequest

if TYPE_CHECKING:
    from benchmarks.models import BenchmarkRun, BenchmarkSuite

Claim = Any  # benchmarks.services.Claim (the lifecycle imports the registry's users, not it)

DEFAULT = "mesh"  # a submission that names no kind and that no kind claims


class RunKind(Protocol):
    name: str
    page: tuple[str, str]  # the run page: its template and its nav name

    def accepts(self, suite: BenchmarkSuite, data: dict[str, Any]) -> bool:
        """Whether a submission that names no kind is one of this kind's."""

    def create(self, *, suite: BenchmarkSuite, data: dict[str, Any],
               submitted_by: Any = None, submitted_by_user: Any = None) -> BenchmarkRun:
        """Validate ``data`` (the submit API's fields), then queue the run through
        :func:`benchmarks.services.benchmark_run_save`; :class:`InvalidRequest` names a bad
        field."""

    def again(self, run: BenchmarkRun, *, submitted_by_user: Any = None) -> BenchmarkRun:
        """A new queued run with ``run``'s settings."""

    async def execute(self, claim: Claim, db: ThreadPoolExecutor) -> str | None:
        """Run the claim (in the worker's own event loop; database calls on ``db``) through
        the lifecycle's heartbeat, record and finish. Returns the run's status if this claim
        ended it, else ``None``."""

    def summarize(self, run: BenchmarkRun) -> dict[str, Any]:
        """The run's summary from what it recorded (whole or partial)."""

    def label(self, run: BenchmarkRun) -> str:
        """What the run's quality figures mean (shown with every figure)."""

    def columns(self, run: BenchmarkRun) -> list[tuple[str, str | None]]:
        """The run's columns in a comparison: ``(key, agent)`` pairs."""


_kinds: dict[str, RunKind] = {}


def kind_register(kind: RunKind) -> RunKind:
    """Register ``kind`` under its name (the value of ``BenchmarkRun.kind``), once."""
    if len(kind.name) > 20:
        raise ValueError(f"a run kind's name has at most 20 characters: {kind.name!r}")
    if _kinds.get(kind.name, kind) is not kind:
        raise ValueError(f"run kind {kind.name!r} is registered already")
    _kinds[kind.name] = kind
    return kind


def kind_unregister(name: str) -> None:
    _kinds.pop(name, None)


def kind_names() -> list[str]:
    return list(_kinds)


def kind_get(name: str) -> RunKind:
    """The kind registered as ``name``; :class:`InvalidRequest` (``param="kind"``) if none."""
    try:
        return _kinds[name]
    except KeyError:
        raise InvalidRequest(f"kind: no run kind {name!r}; kinds are {kind_names()}.",
                             param="kind") from None


def kind_for(suite: BenchmarkSuite, data: dict[str, Any]) -> RunKind:
    """The kind of a submission: the one it names (``data["kind"]``), else the first kind
    that accepts it, else :data:`DEFAULT`."""
    if data.get("kind"):
        return kind_get(data["kind"])
    return next((k for k in _kinds.values() if k.accepts(suite, data)), kind_get(DEFAULT))
