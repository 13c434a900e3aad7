"""The four tools of the pipeline: ``search -> extract -> triple -> reason``.

Each tool is ``async (ToolInput, LLM | None) -> ToolOutput``. Without an LLM it is deterministic
and reports ``tokens = 0`` (no model ran). With one it asks the model and falls back to the
deterministic result when the reply is unusable; ``tokens`` is the model's reported usage.

- ``search``: BM25 (``rank-bm25``) over the document's paragraphs for the question, plus a
  bonus for paragraphs whose title the question names. Emits ``search_docs``.
- ``extract``: supporting sentences, by IDF-weighted overlap with the question. ``sentences``.
- ``triple``: naive subject-relation-object triples (pronouns resolved to the paragraph title,
  split at the first verb of a small list). ``triples``.
- ``reason``: a short answer. Yes/no questions compare the two entities; "A or B" questions pick
  one of the two; otherwise a short span of the expected kind (year, number, name) from the best
  evidence. ``final_answer``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mesh.llm import LLM, LLMReply
from mesh.suite import Paragraph

__all__ = [
    "PIPELINE",
    "TOOL_TAGS",
    "TOOLS",
    "ToolInput",
    "ToolOutput",
    "prepare",
    "run_tool",
]

PIPELINE = ("search", "extract", "triple", "reason")
TOOL_TAGS = {
    "search": "search_docs",
    "extract": "sentences",
    "triple": "triples",
    "reason": "final_answer",
}

SEARCH_TOP_K = 4
EXTRACT_TOP_N = 6

_STOPWORDS = frozenset(
    """a an the of in on at to for from by with and or but is are was were be been being
    what which who whom whose when where why how that this these those it its as did does do
    has have had he she they his her their than then there also both same other into
    during after before about over under one not""".split()
)
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_NUMBER = re.compile(r"\b\d{1,3}(?:,\d{3})+\b|\b\d+(?:\.\d+)?\b")
_CAP_SPAN = re.compile(
    r"(?:[A-Z][\w’'.\-]*|\d[\w\-]*)(?:\s+(?:(?:of|the|and|de|von|van|for|in|du|la|le)\s+)*"
    r"(?:[A-Z][\w’'.\-]*|\d[\w\-]*))*"
)
_PRONOUN = re.compile(r"^(He|She|It|They|His|Her|Its|Their)\b")
_VERB = re.compile(
    r"\s(is|was|are|were|has|had|became|becomes|won|played|plays|directed|wrote|"
    r"founded|formed|starred|starring|served|serves|released|located|born|known|"
    r"based|produced|created|designed|competes|competed|represented|held)\s"
)
_PAREN = re.compile(r"\s*\([^)]*\)")
_YES_NO_START = frozenset(
    "is are was were do does did can could has have had will would should".split()
)


def tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def content_tokens(text: str) -> list[str]:
    return [t for t in tokens(text) if t not in _STOPWORDS]


@dataclass(slots=True)
class ToolInput:
    """What a tool sees: the question, the document, and upstream outputs by tag."""

    question: str
    paragraphs: list[Paragraph]
    upstream: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolOutput:
    tag: str
    payload: Any
    tokens: int = 0


Tool = Callable[[ToolInput, LLM | None], Awaitable[ToolOutput]]


# -- search -----------------------------------------------------------------------------------


def _title_core(title: str) -> str:
    return _PAREN.sub("", title).strip()


def _title_in(title: str, text: str) -> bool:
    core = _title_core(title).lower()
    return bool(core) and re.search(r"\b" + re.escape(core) + r"\b", text.lower()) is not None


def search_paragraphs(question: str, paragraphs: Sequence[Paragraph], *,
                      extra_terms: Sequence[str] = (), k: int = SEARCH_TOP_K
                      ) -> list[dict[str, Any]]:
    if not paragraphs:
        return []
    from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]  # numpy: only search pays

    corpus = [content_tokens(p.title + " " + p.text) or ["_"] for p in paragraphs]
    query = content_tokens(question) + [t for t in extra_terms if t not in _STOPWORDS]
    scores = BM25Okapi(corpus).get_scores(query) if query else [0.0] * len(paragraphs)
    ranked = []
    for i, (para, score) in enumerate(zip(paragraphs, scores, strict=True)):
        bonus = 5.0 if _title_in(para.title, question) else 0.0
        ranked.append((float(score) + bonus, -i, para))
    ranked.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [
        {"title": para.title, "sentences": list(para.sentences), "score": round(score, 4)}
        for score, _, para in ranked[:k]
    ]


async def tool_search(inp: ToolInput, llm: LLM | None) -> ToolOutput:
    extra: list[str] = []
    used = 0
    if llm is not None:
        reply = await llm(
            "You expand search queries. Reply with up to ten keywords, space separated.",
            f"Question: {inp.question}",
        )
        used = reply.tokens
        extra = content_tokens(reply.text)[:10]
    docs = search_paragraphs(inp.question, inp.paragraphs, extra_terms=extra)
    return ToolOutput("search_docs", {"docs": docs, "query_terms": extra}, used)


# -- extract ----------------------------------------------------------------------------------


def _docs_from(inp: ToolInput) -> list[dict[str, Any]]:
    found = inp.upstream.get("search_docs")
    if isinstance(found, dict) and isinstance(found.get("docs"), list):
        return [d for d in found["docs"] if isinstance(d, dict)]
    return [{"title": p.title, "sentences": list(p.sentences), "score": 0.0}
            for p in inp.paragraphs]


def rank_sentences(question: str, docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    sentences: list[tuple[str, int, int, str]] = []
    for rank, doc in enumerate(docs):
        for sid, sentence in enumerate(doc.get("sentences", [])):
            sentences.append((str(doc.get("title", "")), rank, sid, str(sentence).strip()))
    if not sentences:
        return []
    df: Counter[str] = Counter()
    bags = []
    for title, _, _, text in sentences:
        bag = set(content_tokens(title + " " + text))
        bags.append(bag)
        df.update(bag)
    n = len(sentences)
    q = set(content_tokens(question))
    scored: list[dict[str, Any]] = []
    for (title, rank, sid, text), bag in zip(sentences, bags, strict=True):
        overlap = sum(math.log(1 + n / df[t]) for t in q & bag)
        score = overlap + (0.5 if sid == 0 else 0.0) - 0.1 * rank - 0.05 * sid
        scored.append({"title": title, "sent_id": sid, "text": text,
                       "score": round(score, 4)})
    scored.sort(key=lambda s: s["score"], reverse=True)
    return scored


async def tool_extract(inp: ToolInput, llm: LLM | None) -> ToolOutput:
    ranked = rank_sentences(inp.question, _docs_from(inp))
    chosen = ranked[:EXTRACT_TOP_N]
    used = 0
    if llm is not None and ranked:
        pool = ranked[: 2 * EXTRACT_TOP_N]
        listing = "\n".join(f"{i}. [{s['title']}] {s['text']}" for i, s in enumerate(pool))
        reply = await llm(
            "You select the sentences needed to answer a question. Reply with their numbers.",
            f"Question: {inp.question}\nSentences:\n{listing}",
        )
        used = reply.tokens
        picked = [int(x) for x in re.findall(r"\d+", reply.text) if int(x) < len(pool)]
        if picked:
            chosen = [pool[i] for i in dict.fromkeys(picked)]
    return ToolOutput("sentences", {"sentences": chosen}, used)


# -- triple -----------------------------------------------------------------------------------


def sentence_triples(title: str, sentence: str) -> list[dict[str, str]]:
    text = _PRONOUN.sub(_title_core(title), sentence.strip(), count=1)
    match = _VERB.search(" " + text + " ")
    if match is None:
        return [{"s": _title_core(title), "r": "mentions", "o": text, "title": title}]
    start, end = match.start() - 1, match.end() - 1
    subject = text[: max(start, 0)].strip(" ,") or _title_core(title)
    obj = text[end:].strip().rstrip(".")
    return [{"s": subject, "r": match.group(1), "o": obj, "title": title}]


def _sentences_from(inp: ToolInput) -> list[dict[str, Any]]:
    found = inp.upstream.get("sentences")
    if isinstance(found, dict) and isinstance(found.get("sentences"), list):
        return [s for s in found["sentences"] if isinstance(s, dict)]
    return rank_sentences(inp.question, _docs_from(inp))[:EXTRACT_TOP_N]


async def tool_triple(inp: ToolInput, llm: LLM | None) -> ToolOutput:
    sentences = _sentences_from(inp)
    triples = [t for s in sentences
               for t in sentence_triples(str(s.get("title", "")), str(s.get("text", "")))]
    used = 0
    if llm is not None and sentences:
        listing = "\n".join(f"[{s.get('title', '')}] {s.get('text', '')}" for s in sentences)
        reply = await llm(
            "You extract facts. Reply with one 'subject | relation | object' line per fact.",
            listing,
        )
        used = reply.tokens
        parsed = [[part.strip() for part in line.split("|")] for line in reply.text.splitlines()]
        from_llm = [{"s": p[0], "r": p[1], "o": p[2], "title": ""}
                    for p in parsed if len(p) == 3 and all(p)]
        if from_llm:
            triples = from_llm
    return ToolOutput("triples", {"triples": triples}, used)


# -- reason -----------------------------------------------------------------------------------


def _entities(question: str, titles: Sequence[str]) -> list[str]:
    found: list[tuple[int, str]] = []
    for title in dict.fromkeys(_title_core(t) for t in titles):
        match = re.search(r"\b" + re.escape(title.lower()) + r"\b", question.lower())
        if title and match:
            found.append((match.start(), title))
    found.sort()
    result: list[str] = []
    for _, title in found:
        if not any(title.lower() in r.lower() for r in result):
            result = [r for r in result if r.lower() not in title.lower()] + [title]
    return result


def _entity_text(entity: str, paragraphs: Sequence[Paragraph], n: int = 3) -> str:
    for para in paragraphs:
        if _title_core(para.title).lower() == entity.lower():
            return " ".join(para.sentences[:n])
    return ""


def _stem(token: str) -> str:
    return token[:5]


def _answer_yes_no(question: str, paragraphs: Sequence[Paragraph]) -> str:
    entities = _entities(question, [p.title for p in paragraphs])[:2]
    if len(entities) < 2:
        return "yes"
    texts = [_entity_text(e, paragraphs) for e in entities]
    q = question.lower()
    if "same" in q:
        caps = []
        for entity, text in zip(entities, texts, strict=True):
            names = set(tokens(entity))
            caps.append({w.lower() for w in re.findall(r"\b[A-Z][a-z]+\b", text)
                         if w.lower() not in names and w.lower() not in _STOPWORDS})
        return "yes" if caps[0] & caps[1] else "no"
    tail = q.split(" both ", 1)[1] if " both " in q else q
    predicate = {_stem(t) for t in content_tokens(tail)} - {
        _stem(t) for e in entities for t in tokens(e)}
    if not predicate:
        return "yes"
    for text in texts:
        have = {_stem(t) for t in tokens(text)}
        if len(predicate & have) < max(1, len(predicate) // 2):
            return "no"
    return "yes"


def _first_year(text: str) -> int | None:
    match = _YEAR.search(text)
    return int(match.group(1)) if match else None


def _answer_choice(question: str, options: list[str], paragraphs: Sequence[Paragraph]) -> str:
    texts = []
    for option in options:
        text = _entity_text(option, paragraphs)
        if not text:
            text = " ".join(p.text for p in paragraphs if _title_in(option, p.text))[:600]
        texts.append(text)
    q = question.lower()
    temporal = {"older": min, "earlier": min, "first": min, "younger": max, "later": max}
    for word, pick in temporal.items():
        if word in q:
            years = [(y, o) for o, t in zip(options, texts, strict=True)
                     if (y := _first_year(t)) is not None]
            if years:
                return pick(years)[1]
    head = q.rsplit(",", 1)[0]
    predicate = {_stem(t) for t in content_tokens(head)}
    scores = [len(predicate & {_stem(t) for t in tokens(t_)}) for t_ in texts]
    return options[max(range(len(options)), key=lambda i: (scores[i], -i))]


def _choice_options(question: str) -> list[str]:
    match = re.search(r",\s*([^,?]+?)\s+or\s+([^,?]+?)\s*\??\s*$", question)
    if match is None:
        return []
    return [match.group(1).strip(), match.group(2).strip()]


def _expected_kind(question: str) -> str:
    q = question.lower()
    if re.search(r"\b(what|which) year\b|\bwhen\b|\bin what year\b", q):
        return "year"
    if re.search(r"\bhow (many|much)\b|\bpopulation\b", q):
        return "number"
    if re.search(r"\bwho\b|\bwhom\b", q):
        return "name"
    return "span"


def _candidates(kind: str, text: str) -> list[str]:
    if kind == "year":
        return _YEAR.findall(text)
    if kind == "number":
        return [m for m in _NUMBER.findall(text) if not _YEAR.fullmatch(m)] + _NUMBER.findall(
            text)
    spans = [s.strip(" .,'’") for s in _CAP_SPAN.findall(text)]
    spans = [s for s in spans if len(s) > 1]
    if kind == "name":
        spans = [s for s in spans if not any(ch.isdigit() for ch in s)]
        spans = [s for s in spans if len(s.split()) >= 2] + spans
    return [s for s in spans if s]


def _answer_span(question: str, evidence: Sequence[dict[str, Any]]) -> str:
    kind = _expected_kind(question)
    q_tokens = set(tokens(question))
    q_content = set(content_tokens(question))
    # Bridge questions name the first hop; the answer usually sits in the other paragraph.
    hop2 = [s for s in evidence if not _title_in(str(s.get("title", "")), question)]
    best: tuple[float, str] | None = None
    for rank, sentence in enumerate([*hop2, *evidence][:8]):
        text = str(sentence.get("text", ""))
        words = tokens(text)
        anchors = [i for i, w in enumerate(words) if w in q_content]
        for cand in _candidates(kind, text):
            cand_tokens = tokens(cand)
            if not cand_tokens or set(cand_tokens) <= q_tokens | _STOPWORDS:
                continue
            try:
                where = words.index(cand_tokens[0])
            except ValueError:
                where = 0
            near = max((1 / (1 + abs(where - a)) for a in anchors), default=0.0)
            score = near - 0.15 * rank
            if best is None or score > best[0]:
                best = (score, cand)
    if best is not None:
        return best[1]
    for sentence in evidence:
        title = _title_core(str(sentence.get("title", "")))
        if title and not set(tokens(title)) <= q_tokens:
            return title
    return ""


def _evidence(inp: ToolInput) -> list[dict[str, Any]]:
    sentences = _sentences_from(inp)
    found = inp.upstream.get("triples")
    if isinstance(found, dict) and isinstance(found.get("triples"), list):
        known = {str(s.get("text", "")) for s in sentences}
        for t in found["triples"]:
            if isinstance(t, dict):
                text = f"{t.get('s', '')} {t.get('r', '')} {t.get('o', '')}"
                if not any(str(t.get("o", "")) in k for k in known):
                    sentences.append({"title": t.get("title", ""), "text": text})
    return sentences


def reason_answer(question: str, paragraphs: Sequence[Paragraph],
                  evidence: Sequence[dict[str, Any]]) -> str:
    first = (tokens(question) or [""])[0]
    options = _choice_options(question)
    if first in _YES_NO_START and not options:
        return _answer_yes_no(question, paragraphs)
    if options:
        return _answer_choice(question, options, paragraphs)
    return _answer_span(question, evidence)


async def tool_reason(inp: ToolInput, llm: LLM | None) -> ToolOutput:
    evidence = _evidence(inp)
    answer = reason_answer(inp.question, inp.paragraphs, evidence)
    used = 0
    if llm is not None:
        listing = "\n".join(f"- {s.get('text', '')}" for s in evidence)
        reply: LLMReply = await llm(
            "Answer the question with a short span (a few words, or yes/no). "
            "Reply with the answer only.",
            f"Question: {inp.question}\nEvidence:\n{listing}",
        )
        used = reply.tokens
        text = re.sub(r"^\s*answer\s*:\s*", "", reply.text.strip(), flags=re.IGNORECASE)
        text = text.strip().splitlines()[0].strip() if text.strip() else ""
        if text:
            answer = text
    return ToolOutput("final_answer", answer, used)


TOOLS: dict[str, Tool] = {
    "search": tool_search,
    "extract": tool_extract,
    "triple": tool_triple,
    "reason": tool_reason,
}


def prepare(name: str) -> None:
    """Import what tool ``name`` needs, so start-up cost stays out of the run's clock."""
    if name == "search":
        import rank_bm25  # noqa: F401


async def run_tool(name: str, inp: ToolInput, llm: LLM | None = None) -> ToolOutput:
    """Run the tool ``name``; raises ``KeyError`` for an unknown tool."""
    return await TOOLS[name](inp, llm)
