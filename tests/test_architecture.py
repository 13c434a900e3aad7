"""The house's layers hold (../shared/STYLE.md, "Layers that stay true"): the import contracts in
pyproject.toml pass ``lint-imports`` (import-linter), a broken one fails it, and no source file
outgrows the size a reader takes in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
MAX_LINES = 500
SOURCES = ("agents", "openai_api", "benchmarks", "mesh", "gaia_site", "scripts")


def lint_imports(cwd: Path, *args: str, pythonpath: Path | None = None
                 ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath or cwd)}
    return subprocess.run([LINT_IMPORTS, "--no-cache", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_import_contracts_are_kept() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
    for contract in ("mesh is a library of its own", "agents (the core) imports no interface",
                     "selectors only read", "services do not start turns",
                     "the turn runtime imports no interface", "through the one door",
                     "no import circles"):
        assert contract in done.stdout, contract


def test_a_broken_contract_fails_the_check(tmp_path: Path) -> None:
    """The same kinds of contract, on a tiny project that breaks each: the instrument sees it."""
    for name in ("core", "iface"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "core" / "selectors.py").write_text("from core import services\n")
    (tmp_path / "core" / "services.py").write_text("from core import selectors\n"
                                                   "import iface.apis\n")
    (tmp_path / "iface" / "apis.py").write_text("import core.services\n")
    (tmp_path / "pyproject.toml").write_text('''
[tool.importlinter]
root_packages = ["core", "iface"]

[[tool.importlinter.contracts]]
name = "core imports no interface"
type = "forbidden"
source_modules = ["core"]
forbidden_modules = ["iface"]

[[tool.importlinter.contracts]]
name = "no circles"
type = "acyclic_siblings"
ancestors = ["core"]
''')
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "core imports no interface BROKEN" in done.stdout, done.stdout
    assert "no circles BROKEN" in done.stdout, done.stdout


def test_no_source_file_is_over_500_lines() -> None:
    long = {}
    for top in SOURCES:
        for path in (ROOT / top).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            lines = path.read_text().count("\n")
            if lines > MAX_LINES:
                long[str(path.relative_to(ROOT))] = lines
    assert long == {}
