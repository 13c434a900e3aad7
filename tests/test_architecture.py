"""The house's layers hold (../shared/STYLE.md, "Layers that stay true"): the import contracts in
pyproject.toml pass ``lint-imports`` (import-linter), a broken one fails it, and no file a
reader of the house reads (Python, the pages' scripts and templates, ``scripts/``) outgrows the
size a reader takes in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
MAX_LINES = 500
SOURCES = ("agents", "openai_api", "benchmarks", "mesh", "gaia_site", "scripts", "templates")
SIZED = ("*.py", "*.js", "*.html")  # Python, the pages' scripts, the templates
EVERY_FILE = ("scripts",)  # shell too
SKIPPED = {"migrations", "vendor", "__pycache__"}  # generated, or third-party kept as written


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


def long_files(root: Path) -> dict[str, int]:
    """The files under ``root``'s source trees with more than MAX_LINES lines."""
    found: set[Path] = set()
    for top in SOURCES:
        patterns = ("*",) if top in EVERY_FILE else SIZED
        for pattern in patterns:
            found.update(p for p in (root / top).rglob(pattern)
                         if p.is_file() and not SKIPPED & set(p.relative_to(root).parts))
    long = {}
    for path in found:
        lines = path.read_bytes().count(b"\n")
        if lines > MAX_LINES:
            long[str(path.relative_to(root))] = lines
    return long


def test_no_source_file_is_over_500_lines() -> None:
    assert long_files(ROOT) == {}


def test_the_size_rule_sees_scripts_templates_and_the_scripts_dir(tmp_path: Path) -> None:
    """A long page script, template or shell script is seen; vendored and generated files,
    and a file just at the limit, are not."""
    too_long, at_limit = "x\n" * (MAX_LINES + 1), "x\n" * MAX_LINES
    for name, text in {"agents/static/gaia/page.js": too_long, "templates/ui/page.html": too_long,
                       "benchmarks/templates/benchmarks/run.html": too_long,
                       "scripts/bootstrap.sh": too_long, "mesh/core.py": too_long,
                       "agents/static/gaia/vendor/lib.js": too_long,
                       "agents/migrations/0001_initial.py": too_long,
                       "openai_api/fine.js": at_limit, "gaia_site/notes.txt": too_long}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert long_files(tmp_path) == {
        "agents/static/gaia/page.js": 501, "templates/ui/page.html": 501,
        "benchmarks/templates/benchmarks/run.html": 501, "scripts/bootstrap.sh": 501,
        "mesh/core.py": 501}
