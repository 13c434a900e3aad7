"""Blocks of the README and the manual that the suite runs: a fenced block after an HTML
comment marker (``<!-- client:codex -->``) in ``README.md`` or a page of ``docs/manual/``.
Each marker may appear once in all of them, so a snippet has no twin to drift from."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs" / "manual").rglob("*.md"))]


def block(marker: str) -> str:
    """The fenced block after ``<!-- MARKER -->`` (the one place it appears)."""
    pattern = re.compile(rf"<!-- {re.escape(marker)} -->\s*```\w*\n(.*?)```", re.DOTALL)
    found = [(path, m.group(1)) for path in documents()
             for m in pattern.finditer(path.read_text())]
    assert found, f"no <!-- {marker} --> block in the README or the manual"
    assert len(found) == 1, f"<!-- {marker} --> appears {len(found)} times: {[p for p, _ in found]}"
    return found[0][1]
