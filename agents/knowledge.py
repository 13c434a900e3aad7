"""Knowledge bases: documents in, passages out.

Writes: :func:`knowledge_document_add` stores an upload (text, Markdown or PDF) and schedules
its indexing in the background: a Celery task when ``REDIS_URL`` is set, else a thread of
this process (the embedded worker). :func:`knowledge_document_index` extracts the text, cuts
it into passages (``chunk_chars`` long, ``chunk_overlap`` repeated) with their sources (the
document, its page or its Markdown section) and replaces the document's chunks; the feed
hears of every stage (``kb_indexing``).

Reads: :func:`knowledge_retrieve` ranks the chunks of an agent's knowledge bases with BM25
for the conversation; each process keeps one index per knowledge base in memory and
rebuilds it when the base's ``index_version`` changed (one indexed read per turn tells).
"""

from __future__ import annotations

import io
import logging
import re
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from agents import bm25, realtime
from agents.exceptions import InvalidRequest
from agents.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument

log = logging.getLogger("gaia.knowledge")

BATCH = 500  # chunks written per transaction (and per progress event)
MAX_DOCUMENT_BYTES = 50 * 1024 * 1024

# ---------------------------------------------------------------------------------------------
# Text out of documents, passages out of text


def document_kind(name: str, data: bytes) -> str:
    lowered = name.lower()
    if lowered.endswith(".pdf") or data[:5] == b"%PDF-":
        return KnowledgeDocument.Kind.PDF
    if lowered.endswith((".md", ".markdown")):
        return KnowledgeDocument.Kind.MARKDOWN
    return KnowledgeDocument.Kind.TEXT


def document_sections(*, name: str, kind: str, data: bytes) -> list[tuple[str, str]]:
    """``[(source, text)]``: a PDF's pages, a Markdown file's sections, a text file whole.
    Raises :class:`InvalidRequest` for a file that cannot be read as its kind."""
    if kind == KnowledgeDocument.Kind.PDF:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError

        try:
            reader = PdfReader(io.BytesIO(data))
            return [(f"{name} p.{i}", page.extract_text() or "")
                    for i, page in enumerate(reader.pages, start=1)]
        except (PyPdfError, ValueError, KeyError, TypeError) as exc:
            raise InvalidRequest(f"{name}: not a readable PDF ({exc}).") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"{name}: text and Markdown documents must be UTF-8.") from exc
    if kind != KnowledgeDocument.Kind.MARKDOWN:
        return [(name, text)]
    sections: list[tuple[str, str]] = []
    heading, lines = "", []
    for line in text.splitlines():
        match = re.match(r"^#{1,6}\s+(.*\S)\s*#*\s*$", line)
        if match:
            if "".join(lines).strip():
                sections.append((f"{name} § {heading}" if heading else name, "\n".join(lines)))
            heading, lines = match.group(1), [match.group(1)]
        else:
            lines.append(line)
    if "".join(lines).strip():
        sections.append((f"{name} § {heading}" if heading else name, "\n".join(lines)))
    return sections


def chunk_text(text: str, *, size: int, overlap: int) -> list[str]:
    """Passages of at most ``size`` characters: whole paragraphs packed together while they
    fit; a longer paragraph is cut between words, each piece repeating up to ``overlap``
    characters of the one before (so a sentence cut in two is whole in one)."""
    out: list[str] = []
    packed = ""
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if not para:
            continue
        if packed and len(packed) + 1 + len(para) <= size:
            packed += " " + para
            continue
        if packed:
            out.append(packed)
            packed = ""
        if len(para) <= size:
            packed = para
        else:
            out += _split_words(para, size=size, overlap=overlap)
    if packed:
        out.append(packed)
    return out


def _split_words(text: str, *, size: int, overlap: int) -> list[str]:
    words = text.split()
    chunks: list[str] = []
    start = 0
    while start < len(words):
        length, end = 0, start
        while end < len(words) and (end == start or length + 1 + len(words[end]) <= size):
            length += len(words[end]) + (1 if end > start else 0)
            end += 1
        chunks.append(" ".join(words[start:end]))
        if end >= len(words):
            break
        back, kept = end, 0
        while back > start + 1 and kept + len(words[back - 1]) + 1 <= overlap:
            back -= 1
            kept += len(words[back]) + 1
        start = back
    return chunks


# ---------------------------------------------------------------------------------------------
# Writes


def _indexing_event(doc: KnowledgeDocument, *, status: str, progress: float,
                    error: str = "") -> dict[str, Any]:
    return realtime.event(
        "kb_indexing", knowledge_base=doc.knowledge_base.slug, document=doc.name,
        document_id=doc.pk, status=status, progress=round(progress, 3),
        chunks=doc.chunk_count, error=error or None)


