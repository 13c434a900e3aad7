"""Lexical ranking shared by ``auto`` routing and knowledge-base retrieval: one tokenizer
and BM25 (``rank-bm25``) over it."""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
STOPWORDS = frozenset(
    "a an and are as at be been but by can could do does for from had has have how i if in "
    "into is it its me my of on or our please should so than that the their them then there "
    "these they this to was we were what when where which who why will with would you your "
    "about can't help need want tell give make".split()
)


def tokens(text: str) -> list[str]:
    """Lower-case content words, a plural ``s`` folded away (``recipes`` finds ``recipe``)."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


class Index:
    """A BM25 index over ``documents`` (texts). BM25+ so that a term found in half of a
    tiny corpus (two agents) still counts; ``overlap`` says whether a document shares any
    term with the query at all (BM25+ gives every document a floor)."""

    def __init__(self, documents: Sequence[str]) -> None:
        from rank_bm25 import BM25Plus  # type: ignore[import-untyped]  # numpy: on first use

        self.docs = [tokens(d) or ["_"] for d in documents]
        self._sets = [set(d) for d in self.docs]
        self._bm25 = BM25Plus(self.docs) if self.docs else None
        # term -> the documents holding it: a query scores only those (10,000 passages and
        # a few terms cost a few hundred score evaluations, not 10,000 per term)
        self._postings: dict[str, list[int]] = {}
        for i, terms in enumerate(self._sets):
            for term in terms:
                self._postings.setdefault(term, []).append(i)

    def scores(self, query: str) -> list[float]:
        terms = tokens(query)
        if self._bm25 is None or not terms:
            return [0.0] * len(self.docs)
        return [float(s) for s in self._bm25.get_scores(terms)]

    def overlap(self, query: str) -> list[int]:
        terms = set(tokens(query))
        return [len(terms & s) for s in self._sets]

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best documents sharing a term with the query: ``(index, score)``."""
        terms = set(tokens(query))
        if self._bm25 is None or not terms:
            return []
        candidates = sorted({i for t in terms for i in self._postings.get(t, ())})
        if not candidates:
            return []
        scores = self._bm25.get_batch_scores(sorted(terms), candidates)
        ranked = sorted(zip(candidates, scores, strict=True), key=lambda p: (-p[1], p[0]))
        return [(i, float(s)) for i, s in ranked[:k]]
