"""The mesh package type-checks strictly (house style: `mesh` is typed throughout)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_mesh_passes_mypy_strict():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "mesh"],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    assert result.returncode == 0, result.stdout + result.stderr
