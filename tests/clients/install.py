"""The real clients the client tests drive, installed from the package registries into
``var/clients/`` (ignored by git) and cached there between runs.

* npm: Codex CLI, Claude Code, opencode, Qwen Code, Kilo Code CLI, pi, the JavaScript OpenAI
  Agents SDK, the MCP reference server ``server-everything`` and the MCP Inspector into
  ``var/clients/node_modules`` (the clients' native binaries come inside the registry
  packages).
* PyPI: each client with its own pinned dependency tree in its own virtualenv
  (``var/clients/<name>``): Aider pins exact versions of ``openai``, ``pydantic`` and more that
  conflict with Gaia's, and the Agents SDK pins ``websockets<17``; Gaia's venv stays as it is.

A stamp file per install records what was installed; a changed pin reinstalls. ``./test``
installs them in its set-up step (``scripts/bootstrap.sh dev`` runs ``python -m
tests.clients.install``, which says what it installs), so no test reaches a registry: the
fixtures only look them up (:func:`require_npm`, :func:`require_venv`) and a missing one fails
with the command that installs it.
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
       "mcp-server-everything": "@modelcontextprotocol/server-everything@2026.8.31",
       "opencode": "opencode-ai@1.18.33", "qwen": "@qwen-code/qwen-code@0.24.4",
       # Kilo Code CLI (7.7.7: the registry has no 7.8.1 native packages), pi, and the
       # JavaScript OpenAI Agents SDK (a library: its key is its package name)
       "kilo": "@kilocode/cli@7.7.7", "pi": "@mariozechner/pi-coding-agent@0.73.1",
       "@openai/agents": "@openai/agents@0.20.0",
       # the MCP Inspector, whose CLI lists and calls Gaia's agents over /mcp
       "mcp-inspector": "@modelcontextprotocol/inspector@2.12.0"}
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
    """A client's executable; for a library (``@scope/name``) its package directory."""
    if name.startswith("@"):
        return CLIENTS / "node_modules" / name
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
    print(f"Installing the client programs from npm into {CLIENTS}: {', '.join(NPM.values())}",
          flush=True)
    CLIENTS.mkdir(parents=True, exist_ok=True)
    _run([npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--prefix",
          str(CLIENTS), *NPM.values()])
    # Qwen Code's package ships its ripgrep without the execute bit: it warns "Ripgrep not
    # available ... EACCES" on every run and falls back to a slower search of its own.
    for rg in (CLIENTS / "node_modules" / "@qwen-code").glob("*/vendor/ripgrep/*/rg"):
        rg.chmod(0o755)
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
    print(f"Installing {', '.join(requirements)} from PyPI into {home}", flush=True)
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


SETUP = "./test installs them (or: .venv/bin/python -m tests.clients.install)"


def require_npm(name: str) -> Path:
    """An installed npm client's executable; :class:`InstallError` saying how to install it
    when it is not there (tests never install)."""
    path = npm_bin(name)
    if not path.exists():
        raise InstallError(f"{name} is not installed in {CLIENTS}: {SETUP}.")
    return path


def require_venv(name: str) -> Path:
    """The interpreter of an installed Python client's virtualenv, as :func:`require_npm`."""
    path = venv_python(name)
    if not path.exists():
        raise InstallError(f"The {name} client ({', '.join(VENVS[name])}) is not installed in "
                           f"{CLIENTS}: {SETUP}.")
    return path


if __name__ == "__main__":
    try:
        ensure()
    except InstallError as exc:
        print(f"Could not install the client programs the tests drive:\n{exc}",
              file=sys.stderr)
        sys.exit(1)
