"""How a replayed reply is scored against the reference (the reply the conversation had).

* Exact match, token F1 and ROUGE-L: the mesh's own (``mesh.evaluation``, HotpotQA/SQuAD
  conventions), so a replay's figures read like a mesh run's.
* Embedding similarity: the cosine similarity of the two texts' embeddings by WordLlama's
  ``l2_supercat`` model (256 dimensions), whose weights and tokenizer ship inside the
  ``wordllama`` wheel: it loads with the network unreachable (0.5 s, once per process) and
  scores a pair in about 0.2 ms on one core.
* A judge: any Gaia agent, given a rubric and both texts and asked for a JSON verdict
  constrained by :data:`JUDGE_SCHEMA`; an answer that is not that JSON is the case's
  ``judge_error``, never a failed run.
* The primary score a comparison uses: the judge's when there is one, else the similarity.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mesh.evaluation import exact_match, f1_score, rouge_l

TIE = 0.05  # primary scores closer than this are a tie

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "verdict": {"type": "string", "enum": ["better", "same", "worse"]},
        "reason": {"type": "string"},
    },
    "required": ["score", "verdict", "reason"],
    "additionalProperties": False,
}

JUDGE_INSTRUCTIONS = """You grade an assistant's reply to a conversation against a reference reply.
Score the candidate from 0 (useless or wrong) to 1 (fully correct and helpful), and say whether it
is better than, the same as, or worse than the reference. Answer with JSON only:
{"score": <0..1>, "verdict": "better" | "same" | "worse", "reason": "<one sentence>"}"""


@dataclass
class Scores:
    exact_match: float
    f1: float
    rouge_l: float
    similarity: float | None


def embedding_model() -> Any:
    """The WordLlama model, loaded once per process from the files its wheel ships (the one
    loader: :func:`agents.backends.local_raw.embedder`, which ``/v1/embeddings`` of the local
    kind uses too)."""
    from agents.backends.local_raw import embedder

    return embedder()


def similarity(a: str, b: str) -> float | None:
    """Cosine similarity of the two texts' embeddings (``None`` when either is empty)."""
    if not a.strip() or not b.strip():
        return None
    return round(float(embedding_model().similarity(a, b)), 4)


def score(prediction: str, reference: str) -> Scores:
    return Scores(exact_match=float(exact_match(prediction, reference)),
                  f1=round(f1_score(prediction, reference), 4),
                  rouge_l=round(rouge_l(prediction, reference), 4),
                  similarity=similarity(prediction, reference))


def judge_prompt(conversation: list[dict[str, Any]], reference: str, candidate: str) -> str:
    shown = "\n".join(f"{m['role']}: {m['content']}" for m in conversation)
    return (f"Conversation:\n{shown}\n\nReference reply:\n{reference}\n\n"
            f"Candidate reply:\n{candidate}\n\nYour JSON verdict:")


_FENCED = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def judge_parse(text: str) -> tuple[float, str, str]:
    """``(score, verdict, reason)`` from a judge's answer; ``ValueError`` saying what is wrong
    when it is not the verdict :data:`JUDGE_SCHEMA` describes."""
    raw = text.strip()
    fenced = _FENCED.match(raw)
    if fenced:
        raw = fenced.group(1)
    try:
        verdict = json.loads(raw)
    except ValueError:
        raise ValueError(f"the judge did not answer JSON: {text[:200]!r}") from None
    if not isinstance(verdict, dict):
        raise ValueError(f"the judge's JSON is not an object: {text[:200]!r}")
    value, kind, reason = verdict.get("score"), verdict.get("verdict"), verdict.get("reason")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"the judge's score is not a number from 0 to 1: {value!r}")
    if kind not in ("better", "same", "worse"):
        raise ValueError(f"the judge's verdict is not better/same/worse: {kind!r}")
    if not isinstance(reason, str):
        raise ValueError("the judge gave no reason")
    return float(value), kind, reason[:2000]


def primary(result: Any) -> float | None:
    """The score comparisons use: the judge's, else the embedding similarity."""
    if result.judge_score is not None:
        return float(result.judge_score)
    return None if result.similarity is None else float(result.similarity)


def outcome(mine: float | None, theirs: float | None) -> str | None:
    """``win``, ``tie`` or ``loss`` of a score against another (``None``: not comparable)."""
    if mine is None or theirs is None:
        return None
    if abs(mine - theirs) < TIE:
        return "tie"
    return "win" if mine > theirs else "loss"
