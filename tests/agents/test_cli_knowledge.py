"""``gaia agents import`` without a broker (SQLite mode: no ``REDIS_URL``) indexes the
knowledge documents it adds before it returns, and those an earlier run left queued: the
embedded worker that indexes them is the command's own, and it used to exit with the work."""

from __future__ import annotations

import pytest
import yaml

from agents.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument
from tests.agents.test_cli import gaia

pytestmark = pytest.mark.django_db(transaction=True)

GUIDE = "".join(f"## Section {i}\n\n" + "The quick brown fox jumps over the lazy dog. " * 40
                + "\n\n" for i in range(120))


def test_gaia_agents_import_indexes_its_documents_without_a_broker(tmp_path):
    guide = tmp_path / "guide.md"
    guide.write_text(GUIDE)
    notes = tmp_path / "notes.txt"
    notes.write_text("Opening hours: nine to five.\n" * 200)
    config = tmp_path / "agents.yaml"
    config.write_text(yaml.safe_dump({
        "providers": [{"name": "echo", "kind": "fake", "options": {"reply": "Hello!"}}],
        "knowledge_bases": [{"slug": "handbook", "documents": [str(guide)]}],
        "agents": [{"slug": "helper", "provider": "echo", "knowledge_bases": ["handbook"]}],
    }))
    first = gaia("agents", "import", str(config), tmp_path=tmp_path, REDIS_URL="")
    assert first.returncode == 0, first.stderr
    doc = KnowledgeDocument.objects.get(name="guide.md")
    assert (doc.status, doc.error) == ("ready", "")
    assert doc.chunk_count > 10
    assert KnowledgeChunk.objects.filter(document=doc).count() == doc.chunk_count
    assert "ready     document:guide.md" in first.stdout

    # a document an earlier run left queued is indexed by the next import
    left = KnowledgeDocument.objects.create(
        knowledge_base=KnowledgeBase.objects.get(slug="handbook"), name="notes.txt",
        kind="text", data=notes.read_bytes())
    assert left.status == "queued"
    again = gaia("agents", "import", str(config), tmp_path=tmp_path, REDIS_URL="")
    assert again.returncode == 0, again.stderr
    left.refresh_from_db()
    assert (left.status, left.chunk_count > 0) == ("ready", True)
