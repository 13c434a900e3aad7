"""The manual (``docs/``, MkDocs) builds strictly, is complete and offline, and the README stays
the front door (issue 38)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gaia_site.cli", "docs", "build", "--site-dir", str(site)]
        if config == DOCS / "mkdocs.yml" else
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("manual") / "site"
    done = build(DOCS / "mkdocs.yml", out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_every_page_is_built_and_the_api_reference_comes_from_the_schema(site: Path) -> None:
    sources = sorted(p.relative_to(DOCS / "manual").with_suffix("")
                     for p in (DOCS / "manual").rglob("*.md"))
    for page in [*sources, Path("reference/api")]:
        html = site / ("index.html" if page.name == "index" else page / "index.html")
        assert html.exists(), page
    api = (site / "reference" / "api" / "index.html").read_text()
    for path in ("/api/v1/threads", "/api/v1/agents/{slug}/pause", "/api/v1/benchmarks/runs"):
        assert path in api, path


def test_the_site_loads_nothing_from_another_host(site: Path) -> None:
    outside = re.compile(r"""(?:src|href)=["'](?:https?:)?//""")
    for page in site.rglob("*.html"):
        text = page.read_text()
        # a link a reader follows is fine; a script, style sheet or font from a CDN is not
        for tag in re.findall(r"<(?:script|link|img)\b[^>]*>", text):
            assert not outside.search(tag), (page, tag)


def test_a_broken_link_or_an_orphan_page_fails_the_build(tmp_path: Path) -> None:
    for breakage in ("orphan", "link"):
        copy = tmp_path / breakage
        shutil.copytree(DOCS, copy, ignore=shutil.ignore_patterns("__pycache__"))
        if breakage == "orphan":
            (copy / "manual" / "stray.md").write_text("# Not in the navigation\n")
        else:
            with (copy / "manual" / "security.md").open("a") as f:
                f.write("\nSee [nowhere](no-such-page.md).\n")
        done = build(copy / "mkdocs.yml", tmp_path / f"site-{breakage}")
        assert done.returncode != 0, breakage
        assert ("stray.md" if breakage == "orphan" else "no-such-page.md") in done.stderr


def test_the_readme_is_the_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for page in re.findall(r"\]\((docs/manual/[^)#]+)", readme):
        assert (ROOT / page).exists(), page
