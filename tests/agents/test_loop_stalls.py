"""Nothing a client sends may hold the event loop (issue 35, items 1 and 2).

Each attack runs against a real server process while an independent poller (a thread of this
process with its own connection) asks ``/health`` and another agent's chat one after the
other, every 50 ms, and keeps the worst latency of each: both stay under 250 ms (the issue's
generous bound), and the attack gets a clear answer. On 026b68b the calculator's
``round(1, -10**7)`` held the server 8 s, a round of ``factorial(1000)**1000`` calls a second
a call, and knowledge retrieval with a long message or a long ``knowledge_search`` query
seconds to minutes. Then the bounds themselves, without a server.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agents.kernel import bm25
from agents.tools.builtins import (
    MAX_FACTORIAL,
    MAX_ROUND_DIGITS,
    CalculatorError,
    calculate,
)
from tests.poller import polled, repeat_for

# The words of the knowledge base, and of the attackers' messages (so that every passage is a
# candidate for every long query, as in a real base: the common words of its language)
VOCABULARY = [f"{a}{b}{c}" for a in ("bri", "cal", "dun", "fer", "gol", "hav", "kir", "lom")
              for b in ("ad", "en", "ix", "or", "ul", "ym") for c in ("bek", "dor", "fip",
                                                                       "gan", "lut", "mor",
                                                                       "nep", "qua", "rid",
                                                                       "sov")]


def words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCABULARY) for _ in range(count))


def chat(server: Any, key: str, model: str, content: str) -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", timeout=120,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": content}]})


@pytest.fixture
def server(gaia_server_factory: Any, make_agent: Any) -> Any:
    make_agent(slug="bystander", provider__options={"reply": "Here."})
    return gaia_server_factory()


def answer(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text[:500]
    return response.json()["choices"][0]["message"]["content"]


# -- the calculator --------------------------------------------------------------------------


def calculator_agent(make_agent: Any, slug: str, *expressions: str) -> None:
    make_agent(slug=slug, tools=["calculator"], provider__options={"script": [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": e}}
                        for e in expressions]},
        {"reply": "The calculator said: {results}"}]})


@pytest.mark.django_db(transaction=True)
def test_a_huge_round_holds_no_one(server: Any, api_key: str, make_agent: Any) -> None:
    calculator_agent(make_agent, "rounder", "round(1, -10**7)")
    with polled(server, api_key):
        replies = repeat_for(1.0, lambda: answer(chat(server, api_key, "rounder", "Go.")))
    assert all(f"round's digits are a whole number from -{MAX_ROUND_DIGITS}" in r
               for r in replies), replies[0]


@pytest.mark.django_db(transaction=True)
def test_a_round_of_huge_powers_holds_no_one(server: Any, api_key: str,
                                             make_agent: Any) -> None:
    calculator_agent(make_agent, "powers", *["factorial(1000)**1000"] * 4,
                     "(10**300)**1000", "2 * 3")
    with polled(server, api_key):
        replies = repeat_for(1.0, lambda: answer(chat(server, api_key, "powers", "Go.")))
    reply = replies[0]
    assert reply.count(f"factorial takes one whole number from 0 to {MAX_FACTORIAL}") == 4
    assert "calculator: the result is out of range" in reply
    assert reply.endswith("; 6")


# -- knowledge retrieval ---------------------------------------------------------------------


@pytest.fixture
def knowledge(make_agent: Any) -> Callable[..., Any]:
    """An agent with a knowledge base of 2,000 passages (of :data:`VOCABULARY`'s words, and
    one about Quillton), indexed as a finished upload leaves them."""
    from agents.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument

    kb = KnowledgeBase.objects.create(slug="lore", name="Lore", index_version="v1", top_k=3)
    doc = KnowledgeDocument.objects.create(knowledge_base=kb, name="lore.txt", kind="text",
                                           data=b"...", status="ready", chunk_count=2001)
    texts = [words(60, seed) for seed in range(2000)]
    texts[1234] = "Quillton holds the Zorblax festival on the ninth of Brumaire."
    KnowledgeChunk.objects.bulk_create(
        KnowledgeChunk(knowledge_base=kb, document=doc, seq=i, source=f"lore.txt#{i}",
                       text=text) for i, text in enumerate(texts))

    def make(slug: str, **kwargs: Any) -> Any:
        agent = make_agent(slug=slug, **kwargs)
        agent.knowledge_bases.add(kb)
        return agent

    return make


def warm(server: Any, key: str, model: str) -> None:
    """One ordinary question first: the base's index is built (once per upload, not per
    request: not what a client controls), and the process's first upstream call made."""
    assert answer(chat(server, key, model, "When is the Zorblax festival?"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("size", [20_000, 100_000, 1_000_000])
def test_a_long_message_to_an_agent_with_knowledge_holds_no_one(
        server: Any, api_key: str, knowledge: Callable[..., Any], size: int) -> None:
    """The agent's window is the factory's 8,192 tokens: 20 KB fits and is answered with the
    passages its question finds; 100 KB and 1 MB are searched first (as before the fix, when
    the search held the server 12 s and 25 s) and then refused, the window being full."""
    knowledge("librarian", provider__options={"echo": "system"})
    warm(server, api_key, "librarian")
    # the base's own words, and many the base has never seen, then the question
    message = (words(size // 18, seed=7) + " " + " ".join(
        f"zq{i}" for i in range(size // 12)))[:size - 40] + " When is the Zorblax festival?"

    def attack() -> httpx.Response:
        return chat(server, api_key, "librarian", message)

    with polled(server, api_key):
        replies = repeat_for(1.0, attack)
    if size < 30_000:
        assert "(lore.txt#1234) Quillton holds the Zorblax festival" in answer(replies[0])
    else:
        assert replies[0].status_code == 400, replies[0].text[:300]
        assert replies[0].json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.django_db(transaction=True)
def test_a_long_knowledge_search_holds_no_one(server: Any, api_key: str,
                                              knowledge: Callable[..., Any]) -> None:
    """The model (a real upstream in another thread: its own work is not Gaia's) searches
    with a 125,000-word query, as a user's message could tell it to: 31 s before."""
    import json

    from tests.fakes import Reply, ToolCallSpec
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    query = json.dumps({"query": words(125_000, seed=11) + " Zorblax"})
    with FakeOpenAIUpstream(tokens=2) as upstream:
        upstream.script(Reply(text="Warm."), *[reply for _ in range(30) for reply in (
            Reply(tool_calls=[ToolCallSpec("knowledge_search", query)]), Reply(text="Found."))])
        knowledge("searcher", tools=["knowledge_search"], provider__kind="openai",
                  provider__base_url=upstream.base_url, provider__name="searcher-upstream",
                  max_input_tokens=1_000_000)
        warm(server, api_key, "searcher")  # the index, and the first upstream connection
        with polled(server, api_key):
            replies = repeat_for(1.0, lambda: answer(chat(server, api_key, "searcher", "Go.")))
        searched = upstream.requests[2].body["messages"][-1]
    assert replies[0] == "Found."
    assert searched["role"] == "tool"
    assert searched["content"].startswith("[1] (lore.txt#")  # passages of the base's words


# -- what a conversation says of itself (its title, a coding client's workspace) ------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("message", [
    "<a>" * 8000,  # an opening tag never closed, 8,000 times: 10.7 s before
    "<userRequest>" * 2000 + "hi",  # 26 KB: 5.4 s before
    "<environment_context>" + "<cwd>" * 5000 + "\n" * 20000,
    "<workspace_info>following folders:" + "\n" * 20000 + "x",
])
def test_a_title_or_workspace_made_hard_to_find_holds_no_one(server: Any, api_key: str,
                                                             make_agent: Any,
                                                             message: str) -> None:
    """A new thread's title and workspace are read from its first messages on the event loop;
    the patterns were quadratic or worse on text made for them."""
    make_agent(slug="titled", provider__options={"reply": "Titled."})
    with polled(server, api_key):
        replies = repeat_for(1.0, lambda: answer(chat(server, api_key, "titled", message)))
    assert replies[0] == "Titled."


def test_titles_and_workspaces_read_as_the_patterns_did() -> None:
    """The linear readers find what the regular expressions they replace found, on random
    texts of the pieces clients send (tags without a "<" among their attributes)."""
    import re

    from agents.kernel import llm
    from agents.turns.describe import extract_workspace_root, thread_title

    workspace = re.compile(r"<workspace_info>.*?following folders:\s*\n\s*-\s*([^\s\n]+)",
                           re.DOTALL)
    codex = re.compile(r"<environment_context>.*?<cwd>\s*([^<\n]+?)\s*</cwd>", re.DOTALL)
    claude = re.compile(r"^\s*(?:-\s*)?(?:Primary )?[Ww]orking directory:\s*(\S.*?)\s*$",
                        re.MULTILINE)
    scaffold = re.compile(r"<([A-Za-z][\w-]*)(?:\s[^>]*)?>.*?</\1>", re.DOTALL)
    copilot = re.compile(r"<userRequest>\s*(.*?)\s*</userRequest>", re.DOTALL)

    def root(text: str, system: str) -> str | None:
        match = workspace.search(text) or codex.search(text) or claude.search(system)
        return match.group(1).strip() if match else None

    def title(text: str) -> str:
        request = copilot.search(text)
        words = " ".join((request.group(1) if request else scaffold.sub(" ", text)).split())
        if len(words) <= 80:
            return words
        return (words[:80].rsplit(" ", 1)[0] or words[:80]) + "…"

    pieces = ["<workspace_info>", "following folders:", "\n", " ", "- ", "-", "/home/x",
              "<environment_context>", "<cwd>", "</cwd>", " /p ", "<", ">", "\t", "é",
              "Working directory:", "working directory: ", "Primary ", "  - Primary working "
              "directory:", "<a>", "</a>", "<b x=1>", "</b>", "<system-reminder>", "</",
              "</system-reminder>", "<userRequest>", "</userRequest>", "hello", "x" * 30]
    rng = random.Random(5)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        user = llm.Message(role="user", parts=(llm.TextPart(text),))
        assert extract_workspace_root([user], text) == root(text, text), text
        assert thread_title([user]) == title(text), text


# -- the bounds, without a server ------------------------------------------------------------


@pytest.mark.parametrize(("expression", "refusal"), [
    ("round(1, -10**7)", "round's digits are a whole number from -400 to 400"),
    ("round(5, 10**9)", "round's digits are a whole number"),
    ("factorial(1000)**1000", "factorial takes one whole number from 0 to 166"),
    ("factorial(167)", "factorial takes one whole number from 0 to 166"),
    ("floor(1e305)", "the result is out of range"),
])
def test_every_step_of_the_calculator_is_bounded(expression: str, refusal: str) -> None:
    """Each of these took from a second to minutes before, or returned a number of thousands
    of digits that later steps would grow (factorial(1000) is 2,568 digits)."""
    with pytest.raises(CalculatorError) as refused:
        calculate(expression)
    assert refusal in str(refused.value)


@pytest.mark.parametrize(("expression", "value"), [
    ("2 * (3 + 4) ** 2", 98), ("round(2.675, 2)", 2.67), ("round(123456, -3)", 123000),
    ("factorial(20)", 2432902008176640000), ("2**996 // 2**995", 2), ("sqrt(16) / 2", 2.0),
    ("-" * 499 + "1", -1), ("1e305 / 1e10", 1e295),
])
def test_ordinary_arithmetic_still_works(expression: str, value: float) -> None:
    assert calculate(expression) == value


def test_a_query_is_read_within_its_bound() -> None:
    """A 125,000-word query is read by its first and last few thousand characters, and
    scores at most :data:`agents.kernel.bm25.MAX_QUERY_TERMS` terms: the rarest the index holds."""
    long = words(125_000, seed=3)
    assert sum(bm25.query_terms(long).values()) < bm25.MAX_QUERY_CHARS // 8
    index = bm25.Index([words(40, seed) for seed in range(300)]
                       + ["the zorblax festival of quillton"])
    chosen = index._chosen(long + " " + " ".join(VOCABULARY) + " zorblax")
    assert len(chosen) == bm25.MAX_QUERY_TERMS
    assert index._terms["zorblax"] in chosen  # the rarest term is kept
    assert index.top(long + " quillton zorblax festival", 1)[0][0] == 300


def test_bm25_scores_are_bm25_plus() -> None:
    """The index's scores are rank-bm25's BM25Plus scores (the ranking it replaced), the
    repeated terms of a query counted as often as they occur."""
    from rank_bm25 import BM25Plus

    texts = [words(30, seed) for seed in range(50)] + ["zorblax festival"]
    index = bm25.Index(texts)
    reference = BM25Plus([bm25.tokens(t) for t in texts])
    query = f"{VOCABULARY[0]} {VOCABULARY[0]} {VOCABULARY[5]} zorblax unknownword"
    expected = reference.get_scores(bm25.tokens(query))
    assert index.scores(query) == pytest.approx(list(expected), abs=1e-9)
    once = reference.get_scores(sorted(set(bm25.tokens(query))))  # top: each term once
    best = max(range(len(texts)), key=lambda i: (once[i], -i))
    assert index.top(query, 1) == [(best, pytest.approx(once[best]))]
    assert index.overlap("zorblax festival")[-1] == 2
