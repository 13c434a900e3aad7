"""Answer scoring with the official HotpotQA/SQuAD conventions.

``normalize_answer`` is the official one (lower-case, drop punctuation, drop a/an/the, collapse
white space). Exact match and token F1 follow ``hotpot_evaluate_v1.py`` (including its rule that
a yes/no/noanswer prediction or gold scores F1 0 unless both normalise equal). ROUGE-L F comes
from ``rouge-score`` on the normalised strings: it takes the target first and drops non-ASCII
characters, so both sides are normalised the same way before scoring.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

__all__ = ["Score", "exact_match", "f1_score", "normalize_answer", "rouge_l", "score_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles, collapse white space."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    pred_norm, gold_norm = normalize_answer(prediction), normalize_answer(gold)
    special = ("yes", "no", "noanswer")
    if (pred_norm in special or gold_norm in special) and pred_norm != gold_norm:
        return 0.0
    pred_tokens, gold_tokens = pred_norm.split(), gold_norm.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


@lru_cache(maxsize=1)
def _scorer() -> Any:
    from rouge_score import rouge_scorer  # type: ignore[import-untyped]  # slow (nltk): lazy

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


def rouge_l(prediction: str, gold: str) -> float:
    """ROUGE-L F-measure on the normalised strings (0.0 if either is empty)."""
    target, pred = normalize_answer(gold), normalize_answer(prediction)
    if not target or not pred:
        return 0.0
    return float(_scorer().score(target, pred)["rougeL"].fmeasure)


@dataclass(frozen=True, slots=True)
class Score:
    exact_match: int
    f1: float
    rouge_l: float
    quality_score: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_answer(prediction: str, gold: str) -> Score:
    """EM, token F1, ROUGE-L F and ``quality_score = (EM + ROUGE-L) / 2``."""
    em = exact_match(prediction, gold)
    rl = rouge_l(prediction, gold)
    return Score(exact_match=em, f1=f1_score(prediction, gold), rouge_l=rl,
                 quality_score=(em + rl) / 2)
