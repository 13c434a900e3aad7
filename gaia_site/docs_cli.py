"""``gaia docs serve|build``: the manual in ``docs/`` (MkDocs with mkdocs-material).

Wiring only: MkDocs does the work. The manual lives in the checkout (``docs/mkdocs.yml``); its
API reference page is generated from the operator API's schema by ``docs/hooks.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CONFIG = Path(__file__).resolve().parents[1] / "docs" / "mkdocs.yml"


def _mkdocs(*args: str) -> int:
    if not CONFIG.exists():
        print(f"gaia docs: no manual at {CONFIG} (it ships with a checkout of Gaia).",
              file=sys.stderr)
        return 2
    # NO_MKDOCS_2_WARNING: mkdocs-material's notice about its successor, not our problem
    return subprocess.call(  # noqa: S603 (our interpreter, our arguments)
        [sys.executable, "-m", "mkdocs", *args, "-f", str(CONFIG)],
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def register(sub: Any) -> None:
    docs = sub.add_parser("docs", help="the manual (MkDocs)").add_subparsers(dest="cmd",
                                                                             required=True)
    serve = docs.add_parser("serve", help="serve the manual with live reload")
    serve.add_argument("--addr", default="127.0.0.1:8001", help="host:port (default %(default)s)")
    serve.set_defaults(func=lambda a: _mkdocs("serve", "--dev-addr", a.addr))
    build = docs.add_parser("build", help="write the site (default: var/docs-site/)")
    build.add_argument("--site-dir", default=None)
    build.set_defaults(func=lambda a: _mkdocs(
        "build", "--strict", *(["--site-dir", a.site_dir] if a.site_dir else [])))
