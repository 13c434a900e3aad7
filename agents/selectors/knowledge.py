"""Reads of knowledge bases: the best passages for a conversation.

:func:`knowledge_retrieve` ranks the chunks of an agent's knowledge bases with BM25; each
process keeps one index per knowledge base in memory and rebuilds it when the base's
``index_version`` changed (one indexed read per turn tells)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from agents import bm25
from agents.models import KnowledgeBase, KnowledgeChunk


@dataclass
class _KbIndex:
    version: str
    index: bm25.Index
    chunks: list[tuple[int, str, str, str]]  # id, document, source, text


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
        held = _indexes[kb_id] = _KbIndex(
            version, bm25.Index([f"{source} {text}" for _, _, source, text in rows]), rows)
        return held


def knowledge_retrieve(*, knowledge_base_ids: list[int], query: str) -> list[dict[str, Any]]:
    """The best passages of these knowledge bases for ``query``: each base's ``top_k``,
    best first overall and at most the largest ``top_k``. Each passage:
    ``{knowledge_base, document, source, chunk_id, score, text}``."""
    bases = list(KnowledgeBase.objects.filter(pk__in=knowledge_base_ids)
                 .values_list("pk", "slug", "index_version", "top_k"))
    found = []
    for kb_id, slug, version, k in bases:
        held = _kb_index(kb_id, version)
        for i, score in held.index.top(query, k):
            chunk_id, document, source, text = held.chunks[i]
            found.append({"knowledge_base": slug, "document": document, "source": source,
                          "chunk_id": chunk_id, "score": round(score, 4), "text": text})
    found.sort(key=lambda p: -p["score"])
    return found[:max((b[3] for b in bases), default=0)]


def passages_prompt(passages: list[dict[str, Any]]) -> str:
    """The passages as the model gets them: numbered, with their sources."""
    lines = ["Answer from these passages of your knowledge base when they are relevant, "
             "and cite their sources like [1]:"]
    for n, p in enumerate(passages, start=1):
        lines.append(f"[{n}] ({p['source']}) {p['text']}")
    return "\n".join(lines)

