"""Knowledge bases: documents uploaded for agents, cut into passages."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models


class KnowledgeBase(models.Model):
    """Documents an agent answers from: chunked and indexed (BM25); each turn of an agent
    with knowledge bases gets the top passages for the conversation, with their sources."""

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    chunk_chars = models.PositiveIntegerField(
        default=800, validators=[MinValueValidator(100)],
        help_text="A passage's length in characters, at most.")
    chunk_overlap = models.PositiveIntegerField(
        default=100, help_text="Characters a passage repeats from the one before.")
    top_k = models.PositiveIntegerField(default=4, validators=[MinValueValidator(1)],
                                        help_text="Passages given to the model per turn.")
    # Renewed whenever its chunks change: every process rebuilds its index on next use.
    index_version = models.CharField(max_length=32, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class KnowledgeDocument(models.Model):
    class Kind(models.TextChoices):
        TEXT = "text"
        MARKDOWN = "markdown"
        PDF = "pdf"

    class Status(models.TextChoices):
        QUEUED = "queued"
        INDEXING = "indexing"
        READY = "ready"
        ERROR = "error"

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE,
                                       related_name="documents")
    name = models.CharField(max_length=300)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    data = models.BinaryField(editable=False, help_text="The uploaded file as it came.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    indexed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["knowledge_base", "name"]

    def __str__(self) -> str:
        return f"{self.knowledge_base.slug}/{self.name}"


class KnowledgeChunk(models.Model):
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE,
                                       related_name="chunks")
    document = models.ForeignKey(KnowledgeDocument, on_delete=models.CASCADE,
                                 related_name="chunks")
    seq = models.PositiveIntegerField()
    source = models.CharField(max_length=400, help_text="Document, page or section.")
    text = models.TextField()

    class Meta:
        ordering = ["document", "seq"]

    def __str__(self) -> str:
        return self.source
