"""Official HotpotQA/SQuAD normalisation, EM, F1, ROUGE-L and quality_score."""

from __future__ import annotations

import pytest

from mesh.evaluation import exact_match, f1_score, normalize_answer, rouge_l, score_answer
from mesh.results import percentile, summarize


@pytest.mark.parametrize(("raw", "norm"), [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  an  Apple, a  day ", "apple day"),
    ("3,677 seated", "3677 seated"),
    ("Theatre", "theatre"),
    ("Pedro Rodríguez", "pedro rodríguez"),
])
def test_normalize_answer(raw: str, norm: str) -> None:
    assert normalize_answer(raw) == norm


def test_exact_match_is_normalised() -> None:
    assert exact_match("the North Atlantic Conference.", "North Atlantic Conference") == 1
    assert exact_match("YES", "yes") == 1
    assert exact_match("Chief of Protocol", "Chief Protocol") == 0


def test_f1_partial_and_yes_no_rule() -> None:
    assert f1_score("Robert Erskine Childers", "Robert Erskine Childers DSC") == pytest.approx(
        2 * 1.0 * 0.75 / 1.75)
    assert f1_score("no", "yes") == 0.0
    assert f1_score("yes", "yes") == 1.0
    assert f1_score("Paris", "London") == 0.0


def test_rouge_l_on_normalised_strings() -> None:
    assert rouge_l("The Kansas Song", "Kansas Song") == 1.0
    assert rouge_l("Henry J. Kaiser", "Henry Kaiser") == pytest.approx(2 * (2 / 3) / (5 / 3))
    assert rouge_l("", "x") == 0.0
    assert rouge_l("Pedro Rodríguez", "Pedro Rodríguez") == 1.0


def test_quality_score_is_mean_of_em_and_rouge_l() -> None:
    score = score_answer("Badly Drawn Boy", "Badly Drawn Boy")
    assert (score.exact_match, score.f1, score.rouge_l, score.quality_score) == (1, 1.0, 1.0, 1.0)
    partial = score_answer("Greenwich Village", "Greenwich Village, New York City")
    assert partial.exact_match == 0
    assert partial.quality_score == pytest.approx(partial.rouge_l / 2)


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 50) == 10.0
    assert percentile(values, 95) == 19.0
    assert percentile([], 95) == 0.0


def test_summarize_counts_failures_as_zero_quality() -> None:
    ok = {"status": "completed", "question_index": 0, "elapsed_ms": 10.0, "exact_match": 1,
          "f1": 1.0, "rouge_l": 1.0, "quality_score": 1.0, "bytes_rx": 100, "bytes_tx": 300,
          "pkt_cnt": 8, "header_overhead": 40, "token_sum": 5}
    bad = {"status": "failed", "question_index": 1, "reason": "timeout after 1 s",
           "elapsed_ms": 999.0, "exact_match": None, "f1": None, "rouge_l": None,
           "quality_score": None, "bytes_rx": 50, "bytes_tx": 100, "pkt_cnt": 4,
           "header_overhead": 20, "token_sum": 0}
    summary = summarize([ok, bad], suite="s.json", protocol="json")
    assert (summary["count"], summary["completed"], summary["failed"]) == (2, 1, 1)
    assert summary["failures"] == [{"question_index": 1, "reason": "timeout after 1 s"}]
    assert summary["mean_exact_match"] == 0.5
    assert summary["elapsed_ms"] == {"mean": 10.0, "p50": 10.0, "p95": 10.0}
    assert summary["bytes_per_question"] == {"rx": 75.0, "tx": 200.0, "total": 275.0}
    assert summary["token_sum"] == 5
