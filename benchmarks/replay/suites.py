"""Conversation suites: made from stored threads, or imported as JSONL in the OpenAI Evals
sample shape (``{"input": [messages], "ideal": "..."}``), and exported the same way.

A case is a conversation up to one user message (``input``: ``{"role", "content"}`` messages,
system ones included) and the reply that was given then (``ideal``: the reference), with the
thread and message it came from. Cases are copies: deleting a thread leaves its suite whole.
A name that exists gets a new version (a suite version never changes once made).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import transaction

from agents import selectors as agent_selectors
from agents.http.jsonbody import json_parse
from agents.kernel.exceptions import InvalidRequest
from agents.models import ApiKey, Message
from benchmarks.models import BenchmarkSuite, SuiteCase
from benchmarks.services import suite_version_save

MAX_CASES = 10_000
MAX_THREADS = 10_000
MAX_JSONL_BYTES = 50 * 1024 * 1024
MAX_CASE_CHARS = 200_000  # one case's input and ideal together
# Replies that are not the agent's answer: nothing to compare a replay with.
UNANSWERED = ("error", "killed", "interrupted", "client_disconnected", "cancelled")


def _store(*, name: str, cases: list[dict[str, Any]], origin: dict[str, Any],
           description: str, created_by: ApiKey | None, created_by_user: Any
           ) -> BenchmarkSuite:
    if not cases:
        raise InvalidRequest("No case: the threads hold no user message with a reply.",
                             param="from_threads", code="no_cases")
    if len(cases) > MAX_CASES:
        raise InvalidRequest(f"At most {MAX_CASES} cases in a suite ({len(cases)} found); "
                             "narrow the filter.", param="from_threads", code="too_large")
    suite = BenchmarkSuite(
        name=name, kind=BenchmarkSuite.Kind.CONVERSATIONS,
        origin=origin, description=description, question_count=len(cases),
        created_by=created_by,
        created_by_user=created_by_user if getattr(created_by_user, "pk", None) else None)
    try:  # the version is suite_version_save's (two imports of one name may race)
        suite.full_clean(exclude=["questions"], validate_constraints=False)
    except Exception as exc:  # ValidationError: the name
        raise InvalidRequest(f"name: {'; '.join(getattr(exc, 'messages', [str(exc)]))}",
                             param="name") from exc
    suite_version_save(suite)
    SuiteCase.objects.bulk_create(
        [SuiteCase(suite=suite, index=i, input=c["input"], ideal=c["ideal"],
                   source_thread=c.get("source_thread"), source_message=c.get("source_message"),
                   source_agent=c.get("source_agent", ""), metadata=c.get("metadata") or {})
         for i, c in enumerate(cases)], batch_size=500)
    return suite


# -- from threads ---------------------------------------------------------------------------


def _thread_ids(spec: dict[str, Any]) -> list[Any]:
    """The threads a ``from_threads`` spec names: ``ids``, or the thread list's filters
    (``agent``, ``since``, ``until``, ``status``, ``q``; benchmark runs' own threads never)."""
    if "ids" in spec:
        ids = spec["ids"]
        if not isinstance(ids, list) or not ids:
            raise InvalidRequest("from_threads.ids: a non-empty list of thread ids.",
                                 param="from_threads.ids")
        found = []
        for raw in ids:
            thread = agent_selectors.thread_get(thread_id=raw)  # NotFound names the id
            if thread.run_id is not None:
                raise InvalidRequest(f"Thread {raw} is a benchmark run's own work.",
                                     param="from_threads.ids")
            found.append(thread.pk)
        return found
    threads = agent_selectors.thread_list(status=spec.get("status"), agent=spec.get("agent"),
                                          since=spec.get("since"), until=spec.get("until"),
                                          q=spec.get("q"))
    ids = list(threads.values_list("pk", flat=True)[:MAX_THREADS + 1])
    if len(ids) > MAX_THREADS:
        raise InvalidRequest(f"Over {MAX_THREADS} threads match; narrow the filter.",
                             param="from_threads", code="too_large")
    if not ids:
        raise InvalidRequest("No thread matches the filter.", param="from_threads",
                             code="no_cases")
    return ids


def conversation_cases(messages: list[Message], *, turns: str = "last") -> list[dict[str, Any]]:
    """A thread's cases (its messages in order, internal ones left out): each user message
    with the conversation before it and the reply that came after it; ``turns``: ``last``
    (the last answered user message) or ``all``."""
    shown = [m for m in messages if not m.internal]
    cases = []
    for i, m in enumerate(shown):
        if m.role != Message.Role.USER or not m.content.strip():
            continue
        reply = next((r for r in shown[i + 1:] if r.role == Message.Role.ASSISTANT), None)
        if reply is None or reply.finish_reason in UNANSWERED or not reply.content.strip():
            continue
        history = [{"role": h.role, "content": h.content} for h in shown[:i + 1]
                   if h.role in ("system", "user", "assistant") and h.content.strip()]
        cases.append({"input": history, "ideal": reply.content,
                      "source_thread": m.thread_id, "source_message": m.pk,
                      "metadata": {"reply_message": reply.pk}})
    return cases[-1:] if turns == "last" else cases


def suite_from_threads(*, name: str, spec: dict[str, Any], description: str = "",
                       created_by: ApiKey | None = None, created_by_user: Any = None
                       ) -> BenchmarkSuite:
    """A conversation suite from stored threads (``spec``: see :func:`_thread_ids`, plus
    ``turns``: ``last`` or ``all``)."""
    turns = spec.get("turns", "last")
    if turns not in ("last", "all"):
        raise InvalidRequest("from_threads.turns: 'last' or 'all'.", param="from_threads.turns")
    ids = _thread_ids(spec)
    cases: list[dict[str, Any]] = []
    rows = (Message.objects.filter(thread_id__in=ids).select_related("thread__agent")
            .order_by("thread__created_at", "thread_id", "seq"))
    by_thread: dict[Any, list[Message]] = {}
    for row in rows.iterator(chunk_size=2000):
        by_thread.setdefault(row.thread_id, []).append(row)
    for thread_id in sorted(by_thread, key=lambda t: by_thread[t][0].thread.created_at):
        found = conversation_cases(by_thread[thread_id], turns=turns)
        agent = by_thread[thread_id][0].thread.agent.slug
        for case in found:
            case["source_agent"] = agent
        cases.extend(c for c in found if len(json.dumps(c["input"])) + len(c["ideal"])
                     <= MAX_CASE_CHARS)
    origin = {"from_threads": {k: _jsonable(v) for k, v in spec.items()},
              "threads": len(ids)}
    with transaction.atomic():
        return _store(name=name, cases=cases, origin=origin, description=description,
                      created_by=created_by, created_by_user=created_by_user)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return [str(v) for v in value]
    return value


# -- JSONL ----------------------------------------------------------------------------------


def _case_from_sample(sample: Any, line: int) -> dict[str, Any]:
    where = f"line {line}"
    if not isinstance(sample, dict):
        raise InvalidRequest(f"{where}: a JSON object.", param="body", code="invalid_jsonl")
    messages = sample.get("input")
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(f"{where}: 'input' is a non-empty list of messages.",
                             param="body", code="invalid_jsonl")
    clean = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") or (
                not isinstance(m.get("content"), str)):
            raise InvalidRequest(f"{where}: each message is {{'role': system|user|assistant, "
                                 "'content': text}.", param="body", code="invalid_jsonl")
        clean.append({"role": m["role"], "content": m["content"]})
    if clean[-1]["role"] != "user":
        raise InvalidRequest(f"{where}: the input ends with a user message.", param="body",
                             code="invalid_jsonl")
    ideal = sample.get("ideal", "")
    if isinstance(ideal, list):  # Evals allows several ideals: the first is the reference
        ideal = ideal[0] if ideal else ""
    if not isinstance(ideal, str):
        raise InvalidRequest(f"{where}: 'ideal' is a string.", param="body",
                             code="invalid_jsonl")
    gaia = sample.get("gaia") if isinstance(sample.get("gaia"), dict) else {}
    return {"input": clean, "ideal": ideal, "source_thread": gaia.get("thread"),
            "source_message": gaia.get("message"), "source_agent": gaia.get("agent") or "",
            "metadata": {k: v for k, v in sample.items() if k not in ("input", "ideal", "gaia")}}