@transaction.atomic
def knowledge_document_add(*, knowledge_base: KnowledgeBase, name: str, data: bytes,
                           kind: str | None = None) -> KnowledgeDocument:
    """Store an upload and index it in the background (after commit). A document of the
    same name is replaced. Raises :class:`InvalidRequest` for an empty, oversized or
    unreadable (not UTF-8, not PDF) file; nothing is stored then."""
    name = (name or "").strip().replace("/", "_")[:300]
    if not name:
        raise InvalidRequest("A document needs a name.", param="name")
    if not data:
        raise InvalidRequest(f"{name}: the file is empty.")
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InvalidRequest(f"{name}: larger than {MAX_DOCUMENT_BYTES} bytes.")
    kind = kind or document_kind(name, data)
    if kind not in KnowledgeDocument.Kind.values:
        raise InvalidRequest(f"{name}: unknown kind {kind!r}.")
    if kind == KnowledgeDocument.Kind.PDF and data[:5] != b"%PDF-":
        raise InvalidRequest(f"{name}: not a PDF file.")
    if kind != KnowledgeDocument.Kind.PDF:
        try:
            data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InvalidRequest(f"{name}: text and Markdown documents must be UTF-8.") from exc
    KnowledgeDocument.objects.filter(knowledge_base=knowledge_base, name=name).delete()
    doc = KnowledgeDocument.objects.create(knowledge_base=knowledge_base, name=name,
                                           kind=kind, data=data)
    KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(index_version=uuid.uuid4().hex)
    realtime.send_event_on_commit(_indexing_event(doc, status="queued", progress=0))
    transaction.on_commit(lambda: knowledge_document_index_schedule(document_id=doc.pk))
    return doc


@transaction.atomic
def knowledge_base_reindex(*, knowledge_base: KnowledgeBase) -> int:
    """Queue every document of the base for indexing again (after a change of its chunk
    settings); returns how many."""
    ids = list(knowledge_base.documents.values_list("pk", flat=True))
    KnowledgeDocument.objects.filter(pk__in=ids).update(status=KnowledgeDocument.Status.QUEUED)
    for pk in ids:
        transaction.on_commit(lambda pk=pk: knowledge_document_index_schedule(document_id=pk))
    return len(ids)


def knowledge_document_index_schedule(*, document_id: int) -> None:
    """Index in the background: the Celery task with Redis, else the embedded worker (a
    thread of this process; Celery's eager mode would index inside the request)."""
    if settings.REDIS_URL:
        from agents.tasks import knowledge_document_index_task

        knowledge_document_index_task.delay(document_id)
        return
    threading.Thread(target=_index_in_thread, args=(document_id,), daemon=True,
                     name=f"gaia-kb-index-{document_id}").start()


def _index_in_thread(document_id: int) -> None:
    close_old_connections()
    try:
        knowledge_document_index(document_id=document_id)
    except Exception:
        log.exception("indexing document %s failed", document_id)
    finally:
        connection.close()


def knowledge_document_index(*, document_id: int) -> bool:
    """Extract, chunk and store one document's passages; idempotent (a document not queued
    is left alone, so a redelivered task does nothing). Returns whether it indexed."""
    claimed = KnowledgeDocument.objects.filter(
        pk=document_id, status=KnowledgeDocument.Status.QUEUED,
    ).update(status=KnowledgeDocument.Status.INDEXING)
    if not claimed:
        return False
    doc = KnowledgeDocument.objects.select_related("knowledge_base").get(pk=document_id)
    kb = doc.knowledge_base
    realtime.send_event(_indexing_event(doc, status="indexing", progress=0))
    try:
        sections = document_sections(name=doc.name, kind=doc.kind, data=bytes(doc.data))
        passages = [(source, text) for source, section in sections
                    for text in chunk_text(section, size=kb.chunk_chars,
                                           overlap=min(kb.chunk_overlap, kb.chunk_chars // 2))]
    except Exception as exc:  # noqa: BLE001 - recorded on the document, shown on the feed
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        KnowledgeDocument.objects.filter(pk=doc.pk).update(
            status=KnowledgeDocument.Status.ERROR, error=message[:2000])
        realtime.send_event(_indexing_event(doc, status="error", progress=1, error=message))
        return True
    KnowledgeChunk.objects.filter(document=doc).delete()
    for start in range(0, len(passages), BATCH):
        batch = passages[start:start + BATCH]
        KnowledgeChunk.objects.bulk_create([
            KnowledgeChunk(knowledge_base=kb, document=doc, seq=start + i, source=source,
                           text=text) for i, (source, text) in enumerate(batch)])
        doc.chunk_count = start + len(batch)
        realtime.send_event(_indexing_event(doc, status="indexing",
                                            progress=doc.chunk_count / len(passages)))
    with transaction.atomic():
        KnowledgeDocument.objects.filter(pk=doc.pk).update(
            status=KnowledgeDocument.Status.READY, chunk_count=len(passages), error="",
            indexed_at=timezone.now())
        KnowledgeBase.objects.filter(pk=kb.pk).update(index_version=uuid.uuid4().hex)
    doc.chunk_count = len(passages)
    realtime.send_event(_indexing_event(doc, status="ready", progress=1))
    return True


# ---------------------------------------------------------------------------------------------
# Reads


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
