"""End to end: the shipped default agents on the embedded local model, through a real Gaia."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from agents.services import agents_import

DEFAULTS = Path(__file__).resolve().parents[2] / "agents" / "defaults.yaml"


@pytest.fixture
def default_agents(transactional_db):
    agents_import(data=yaml.safe_load(DEFAULTS.read_text()))


def ask_gaia(server, key, question, *, stream):
    body = {"model": "gaia", "stream": stream,
            "messages": [{"role": "user", "content": question}]}
    headers = {"Authorization": f"Bearer {key}"}
    if not stream:
        r = httpx.post(f"{server.v1}/chat/completions", json=body, headers=headers, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"]
    parts = []
    with httpx.stream("POST", f"{server.v1}/chat/completions", json=body, headers=headers,
                      timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                for choice in chunk["choices"]:
                    parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_gaia_names_paris(gaia_server, default_agents, api_key, stream):
    answer = ask_gaia(gaia_server, api_key, "What is the capital of France?", stream=stream)
    assert "Paris" in answer
    assert len(answer.split()) >= 3  # a sentence, not a bare word


@pytest.mark.django_db(transaction=True)
def test_health_answers_fast_during_a_long_generation(gaia_server, default_agents, api_key):
    result: dict[str, str] = {}

    def generate():
        body = {"model": "gaia", "max_tokens": 200, "messages": [
            {"role": "user", "content": "Write a long story about a dragon who cooks."}]}
        r = httpx.post(f"{gaia_server.v1}/chat/completions", json=body,
                       headers={"Authorization": f"Bearer {api_key}"}, timeout=120)
        result["text"] = r.json()["choices"][0]["message"]["content"]

    worker = threading.Thread(target=generate)
    worker.start()
    time.sleep(0.5)
    latencies = []
    with httpx.Client(timeout=10) as client:
        while worker.is_alive() and len(latencies) < 200:
            t0 = time.monotonic()
            assert client.get(f"{gaia_server.url}/health").status_code == 200
            latencies.append(time.monotonic() - t0)
            time.sleep(0.02)
    worker.join()
    assert result["text"]
    assert len(latencies) >= 5, "the generation ended before it could be measured"
    latencies.sort()
    # Generous (a busy 2-core machine saw a 70 ms median against the old 50 ms bound): what
    # this guards is that generation runs off the event loop, where /health would wait for
    # the whole generation (seconds). Its speed is a figure, not a test: scripts/perf/.
    assert latencies[len(latencies) // 2] < 1.0
    assert latencies[-1] < 0.5


@pytest.mark.django_db(transaction=True)
def test_gaia_answers_from_its_knowledge_base(gaia_server, default_agents, api_key,
                                              knowledge_indexer):
    """The embedded model, given the passage only the uploaded document holds, answers with
    it (agents.knowledge puts the passage in its prompt)."""
    from agents import services as knowledge
    from agents.models import Agent, KnowledgeBase, KnowledgeDocument

    kb = KnowledgeBase.objects.create(slug="town", name="Town facts", top_k=1)
    doc = knowledge.knowledge_document_add(
        knowledge_base=kb, name="town.md",
        data=b"# Mayor\n\nThe mayor of Quillton is Odalys Brightwater.\n\n"
             b"# River\n\nThe river that runs through Quillton is the Esk.\n")
    deadline = time.monotonic() + 60
    while doc.status != KnowledgeDocument.Status.READY and time.monotonic() < deadline:
        time.sleep(0.05)
        doc.refresh_from_db()
    assert doc.status == KnowledgeDocument.Status.READY, doc.error
    Agent.objects.get(slug="gaia").knowledge_bases.add(kb)
    answer = ask_gaia(gaia_server, api_key, "Who is the mayor of Quillton?", stream=False)
    assert "Brightwater" in answer