def suite_from_jsonl(*, name: str, body: bytes, description: str = "",
                     created_by: ApiKey | None = None, created_by_user: Any = None
                     ) -> BenchmarkSuite:
    """A conversation suite from JSONL, one OpenAI Evals sample a line."""
    if len(body) > MAX_JSONL_BYTES:
        raise InvalidRequest(f"At most {MAX_JSONL_BYTES} bytes of JSONL.", param="body",
                             code="too_large")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("JSONL must be UTF-8.", param="body", code="invalid_jsonl") from None
    cases = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            sample = json_parse(line, what=f"line {n}")  # the rule of every JSON input
        except InvalidRequest as exc:
            raise InvalidRequest(f"line {n}: {exc.message}", param="body",
                                 code="invalid_jsonl") from None
        cases.append(_case_from_sample(sample, n))
    with transaction.atomic():
        return _store(name=name, cases=cases, origin={"jsonl": {"lines": len(cases)}},
                      description=description, created_by=created_by,
                      created_by_user=created_by_user)


def suite_export_jsonl(suite: BenchmarkSuite) -> str:
    """The suite's cases as JSONL in the Evals sample shape; where a case came from rides
    along under ``gaia`` (which importing again keeps)."""
    lines = []
    for case in suite.cases.order_by("index").iterator(chunk_size=1000):
        sample: dict[str, Any] = {"input": case.input, "ideal": case.ideal}
        source = {k: v for k, v in (("thread", str(case.source_thread) if case.source_thread
                                     else None), ("message", case.source_message),
                                    ("agent", case.source_agent or None)) if v is not None}
        if source:
            sample["gaia"] = source
        sample.update(case.metadata or {})
        lines.append(json.dumps(sample, ensure_ascii=False))
    return "\n".join(lines) + ("\n" if lines else "")
