"""Reads of knowledge bases: the best passages for a conversation.

:func:`knowledge_retrieve` ranks the chunks of an agent's knowledge bases with BM25; each
process keeps one index per knowledge base in memory and rebuilds it when the base's
``index_version`` changed (one indexed read per turn tells). From async code,
:func:`knowledge_search`: the reads on a database thread, the index building and the ranking
(CPU, the query bounded by :func:`agents.kernel.bm25.query_terms`) on a worker thread, so
that neither holds the event loop nor every other request's database work."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from agents.infra.database import run_db
from agents.kernel import bm25
from agents.models import KnowledgeBase, KnowledgeChunk


@dataclass
class _KbIndex:
    version: str
    chunks: list[tuple[int, str, str, str]]  # id, document, source, text
    _index: bm25.Index | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def index(self) -> bm25.Index:
        """The chunks' BM25 index, built on first use: by a ranking's worker thread, not on
        a database thread (10,000 passages take a second or more of CPU to index)."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = bm25.Index([f"{source} {text}"
                                              for _, _, source, text in self.chunks])
        return self._index


_indexes: dict[int, _KbIndex] = {}
_index_lock = threading.Lock()


def _kb_index(kb_id: int, version: str) -> _KbIndex:
    held = _indexes.get(kb_id)
    if held is not None and held.version == version:
        return held
    with _index_lock:
        held = _indexes.get(kb_id)
        if held is not None and held.version == version:
            return held
        rows = list(KnowledgeChunk.objects.filter(knowledge_base_id=kb_id).order_by("pk")
                    .values_list("pk", "document__name", "source", "text"))
        held = _indexes[kb_id] = _KbIndex(version, rows)
        return held


def knowledge_indexes(*, knowledge_base_ids: list[int]) -> list[tuple[str, int, _KbIndex]]:
    """Each of these knowledge bases' ``(slug, top_k, index)``, current (a database read:
    run on a database thread)."""
    bases = list(KnowledgeBase.objects.filter(pk__in=knowledge_base_ids)
                 .values_list("pk", "slug", "index_version", "top_k"))
    return [(slug, k, _kb_index(kb_id, version)) for kb_id, slug, version, k in bases]


def knowledge_rank(indexes: list[tuple[str, int, _KbIndex]], query: str
                   ) -> list[dict[str, Any]]:
    """The best passages of these indexes for ``query``: each base's ``top_k``, best first
    overall and at most the largest ``top_k``. Each passage: ``{knowledge_base, document,
    source, chunk_id, score, text}``. No database: CPU alone, bounded by the query's bound
    (:func:`agents.kernel.bm25.query_terms`), so it runs on a worker thread, not a database one."""
    found = []
    for slug, k, held in indexes:
        for i, score in held.index.top(query, k):
            chunk_id, document, source, text = held.chunks[i]
            found.append({"knowledge_base": slug, "document": document, "source": source,
                          "chunk_id": chunk_id, "score": round(score, 4), "text": text})
    found.sort(key=lambda p: -p["score"])
    return found[:max((k for _, k, _ in indexes), default=0)]


def knowledge_retrieve(*, knowledge_base_ids: list[int], query: str) -> list[dict[str, Any]]:
    """:func:`knowledge_rank` over :func:`knowledge_indexes`, in one call (sync code)."""
    return knowledge_rank(knowledge_indexes(knowledge_base_ids=knowledge_base_ids), query)


async def knowledge_search(*, knowledge_base_ids: list[int], query: str
                           ) -> list[dict[str, Any]]:
    """:func:`knowledge_retrieve` from async code: the indexes read on a database thread, the
    ranking on a worker thread (a long ranking on the database thread would hold every other
    request's database work; bounded as it is, it takes a few milliseconds at most)."""
    indexes = await run_db(knowledge_indexes, knowledge_base_ids=knowledge_base_ids)
    return await asyncio.to_thread(knowledge_rank, indexes, bm25.query_text(query))


def passages_prompt(passages: list[dict[str, Any]]) -> str:
    """The passages as the model gets them: numbered, with their sources."""
    lines = ["Answer from these passages of your knowledge base when they are relevant, "
             "and cite their sources like [1]:"]
    for n, p in enumerate(passages, start=1):
        lines.append(f"[{n}] ({p['source']}) {p['text']}")
    return "\n".join(lines)

