"""Suites of questions and the document text broadcast to agents.

A suite is a JSON list of HotpotQA-style objects (``question``, ``answer``, ``type``,
``context: {title: [...], sentences: [[...], ...]}``), the Hugging Face ``datasets`` layout of
the shipped default, ``mesh/data/hotpotqa-dev-30.json``.

The document is plain text: one paragraph per block, blocks separated by a blank line, the
first line of a block its title, then one sentence per line. :func:`parse_document` inverts
:func:`render_document`, so agents recover paragraphs and sentences from the chunks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_SUITE",
    "Paragraph",
    "Question",
    "default_suite_path",
    "load_suite",
    "parse_document",
    "parse_suite",
    "render_document",
]

DEFAULT_SUITE = "hotpotqa-dev-30.json"


@dataclass(frozen=True, slots=True)
class Paragraph:
    title: str
    sentences: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


@dataclass(frozen=True, slots=True)
class Question:
    index: int
    question: str
    answer: str
    paragraphs: tuple[Paragraph, ...]
    type: str = ""
    level: str = ""
    id: str = ""
    supporting_titles: tuple[str, ...] = field(default_factory=tuple)

    def document(self) -> str:
        return render_document(self.paragraphs)


def _clean(text: str) -> str:
    return " ".join(text.split())


def render_document(paragraphs: tuple[Paragraph, ...] | list[Paragraph]) -> str:
    blocks = []
    for para in paragraphs:
        lines = [_clean(para.title) or "Untitled"]
        lines.extend(s for s in (_clean(x) for x in para.sentences) if s)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def parse_document(text: str) -> list[Paragraph]:
    paragraphs = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line.strip()]
        if lines:
            paragraphs.append(Paragraph(lines[0], tuple(lines[1:])))
    return paragraphs


def _question_from(index: int, raw: dict[str, Any]) -> Question:
    try:
        context = raw["context"]
        if isinstance(context, dict):
            pairs = list(zip(context["title"], context["sentences"], strict=True))
        else:  # the original HotpotQA layout: [[title, [sentences]], ...]
            pairs = [(item[0], item[1]) for item in context]
        paragraphs = tuple(Paragraph(str(t), tuple(str(s) for s in ss)) for t, ss in pairs)
        facts = raw.get("supporting_facts") or {}
        titles = facts.get("title", []) if isinstance(facts, dict) else [f[0] for f in facts]
        return Question(
            index=index,
            question=str(raw["question"]),
            answer=str(raw["answer"]),
            paragraphs=paragraphs,
            type=str(raw.get("type", "")),
            level=str(raw.get("level", "")),
            id=str(raw.get("id", raw.get("_id", ""))),
            supporting_titles=tuple(dict.fromkeys(str(t) for t in titles)),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"suite item {index} is not a HotpotQA question: {exc!r}") from exc


def default_suite_path() -> Path:
    # Next to this module (not importlib.resources: an editable install may expose ``mesh``
    # as a namespace package, whose files() is not a directory).
    return Path(__file__).resolve().parent / "data" / DEFAULT_SUITE


def load_suite(path: str | Path | None = None) -> list[Question]:
    """Load a suite (default: the shipped 30 HotpotQA dev questions).

    Raises ``ValueError`` if the file is not a list of questions, ``OSError`` if unreadable.
    """
    source = Path(path) if path is not None else default_suite_path()
    data = json.loads(source.read_text(encoding="utf-8"))
    try:
        return parse_suite(data)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from exc


def parse_suite(data: Any) -> list[Question]:
    """The questions of an already-decoded suite; ``ValueError`` names the bad item."""
    if not isinstance(data, list) or not data:
        raise ValueError("a suite is a non-empty JSON list of questions")
    return [_question_from(i, item) for i, item in enumerate(data)]
