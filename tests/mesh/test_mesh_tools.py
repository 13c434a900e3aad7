"""The deterministic tools on real HotpotQA questions (no sockets, no processes)."""

from __future__ import annotations

from typing import Any

import pytest

from mesh.suite import load_suite, parse_document, render_document
from mesh.tools import PIPELINE, ToolInput, reason_answer, run_tool, sentence_triples

SUITE = load_suite()


def test_default_suite_has_30_questions_with_context() -> None:
    assert len(SUITE) == 30
    assert all(len(q.paragraphs) >= 2 and q.answer and q.question for q in SUITE)
    assert sum(len(q.paragraphs) for q in SUITE) == 292


def test_document_round_trips_through_text() -> None:
    q = SUITE[4]
    parsed = parse_document(render_document(q.paragraphs))
    assert [p.title for p in parsed] == [p.title for p in q.paragraphs]
    assert [[s.strip() for s in p.sentences] for p in q.paragraphs] == [
        list(p.sentences) for p in parsed]


def test_search_ranks_gold_paragraphs_first() -> None:
    hits = 0
    for q in SUITE[:10]:
        out = await_tool("search", ToolInput(q.question, list(q.paragraphs)))
        titles = [d["title"] for d in out["docs"]]
        assert len(titles) == 4
        hits += sum(t in titles for t in q.supporting_titles)
    assert hits >= 16  # of 20 gold paragraphs


def await_tool(name: str, inp: ToolInput) -> dict[str, Any]:
    import asyncio

    out = asyncio.run(run_tool(name, inp))
    assert out.tokens == 0
    assert isinstance(out.payload, dict)
    return out.payload


def test_triples_resolve_pronouns_to_the_title() -> None:
    [triple] = sentence_triples("Scott Derrickson", "He lives in Los Angeles, California.")
    assert triple["s"] == "Scott Derrickson"
    [triple] = sentence_triples("Ed Wood", "Ed Wood was an American filmmaker.")
    assert (triple["s"], triple["r"], triple["o"]) == ("Ed Wood", "was", "an American filmmaker")


@pytest.mark.parametrize(("index", "expected"), [(0, "yes"), (8, "Terry Richardson"),
                                                 (12, "1999"), (23, "Badly Drawn Boy")])
async def test_pipeline_answers_known_questions(index: int, expected: str) -> None:
    q = SUITE[index]
    upstream: dict[str, object] = {}
    for tool in PIPELINE:
        out = await run_tool(tool, ToolInput(q.question, list(q.paragraphs), dict(upstream)))
        upstream[out.tag] = out.payload
    assert upstream["final_answer"] == expected == q.answer


def test_reason_falls_back_to_raw_document_without_upstream() -> None:
    q = SUITE[8]
    assert reason_answer(q.question, list(q.paragraphs), []) == "Terry Richardson"
