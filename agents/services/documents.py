"""Documents in, passages out: the text of an upload (text, Markdown or PDF) by section, and
that text cut into passages. Pure functions: the writes that use them are in
:mod:`agents.services.knowledge`, the retrieval in :mod:`agents.selectors.knowledge`."""

from __future__ import annotations

import io
import re

from agents.kernel.exceptions import InvalidRequest
from agents.models import KnowledgeDocument

MAX_DOCUMENT_BYTES = 50 * 1024 * 1024


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

