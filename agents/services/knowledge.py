"""Writes of knowledge bases: store an upload (text, Markdown or PDF) and index it in the
background (a Celery task when ``REDIS_URL`` is set, else this process's embedded worker).
Indexing extracts the text, cuts it into passages (``chunk_chars`` long, ``chunk_overlap``
repeated) with their sources (the document, its page or its Markdown section) and replaces the
document's chunks; the feed hears of every stage (``kb_indexing``)."""

from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.utils import timezone

from agents.infra.background import background_dispatch
from agents.kernel.exceptions import InvalidRequest
from agents.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument
from agents.outlet import events, realtime
from agents.services.documents import (
    MAX_DOCUMENT_BYTES,
    chunk_text,
    document_kind,
    document_sections,
)

log = logging.getLogger("gaia.knowledge")

BATCH = 500  # chunks written per transaction (and per progress event)
KNOWLEDGE_INDEX_TASK = "agents.knowledge_document_index"  # agents.services.tasks


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
    realtime.send_event_on_commit(events.kb_indexing(doc, status="queued", progress=0))
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
    """Index in the background: a Celery worker with Redis, else the embedded worker
    (agents.infra.background; Celery's eager mode would index inside the request)."""
    background_dispatch(KNOWLEDGE_INDEX_TASK, document_id)


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
    realtime.send_event(events.kb_indexing(doc, status="indexing", progress=0))
    try:
        sections = document_sections(name=doc.name, kind=doc.kind, data=bytes(doc.data))
        passages = [(source, text) for source, section in sections
                    for text in chunk_text(section, size=kb.chunk_chars,
                                           overlap=min(kb.chunk_overlap, kb.chunk_chars // 2))]
    except Exception as exc:  # noqa: BLE001 - recorded on the document, shown on the feed
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        KnowledgeDocument.objects.filter(pk=doc.pk).update(
            status=KnowledgeDocument.Status.ERROR, error=message[:2000])
        realtime.send_event(events.kb_indexing(doc, status="error", progress=1, error=message))
        return True
    KnowledgeChunk.objects.filter(document=doc).delete()
    for start in range(0, len(passages), BATCH):
        batch = passages[start:start + BATCH]
        KnowledgeChunk.objects.bulk_create([
            KnowledgeChunk(knowledge_base=kb, document=doc, seq=start + i, source=source,
                           text=text) for i, (source, text) in enumerate(batch)])
        doc.chunk_count = start + len(batch)
        realtime.send_event(events.kb_indexing(doc, status="indexing",
                                            progress=doc.chunk_count / len(passages)))
    with transaction.atomic():
        KnowledgeDocument.objects.filter(pk=doc.pk).update(
            status=KnowledgeDocument.Status.READY, chunk_count=len(passages), error="",
            indexed_at=timezone.now())
        KnowledgeBase.objects.filter(pk=kb.pk).update(index_version=uuid.uuid4().hex)
    doc.chunk_count = len(passages)
    realtime.send_event(events.kb_indexing(doc, status="ready", progress=1))
    return True

