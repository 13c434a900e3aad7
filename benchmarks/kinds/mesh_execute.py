"""What a worker does with a claimed mesh run: the thin bridge from ``mesh`` (and its events) to
the run lifecycle (:mod:`benchmarks.services.runs`).

It runs in the worker's event loop (:mod:`benchmarks.executor`): the mesh agent processes start
once for the run (``mesh.run.AgentPool``), each question runs with a fresh relay and fresh
workspaces, and every database write goes to the run's own database thread through the
services (never the server's database thread, never for longer than one short transaction).
While a question runs, the heartbeat (every ``GAIA_BENCH_HEARTBEAT_SECONDS``) renews the run
and reports packet counts; when it finds the run cancelled or taken over, the question is
cancelled, which ends its agent processes. Past the run's time limit the run ends ``failed``
with the reason.

Roles played by Gaia agents reach them through the turn runtime, as any client's turn would
(:func:`agents.turns.turn_ask`): each call of a tool is a thread of the run (hidden from the
default thread list, ``?run=<id>`` shows them), the feed shows the agent at work, fallback
providers apply, a paused agent or an operator's kill of such a thread fails that question
(saying so) and the run goes on. The agent processes ask for those calls over their own stdio
(a ``host`` LLM, :class:`mesh.llm.HostLLM`): no server, port or token of the run's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import shutil
import tarfile
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from agents import turns
from agents.kernel.exceptions import AgentPaused, GaiaError, TurnKilled
from benchmarks import services
from benchmarks.models import DETERMINISTIC, BenchmarkResult, BenchmarkRun

log = logging.getLogger("gaia.benchmarks")


def artifact_path(run_id: int, name: str) -> str:
    return f"benchmarks/runs/{run_id}/{name}"


def _store(path: str, data: bytes) -> str:
    if default_storage.exists(path):
        default_storage.delete(path)
    return default_storage.save(path, ContentFile(data))


def result_fields(metrics: dict[str, Any], tokens_by_agent: dict[str, int]) -> dict[str, Any]:
    """A question's :class:`BenchmarkResult` fields from the relay's ``metrics``."""
    completed = metrics.get("status") == "completed"
    return {
        "question_index": int(metrics["question_index"]),
        "question_id": str(metrics.get("question_id") or ""),
        "question": str(metrics.get("question") or ""), "status": str(metrics.get("status")),
        "error": "" if completed else str(metrics.get("reason") or ""),
        "prediction": metrics.get("answer"), "gold": str(metrics.get("gold_answer") or ""),
        "exact_match": metrics.get("exact_match"), "f1": metrics.get("f1"),
        "rouge_l": metrics.get("rouge_l"), "bytes_tx": int(metrics.get("bytes_tx", 0)),
        "bytes_rx": int(metrics.get("bytes_rx", 0)), "packets": int(metrics.get("pkt_cnt", 0)),
        "header_overhead": int(metrics.get("header_overhead", 0)),
        "tokens": int(metrics.get("token_sum", 0)), "tokens_by_agent": tokens_by_agent,
        "elapsed_ms": float(metrics.get("elapsed_ms", 0.0)), "metrics": metrics}


def all_metrics(*, run_id: int) -> list[dict[str, Any]]:
    return [r.metrics for r in BenchmarkResult.objects.filter(run_id=run_id)
            .order_by("question_index")]


class MeshExecution:
    def __init__(self, kind: Any, claim: services.Claim, db: ThreadPoolExecutor) -> None:
        self.kind = kind
        self.claim = claim
        self.run = claim.run
        self.db = db
        self.progress = services.Progress()
        self.base_packets = self.base_bytes = 0
        self.question = -1  # the question running now
        self.tokens: Counter[str] = Counter()  # tokens per agent slug, this question
        self.last_beat = time.monotonic()
        self.heartbeat_s = float(getattr(settings, "GAIA_BENCH_HEARTBEAT_SECONDS", 1.0))
        started = self.run.started_at.timestamp() if self.run.started_at else time.time()
        self.deadline = started + self.run.time_limit_s

    async def _db(self, fn: Any, /, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.db, partial(fn, **kwargs))

    def _on_event(self, event: Any) -> None:
        # Live counts while a question runs (frames from agents: hellos and packets); each
        # finished question then sets them to the relay's exact totals.
        if event.kind == "packet":
            self.progress.packets += 1
            self.progress.bytes += int(event.data.get("bytes", 0))
        elif event.kind == "agent.connected":
            self.progress.packets += 1

    async def _ask(self, tool: str, call: Any) -> Any:
        """A role's call to its agent (the pool's LLM host), through the turn runtime."""
        from mesh.llm import LLMError, LLMReply
        from mesh.run import QuestionFailed

        slug = self.run.tools[tool]
        try:
            answer = await turns.turn_ask(
                agent=slug, system=call.system, prompt=call.prompt, run_id=self.run.pk,
                title=f"Run {self.run.pk} · q{self.question} · {tool}")
        except TurnKilled as exc:
            raise QuestionFailed(f"an operator stopped {slug} ({tool}): {exc.message}") from exc
        except AgentPaused as exc:
            raise QuestionFailed(f"{slug} ({tool}) is paused: {exc.message}") from exc
        except GaiaError as exc:
            raise LLMError(f"{slug}: {exc.message}") from exc
        tokens = answer.usage.input_tokens + answer.usage.output_tokens
        self.tokens[slug] += tokens
        return LLMReply(text=answer.text, tokens=tokens)

    def _counted(self, metrics: dict[str, Any]) -> None:
        self.base_packets += int(metrics.get("pkt_cnt", 0))
        self.base_bytes += int(metrics.get("bytes_rx", 0)) + int(metrics.get("bytes_tx", 0))
        self.progress.packets, self.progress.bytes = self.base_packets, self.base_bytes

    async def execute(self) -> str:
        from mesh.run import AgentPool, RunConfig, run_question
        from mesh.suite import parse_suite

        run = self.run
        questions = {q.index: q for q in parse_suite(run.suite.questions)}
        done = set(await self._db(_recorded, run_id=run.pk))
        for metrics in await self._db(all_metrics, run_id=run.pk):
            self._counted(metrics)
        todo = [questions[i] for i in run.question_indexes if i not in done]
        agent_slugs = sorted({b for b in run.tools.values() if b != DETERMINISTIC})
        work = Path(tempfile.mkdtemp(prefix=f"gaia-bench-{run.pk}-"))
        status, error = BenchmarkRun.Status.SUCCEEDED, ""
        try:
            if agent_slugs:
                await self._db(_agents_exist, slugs=agent_slugs)  # or the run fails
            llm = {role: {"kind": "host", "model": slug, "timeout": run.question_timeout_s}
                   for role, slug in run.tools.items() if slug != DETERMINISTIC}
            config = RunConfig(protocol=run.protocol, timeout_s=run.question_timeout_s, llm=llm)
            async with AgentPool(config, llm_host=self._ask if llm else None) as pool:
                for question in todo:
                    if time.time() >= self.deadline:
                        status = BenchmarkRun.Status.FAILED
                        error = (f"time limit of {run.time_limit_s:g} s reached before question "
                                 f"{question.index}")
                        break
                    self.question = question.index
                    self.tokens.clear()
                    outcome = await self._question(run_question, question, pool, work)
                    if outcome == "stopped":
                        return await self._stopped()
                    if outcome == "time":
                        status = BenchmarkRun.Status.FAILED
                        error = (f"time limit of {run.time_limit_s:g} s reached during question "
                                 f"{question.index}")
                        break
                    result, out_dir = outcome
                    if not await self._record(result.metrics, out_dir):
                        return await self._stopped()
                    self._counted(result.metrics)
                    if time.monotonic() - self.last_beat >= self.heartbeat_s:
                        await self._heartbeat()  # progress at most once an interval
            summary, summary_json = await self._summary()
            archive = await asyncio.to_thread(_archive, run.pk,
                                              await self._db(_recorded, run_id=run.pk))
            await asyncio.to_thread(_store, artifact_path(run.pk, "summary.json"), summary_json)
            await asyncio.to_thread(_store, artifact_path(run.pk, "run_artifacts.tar.gz"),
                                    archive)
            finished = await self._db(services.benchmark_run_finish, claim=self.claim,
                                      status=status, error=error, summarize=lambda: summary,
                                      progress=self.progress)
            return status if finished else await self._stopped()
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)
            with contextlib.suppress(Exception):  # MCP servers the run's agents started
                await asyncio.wait_for(turns.tools_close(), 5)

    async def _record(self, metrics: dict[str, Any], out_dir: Path) -> bool:
        """Store a finished question: its artifacts, then its row (``False``: not ours now)."""
        tokens = dict(self.tokens)
        metrics = {**metrics, "tokens_by_agent": tokens}
        index = int(metrics["question_index"])
        metrics_json, archive = await asyncio.to_thread(_read_outputs, out_dir)
        await asyncio.to_thread(_store, artifact_path(self.run.pk, f"q{index}/metrics.json"),
                                metrics_json)
        await asyncio.to_thread(_store, artifact_path(
            self.run.pk, f"q{index}/run_artifacts.tar.gz"), archive)
        recorded = await self._db(services.benchmark_result_record, claim=self.claim,
                                  fields=result_fields(metrics, tokens))
        return recorded is not None

    async def _heartbeat(self) -> bool:
        self.last_beat = time.monotonic()
        return bool(await self._db(services.benchmark_run_heartbeat, claim=self.claim,
                                   progress=self.progress))

    async def _question(self, run_question: Any, question: Any, pool: Any, work: Path) -> Any:
        out_dir = work / str(question.index)
        task = asyncio.create_task(run_question(question, out_dir=out_dir, pool=pool,
                                                on_event=self._on_event))
        while True:
            due = self.last_beat + self.heartbeat_s - time.monotonic()
            await asyncio.wait([task], timeout=max(0.0, due))
            if task.done():
                return task.result(), out_dir
            over = time.time() >= self.deadline
            if over or not await self._heartbeat():
                task.cancel()  # kills this question's agent processes
                await asyncio.gather(task, return_exceptions=True)
                return "time" if over else "stopped"

    async def _stopped(self) -> str:
        """The run was cancelled (or taken over) under us: keep a partial summary if the run
        is ours to describe, and leave its status alone."""
        status = await self._db(services.benchmark_run_status, run_id=self.run.pk)
        if status == BenchmarkRun.Status.CANCELLED:
            summary, summary_json = await self._summary()
            await asyncio.to_thread(_store, artifact_path(self.run.pk, "summary.json"),
                                    summary_json)
            await self._db(services.benchmark_run_summary_keep, run_id=self.run.pk,
                           summary=summary)
        log.info("benchmark run %s stopped: %s", self.run.pk, status)
        return str(status)

    async def _summary(self) -> tuple[dict[str, Any], bytes]:
        summary = await self._db(self.kind.summarize, run=self.run)
        return summary, (json.dumps(summary, ensure_ascii=False, indent=2) + "\n").encode()


def _recorded(*, run_id: int) -> list[int]:
    return list(BenchmarkResult.objects.filter(run_id=run_id).order_by("question_index")
                .values_list("question_index", flat=True))


def _agents_exist(*, slugs: list[str]) -> None:
    from agents.models import Agent

    found = set(Agent.objects.filter(slug__in=slugs).values_list("slug", flat=True))
    missing = sorted(set(slugs) - found)
    if missing:
        raise RuntimeError(f"agents {missing} no longer exist")


def _read_outputs(out_dir: Path) -> tuple[bytes, bytes]:
    return ((out_dir / "metrics.json").read_bytes(),
            (out_dir / "run_artifacts.tar.gz").read_bytes())


def _archive(run_id: int, indexes: list[int]) -> bytes:
    """Every recorded question of the run (whichever attempt ran it) as one gzip tar:
    ``q<N>/metrics.json`` and ``q<N>/workspaces/...``, from the stored per-question artifacts."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as out:
        for index in indexes:
            base = artifact_path(run_id, f"q{index}")
            if not (default_storage.exists(f"{base}/metrics.json")
                    and default_storage.exists(f"{base}/run_artifacts.tar.gz")):
                log.warning("run %s: artifacts of question %s are missing", run_id, index)
                continue
            with default_storage.open(f"{base}/metrics.json", "rb") as fh:
                data = fh.read()
            info = tarfile.TarInfo(f"q{index}/metrics.json")
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
            with default_storage.open(f"{base}/run_artifacts.tar.gz", "rb") as fh, \
                    tarfile.open(fileobj=io.BytesIO(fh.read()), mode="r:gz") as inner:
                for member in inner.getmembers():
                    extracted = inner.extractfile(member) if member.isfile() else None
                    member.name = f"q{index}/{member.name}"
                    out.addfile(member, extracted)
    return buf.getvalue()
