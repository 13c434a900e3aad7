"""The real clients the client tests drive, installed from the package registries into
``var/clients/`` (ignored by git) and cached there between runs.

* npm: Codex CLI, Claude Code and the MCP reference server ``server-everything`` into
  ``var/clients/node_modules`` (the clients' native binaries come inside the registry
  packages).
* PyPI: each client with its own pinned dependency tree in its own virtualenv
  (``var/clients/<name>``): Aider pins exact versions of ``openai``, ``pydantic`` and more that
  conflict with Gaia's, and the Agents SDK pins ``websockets<17``; Gaia's venv stays as it is.

A stamp file per install records what was installed; a changed pin reinstalls. Run as
``python -m tests.clients.install`` (``.ci/run`` does, before the suite) or let the test
fixtures call :func:`ensure`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "var" / "clients"

NPM = {"codex": "@openai/codex@0.169.0", "claude": "@anthropic-ai/claude-code@2.1.197",
       # the MCP reference server the tool tests run (stdio and streamable HTTP)
       "mcp-server-everything": "@modelcontextprotocol/server-everything@2026.8.31"}
VENVS = {
    "aider": ["aider-chat==0.86.2"],
    "sdk": ["openai-agents==0.24.0", "langchain-openai==1.7.3", "langchain-anthropic==1.7.7"],
}


class InstallError(RuntimeError):
    pass


def _run(cmd: list[str], **kwargs: object) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise InstallError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def npm_bin(name: str) -> Path:
    return CLIENTS / "node_modules" / ".bin" / name


def ensure_npm() -> None:
    stamp = CLIENTS / ".npm-installed"
    want = json.dumps(sorted(NPM.values()))
    if stamp.exists() and stamp.read_text() == want and all(
            npm_bin(n).exists() for n in NPM):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not installed (apt-get install -y nodejs npm).")
    CLIENTS.mkdir(parents=True, exist_ok=True)
    _run([npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--prefix",
          str(CLIENTS), *NPM.values()])
    stamp.write_text(want)


def venv_python(name: str) -> Path:
    return CLIENTS / name / "bin" / "python"


def ensure_venv(name: str) -> Path:
    requirements = VENVS[name]
    home = CLIENTS / name
    stamp = home / ".gaia-requirements"
    want = json.dumps(requirements)
    if stamp.exists() and stamp.read_text() == want and venv_python(name).exists():
        return venv_python(name)
    CLIENTS.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", "--clear", str(home)])
    _run([str(venv_python(name)), "-m", "pip", "install", "--quiet",
          "--disable-pip-version-check", *requirements])
    stamp.write_text(want)
    return venv_python(name)


def ensure() -> None:
    ensure_npm()
    for name in VENVS:
        ensure_venv(name)


if __name__ == "__main__":
    ensure()
    print(f"clients installed in {CLIENTS}")
