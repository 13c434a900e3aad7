"""Lexical ranking shared by ``auto`` routing, knowledge-base retrieval and memory recall: one
tokenizer and BM25+ over it (the formula and parameters of ``rank-bm25``'s ``BM25Plus``).

A query is the client's text (a whole user message, a tool's argument), so its cost is
bounded before any work (agents.tools.base: nothing a client sends may hold the event loop):
:func:`query_terms` reads at most :data:`MAX_QUERY_CHARS` of it, and a ranking scores at most
:data:`MAX_QUERY_TERMS` distinct terms, the most distinctive (rarest) of those the index holds,
each through its posting list (the documents that hold it) as one array operation. A query's
cost is then at most a fixed number of array operations over the postings, whatever its size:
a 1 MB message ranks 10,000 passages in about 2 ms; before, every term of the whole message
was scored against every passage sharing one of them in Python (a 20 KB message held the
server 4.4 s, a 125,000-word ``knowledge_search`` 31 s)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
STOPWORDS = frozenset(
    "a an and are as at be been but by can could do does for from had has have how i if in "
    "into is it its me my of on or our please should so than that the their them then there "
    "these they this to was we were what when where which who why will with would you your "
    "about can't help need want tell give make".split()
)
# A query longer than this is read by its beginning and its end (half each): a long message's
# question is usually at one of them, and tokenizing 8,000 characters takes about 0.3 ms.
MAX_QUERY_CHARS = 8000
# At most this many distinct terms of a query are scored: those the index holds, rarest first.
MAX_QUERY_TERMS = 32
K1, B, DELTA = 1.5, 0.75, 1.0  # rank-bm25's BM25Plus defaults


def tokens(text: str) -> list[str]:
    """Lower-case content words, a plural ``s`` folded away (``recipes`` finds ``recipe``)."""
    return [w[:-1] if w[-1] == "s" and len(w) > 3 and w[-2] != "s" else w
            for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def query_text(text: str) -> str:
    """``text`` as a query reads it: at most :data:`MAX_QUERY_CHARS` characters, its
    beginning and its end when it is longer."""
    if len(text) <= MAX_QUERY_CHARS:
        return text
    half = MAX_QUERY_CHARS // 2
    return text[:half] + " " + text[-half:]


def query_terms(text: str) -> Counter[str]:
    """The terms of a query (of :func:`query_text`), each with how often it occurs."""
    return Counter(tokens(query_text(text)))


class Index:
    """A BM25 index over ``documents`` (texts). BM25+ so that a term found in half of a
    tiny corpus (two agents) still counts; ``overlap`` says whether a document shares any
    term with the query at all (BM25+ gives every document a floor)."""

    def __init__(self, documents: Sequence[str]) -> None:
        import numpy as np  # on first use

        self._np = np
        # term -> the documents holding it and how often (its posting list, a slice of two
        # arrays sorted by term): a query scores only those (10,000 passages and a few terms
        # cost a few array operations, not 10,000 per term)
        self._terms: dict[str, int] = {}
        term_ids: list[int] = []
        counts: list[int] = []
        distinct: list[int] = []
        lengths: list[int] = []
        for text in documents:
            words = tokens(text) or ["_"]
            tf = Counter(words)
            term_ids.extend(self._terms.setdefault(t, len(self._terms)) for t in tf)
            counts.extend(tf.values())
            distinct.append(len(tf))
            lengths.append(len(words))
        self.size = n = len(lengths)
        ids = np.array(term_ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")  # by term, then by document
        self._docs = np.repeat(np.arange(n, dtype=np.int64), distinct)[order]
        self._tf = np.array(counts, dtype=float)[order]
        df = np.bincount(ids, minlength=len(self._terms))
        self._start = np.concatenate(([0], np.cumsum(df)))
        self._idf = np.log((n + 1) / np.maximum(df, 1))
        doc_len = np.array(lengths, dtype=float)
        self._norm = K1 * (1 - B + B * doc_len / doc_len.mean()) if n else doc_len

    def _posting(self, term: int) -> tuple[Any, Any]:
        """The documents holding term number ``term``, and how often each does."""
        a, b = self._start[term], self._start[term + 1]
        return self._docs[a:b], self._tf[a:b]

    def _chosen(self, query: str) -> dict[int, int]:
        """The query's terms this index holds (by number), with their counts: at most
        :data:`MAX_QUERY_TERMS`, the rarest when there are more (the query's order breaks
        ties). A term no document holds scores the same for all, so leaving it out changes
        no ranking."""
        counts = query_terms(query)
        held = [(self._terms[t], c) for t, c in counts.items() if t in self._terms]
        if len(held) > MAX_QUERY_TERMS:
            held = sorted(held, key=lambda h: -self._idf[h[0]])[:MAX_QUERY_TERMS]
        return dict(held)

    def _scores(self, chosen: dict[int, int]) -> Any:
        """BM25+ of every document for the chosen terms (counted as often as the query has
        them), as an array; documents holding none of them get BM25+'s floor alone."""
        score = self._np.zeros(self.size)
        floor = 0.0
        for term, count in chosen.items():
            docs, tf = self._posting(term)
            idf = self._idf[term] * count
            floor += idf * DELTA
            score[docs] += idf * (tf * (K1 + 1)) / (self._norm[docs] + tf)
        return score + floor

    def scores(self, query: str) -> list[float]:
        chosen = self._chosen(query)
        if not chosen:
            return [0.0] * self.size
        return [float(s) for s in self._scores(chosen)]

    def overlap(self, query: str) -> list[int]:
        """How many of the query's (chosen) terms each document holds."""
        chosen = self._chosen(query)
        if not chosen:
            return [0] * self.size
        docs = self._np.concatenate([self._posting(t)[0] for t in chosen])
        return [int(c) for c in self._np.bincount(docs, minlength=self.size)]

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best documents sharing a term with the query: ``(index, score)``."""
        chosen = dict.fromkeys(self._chosen(query), 1)
        if not chosen:
            return []
        np = self._np
        candidates = np.unique(np.concatenate([self._posting(t)[0] for t in chosen]))
        scores = self._scores(chosen)[candidates]
        # best first, the first document first among equal scores (rounded: sums in another
        # order differ in the last bits)
        order = np.lexsort((candidates, -np.round(scores, 9)))[:k]
        return [(int(candidates[i]), float(scores[i])) for i in order]
