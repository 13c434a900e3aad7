"""Executing a claimed part of a replay run (the ``replay`` kind's ``execute``, called by
:mod:`benchmarks.executor` for each part it claims): the part's items (case x target) go
through the turn runtime (:func:`agents.turns.turn_replay`: a thread of the run per replayed
turn, everything a client's turn goes through), ``concurrency`` at a time, each bounded by the
run's per-question timeout; each reply is scored (:mod:`.scoring`, off the event loop), judged
if the run has a judge, and recorded at once through the lifecycle
(:mod:`benchmarks.services.runs`), so a part resumes after its last recorded item. The
heartbeat renews the part every ``GAIA_BENCH_HEARTBEAT_SECONDS``; a cancelled run stops its
parts there. Past the run's time limit the run ends ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from django.conf import settings

from agents import turns
from agents.kernel import llm
from agents.kernel.exceptions import GaiaError
from benchmarks import services
from benchmarks.models import BenchmarkResult, BenchmarkRun, SuiteCase
from benchmarks.replay import scoring

log = logging.getLogger("gaia.benchmarks")

JUDGE_FORMAT = {"type": "json_schema", "json_schema": {
    "name": "verdict", "schema": scoring.JUDGE_SCHEMA, "strict": True}}


def _conversation(case: SuiteCase) -> tuple[str, list[llm.Message]]:
    system = "\n\n".join(m["content"] for m in case.input if m["role"] == "system")
    messages = [llm.Message(role=m["role"], parts=(llm.TextPart(m["content"]),))
                for m in case.input if m["role"] in ("user", "assistant")]
    return system, messages


class PartExecution:
    def __init__(self, kind: Any, claim: services.Claim, db: ThreadPoolExecutor) -> None:
        assert claim.part is not None  # a replay is claimed part by part
        self.kind, self.claim, self.db = kind, claim, db
        self.run, self.part = claim.run, claim.part
        self.heartbeat_s = float(getattr(settings, "GAIA_BENCH_HEARTBEAT_SECONDS", 1.0))
        started = self.run.started_at.timestamp() if self.run.started_at else time.time()
        self.deadline = started + self.run.time_limit_s
        self.progress = services.Progress()  # a replay counts items, not packets
        self.stopped = False
        self.over = False

    async def _db(self, fn: Any, /, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.db, partial(fn, **kwargs))

    async def execute(self) -> str | None:
        run = self.run
        todo = await self._db(_todo, run=run, part=self.part.index)
        cases = await self._db(_cases, suite_id=run.suite_id, indexes=sorted({i for i, _ in todo}))
        queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        for item in todo:
            queue.put_nowait(item)
        workers = [asyncio.create_task(self._work(queue, cases))
                   for _ in range(min(run.concurrency, max(1, len(todo))))]
        beat = asyncio.create_task(self._beat(workers))
        try:
            await asyncio.gather(*workers, return_exceptions=True)
        finally:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
        for task in workers:  # a bug in a worker task: the run fails, saying why
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        summarize = partial(self.kind.summarize, run)
        if self.over:
            summary = await self._db(summarize)
            await self._db(services.benchmark_run_finish, claim=self.claim,
                           status=BenchmarkRun.Status.FAILED, summarize=lambda: summary,
                           error=f"time limit of {run.time_limit_s:g} s reached")
            return BenchmarkRun.Status.FAILED
        if self.stopped:
            current = await self._db(services.benchmark_run_status, run_id=run.pk)
            if current == BenchmarkRun.Status.CANCELLED:
                summary = await self._db(summarize)
                await self._db(services.benchmark_run_summary_keep, run_id=run.pk,
                               summary=summary)
            return None
        ended = await self._db(services.benchmark_run_finish, claim=self.claim,
                               status=BenchmarkRun.Status.SUCCEEDED, summarize=summarize,
                               progress=services.Progress())
        return BenchmarkRun.Status.SUCCEEDED if ended else None

    async def _beat(self, workers: list[asyncio.Task[None]]) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            over = time.time() >= self.deadline
            alive = await self._db(services.benchmark_run_heartbeat, claim=self.claim,
                                   progress=self.progress)
            if over or not alive:
                self.over, self.stopped = over, not alive
                for task in workers:
                    task.cancel()
                return

    async def _work(self, queue: asyncio.Queue[tuple[int, str]],
                    cases: dict[int, SuiteCase]) -> None:
        while not queue.empty():
            index, agent = queue.get_nowait()
            if time.time() >= self.deadline:
                self.over = True
                return
            fields = await self._item(cases[index], agent)
            recorded = await self._db(services.benchmark_result_record, claim=self.claim,
                                      fields=fields)
            if recorded is None:  # cancelled, or taken over: stop
                self.stopped = True
                return

    async def _item(self, case: SuiteCase, agent: str) -> dict[str, Any]:
        """Replay one case against one target: its turn, its scores, the judge's verdict."""
        run = self.run
        system, messages = _conversation(case)
        question = messages[-1].text if messages else ""
        fields: dict[str, Any] = {
            "question_index": case.index, "agent": agent, "question": question[:20_000],
            "question_id": f"case-{case.index}", "gold": case.ideal}
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(run.question_timeout_s):
                answer = await turns.turn_replay(
                    target=agent, messages=messages, system=system, run_id=run.pk,
                    title=f"Run {run.pk} · case {case.index} · {agent}")
        except TimeoutError:
            answer, error = None, f"no answer within {run.question_timeout_s:g} s"
        except GaiaError as exc:
            answer, error = None, exc.message
        else:
            error = answer.error
        fields["elapsed_ms"] = round((time.monotonic() - t0) * 1000, 1)
        if answer is None or error:
            fields.update(status="failed", error=error or "no answer", prediction=None,
                          metrics={"finish_reason": getattr(answer, "finish_reason", None)})
            if answer is not None:
                fields["thread_id"] = answer.thread_id
            return fields
        usage = answer.usage
        scores = await asyncio.to_thread(scoring.score, answer.text, case.ideal)
        fields.update(
            status="completed", error="", prediction=answer.text,
            exact_match=scores.exact_match, f1=scores.f1, rouge_l=scores.rouge_l,
            similarity=scores.similarity, tokens=usage.input_tokens + usage.output_tokens,
            tokens_by_agent={answer.agent or agent: usage.input_tokens + usage.output_tokens},
            ttft_ms=answer.ttft_ms, tool_calls=answer.tool_calls, thread_id=answer.thread_id,
            metrics={"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                     "usage_estimated": usage.estimated, "answered_by": answer.agent,
                     "finish_reason": answer.finish_reason, "latency_ms": answer.latency_ms})
        if run.judge:
            fields.update(await self._judge(case, answer.text))
        return fields

    async def _judge(self, case: SuiteCase, candidate: str) -> dict[str, Any]:
        prompt = scoring.judge_prompt(case.input, case.ideal, candidate)
        try:
            async with asyncio.timeout(self.run.question_timeout_s):
                verdict = await turns.turn_replay(
                    target=self.run.judge, run_id=self.run.pk,
                    system=scoring.JUDGE_INSTRUCTIONS, response_format=JUDGE_FORMAT,
                    messages=[llm.Message(role="user", parts=(llm.TextPart(prompt),))],
                    title=f"Run {self.run.pk} · case {case.index} · judge")
        except TimeoutError:
            return {"judge_error": f"the judge gave no verdict within "
                                   f"{self.run.question_timeout_s:g} s"}
        except GaiaError as exc:
            return {"judge_error": f"the judge failed: {exc.message}"}
        if verdict.error:
            return {"judge_error": f"the judge failed: {verdict.error}"}
        try:
            value, kind, reason = scoring.judge_parse(verdict.text)
        except ValueError as exc:
            return {"judge_error": str(exc)}
        return {"judge_score": value, "judge_verdict": kind, "judge_reason": reason}


def items(run: BenchmarkRun) -> list[tuple[int, str]]:
    """The run's items in order: each chosen case for each target."""
    return [(index, agent) for index in run.question_indexes for agent in run.agents]


def part_items(run: BenchmarkRun, part: int) -> list[tuple[int, str]]:
    parts = run.parts.count() or 1
    return items(run)[part::parts]


def _todo(*, run: BenchmarkRun, part: int) -> list[tuple[int, str]]:
    done = set(BenchmarkResult.objects.filter(run=run).values_list("question_index", "agent"))
    return [item for item in part_items(run, part) if item not in done]


def _cases(*, suite_id: int, indexes: list[int]) -> dict[int, SuiteCase]:
    return {c.index: c for c in SuiteCase.objects.filter(suite_id=suite_id, index__in=indexes)}

