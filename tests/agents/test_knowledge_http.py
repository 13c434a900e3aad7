"""Knowledge bases: uploads (text, Markdown, PDF) indexed in the background (the embedded
worker thread without Redis, a real Celery worker with it), passages retrieved for each
turn and given to the model with their sources, shown in the reply's metadata and the feed."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from agents import services
from agents.kernel.exceptions import InvalidRequest
from agents.models import KnowledgeBase, KnowledgeDocument, Message, Thread
from agents.services import documents

LORE = """# Quillton

Quillton is a small river town known for its bridges and its bakeries.

## Festivals

The Zorblax festival is held every year on the ninth of Brumaire, when the bakers of
Quillton parade a giant loaf across the old stone bridge.

## Trade

Quillton trades wool, barley and slate with the towns upriver.
"""


def tiny_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF with one line of Helvetica text per page."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>",
               "<< /Type /Pages /Kids [" + " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
               + f"] /Count {len(pages)} >>"]
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                       f"{4 + 2 * i} 0 R /Resources << /Font << /F1 {font} 0 R >> >> >>")
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = b"%PDF-1.4\n"
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n"
            "%%EOF\n").encode()
    return out


# -- chunking and extraction (no server) ------------------------------------------------------


def test_chunks_are_bounded_and_overlap():
    text = " ".join(f"word{i}" for i in range(300))
    chunks = documents.chunk_text(text, size=100, overlap=30)
    assert all(len(c) <= 100 for c in chunks)
    assert " ".join(chunks[0].split()[-2:]) in chunks[1]  # the tail repeats
    assert chunks[-1].endswith("word299")
    covered = set(" ".join(chunks).split())
    assert covered == set(text.split())


def test_whole_paragraphs_are_packed_while_they_fit():
    text = "First short one.\n\nSecond short one.\n\n" + "long " * 60 + "\n\nLast."
    chunks = documents.chunk_text(text, size=60, overlap=10)
    assert chunks[0] == "First short one. Second short one."
    assert all(len(c) <= 60 for c in chunks)
    assert chunks[-1] == "Last."


def test_markdown_sections_and_pdf_pages_name_their_source():
    sections = documents.document_sections(name="lore.md", kind="markdown",
                                           data=LORE.encode())
    assert [s for s, _ in sections] == ["lore.md § Quillton", "lore.md § Festivals",
                                        "lore.md § Trade"]
    pages = documents.document_sections(name="atlas.pdf", kind="pdf",
                                        data=tiny_pdf(["Page one text", "Moonwells glow"]))
    assert [s for s, _ in pages] == ["atlas.pdf p.1", "atlas.pdf p.2"]
    assert "Moonwells glow" in pages[1][1]
    with pytest.raises(InvalidRequest, match="UTF-8"):
        documents.document_sections(name="x.txt", kind="text", data=b"\xff\xfe\xfa")


@pytest.mark.django_db
def test_bad_uploads_are_refused_before_anything_is_stored():
    kb = KnowledgeBase.objects.create(slug="refuse", name="Refuse")
    for name, data, match in [("a.txt", b"", "empty"), ("b.txt", b"\xff\xfe\xfa", "UTF-8"),
                              ("c.pdf", b"hello", "not a PDF"), ("", b"x", "needs a name")]:
        with pytest.raises(InvalidRequest, match=match):
            services.knowledge_document_add(knowledge_base=kb, name=name, data=data)
    assert not KnowledgeDocument.objects.exists()


# -- over live HTTP, indexed in the background ------------------------------------------------


def wait_indexed(doc: KnowledgeDocument, timeout: float = 60) -> KnowledgeDocument:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc.refresh_from_db()
        if doc.status in (KnowledgeDocument.Status.READY, KnowledgeDocument.Status.ERROR):
            return doc
        time.sleep(0.05)
    raise AssertionError(f"{doc.name} still {doc.status} after {timeout} s")


@pytest.fixture
def librarian(transactional_db: Any, make_agent: Any, knowledge_indexer: str) -> Any:
    kb = KnowledgeBase.objects.create(slug="lore", name="Lore", chunk_chars=200,
                                      chunk_overlap=40, top_k=2)
    filler = "\n\n".join(f"## Note {i}\n\nThe granary ledger {i} lists sacks of grain."
                         for i in range(30))
    docs = [services.knowledge_document_add(knowledge_base=kb, name="lore.md",
                                             data=LORE.encode()),
            services.knowledge_document_add(knowledge_base=kb, name="ledgers.md",
                                             data=filler.encode()),
            services.knowledge_document_add(knowledge_base=kb, name="atlas.pdf", data=tiny_pdf(
                ["Maps of the coast.", "The moonwells of Esk glow violet at midnight."]))]
    for doc in docs:
        assert wait_indexed(doc).status == KnowledgeDocument.Status.READY, doc.error
    agent = make_agent(slug="librarian", provider__options={"echo": "system"},
                       instructions="You answer from the archive.")
    agent.knowledge_bases.add(kb)
    return agent


def chat(server: Any, key: str, text: str, model: str = "librarian") -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": text}]})


@pytest.mark.django_db(transaction=True)
def test_the_passage_only_the_document_holds_reaches_the_model(gaia_server, api_key,
                                                               librarian):
    r = chat(gaia_server, api_key, "When is the Zorblax festival held?")
    assert r.status_code == 200, r.text
    prompt = r.json()["choices"][0]["message"]["content"]  # the fake echoes its system prompt
    assert "ninth of Brumaire" in prompt
    assert "(lore.md § Festivals)" in prompt
    assert "granary ledger" not in prompt  # only the passages that fit
    row = Message.objects.get(response_id=r.json()["id"])
    assert row.passages[0]["source"] == "lore.md § Festivals"
    assert row.passages[0]["knowledge_base"] == "lore"
    assert r.headers["x-gaia-passages"].split(",")[0] == str(row.passages[0]["chunk_id"])
    r = chat(gaia_server, api_key, "Which colour do the moonwells glow?")
    prompt = r.json()["choices"][0]["message"]["content"]
    assert "(atlas.pdf p.2) The moonwells of Esk glow violet at midnight." in prompt


@pytest.mark.django_db(transaction=True)
def test_a_question_nothing_matches_gets_no_passages(gaia_server, api_key, librarian):
    r = chat(gaia_server, api_key, "xyzzy plugh")
    assert "knowledge base" not in r.json()["choices"][0]["message"]["content"]
    assert "x-gaia-passages" not in r.headers
    assert Message.objects.get(response_id=r.json()["id"]).passages is None


@pytest.mark.django_db(transaction=True)
def test_a_new_upload_replaces_the_document_and_the_index(gaia_server, api_key, librarian):
    kb = KnowledgeBase.objects.get(slug="lore")
    doc = services.knowledge_document_add(
        knowledge_base=kb, name="lore.md",
        data=LORE.replace("ninth of Brumaire", "first frost").encode())
    wait_indexed(doc)
    prompt = chat(gaia_server, api_key, "When is the Zorblax festival held?").json()[
        "choices"][0]["message"]["content"]
    assert "first frost" in prompt
    assert "Brumaire" not in prompt


@pytest.mark.django_db(transaction=True)
def test_an_unreadable_pdf_is_an_indexing_error_not_a_crash(knowledge_indexer):
    kb = KnowledgeBase.objects.create(slug="broken", name="Broken")
    doc = services.knowledge_document_add(knowledge_base=kb, name="bad.pdf",
                                           data=b"%PDF-1.4 garbage")
    doc = wait_indexed(doc)
    assert doc.status == KnowledgeDocument.Status.ERROR
    assert "PDF" in doc.error


@pytest.mark.django_db(transaction=True)
def test_upload_through_the_admin(admin_client, knowledge_indexer):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.urls import reverse

    r = admin_client.post(reverse("admin:agents_knowledgebase_add"), {
        "slug": "uploaded", "name": "Uploaded", "description": "", "chunk_chars": 800,
        "chunk_overlap": 100, "top_k": 4,
        "upload": SimpleUploadedFile("notes.txt", b"The kettle is in the blue cupboard."),
        "documents-TOTAL_FORMS": 0, "documents-INITIAL_FORMS": 0})
    assert r.status_code == 302, r.content[:2000]
    doc = wait_indexed(KnowledgeDocument.objects.get(name="notes.txt"))
    assert doc.chunk_count == 1
    bad = admin_client.post(reverse("admin:agents_knowledgebase_add"), {
        "slug": "bad", "name": "Bad", "chunk_chars": 800, "chunk_overlap": 100, "top_k": 4,
        "upload": SimpleUploadedFile("x.txt", b"\xff\xfe\xfa"),
        "documents-TOTAL_FORMS": 0, "documents-INITIAL_FORMS": 0})
    assert bad.status_code == 200
    assert b"UTF-8" in bad.content


@pytest.mark.django_db(transaction=True)
def test_the_feed_shows_indexing_and_the_passages_used(gaia_server, api_key, make_agent,
                                                       knowledge_indexer, feed_listener):
    kb = KnowledgeBase.objects.create(slug="fed", name="Fed")
    doc = services.knowledge_document_add(knowledge_base=kb, name="fed.md", data=LORE.encode())
    ready = feed_listener.wait_for(lambda e: e["event"] == "kb_indexing"
                                   and e["document_id"] == doc.pk and e["status"] == "ready",
                                   timeout=60)
    assert ready["chunks"] >= 3
    assert ready["progress"] == 1
    statuses = [e["status"] for e in feed_listener.named("kb_indexing")
                if e["document_id"] == doc.pk]
    assert statuses[0] == "queued"
    assert "indexing" in statuses
    agent = make_agent(slug="fed-agent", provider__options={"echo": "system"})
    agent.knowledge_bases.add(kb)
    r = chat(gaia_server, api_key, "Zorblax festival?", model="fed-agent")
    used = feed_listener.wait_for(lambda e: e["event"] == "knowledge_used"
                                  and e["response_id"] == r.json()["id"])
    assert used["passages"][0]["source"] == "fed.md § Festivals"
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert thread.messages.get(role="assistant").passages == used["passages"]


def test_yaml_carries_knowledge_bases(transactional_db, tmp_path, knowledge_indexer):
    from agents import services

    path = tmp_path / "faq.md"
    path.write_text("# FAQ\n\nThe office opens at nine.")
    services.agents_import(data={
        "providers": [{"name": "p", "kind": "fake"}],
        "knowledge_bases": [{"slug": "faq", "name": "FAQ", "top_k": 3,
                             "documents": [str(path)]}],
        "agents": [{"slug": "helpdesk", "provider": "p", "knowledge_bases": ["faq"]}]})
    doc = wait_indexed(KnowledgeDocument.objects.get(name="faq.md"))
    assert doc.status == KnowledgeDocument.Status.READY
    exported = services.agents_export()
    assert exported["knowledge_bases"][0]["top_k"] == 3
    assert exported["agents"][0]["knowledge_bases"] == ["faq"]
    with pytest.raises(InvalidRequest, match="unknown knowledge bases"):
        services.agents_import(data={"agents": [{"slug": "helpdesk",
                                                 "knowledge_bases": ["nope"]}]})


@pytest.mark.django_db(transaction=True)
def test_a_team_member_answers_from_its_knowledge_base(gaia_server, api_key, librarian,
                                                       make_agent):
    from agents.models import Team, TeamMember

    lead = make_agent(slug="kb-lead", provider__options={"echo": "system"})
    team = Team.objects.create(slug="archive", display_name="Archive", leader=lead,
                               mode="collaborate")
    TeamMember.objects.create(team=team, agent=librarian, position=0)
    r = chat(gaia_server, api_key, "When is the Zorblax festival held?", model="team/archive")
    assert r.status_code == 200, r.text
    # The member echoed its prompt (with the passage) to the leader, who echoed its own.
    assert "ninth of Brumaire" in r.json()["choices"][0]["message"]["content"]
    inner = Message.objects.get(sender="librarian", internal=True)
    assert inner.passages[0]["source"] == "lore.md § Festivals"
