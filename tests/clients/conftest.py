"""The real clients (Codex CLI, Claude Code, Aider, the OpenAI Agents SDK, LangChain) against
a live Gaia on loopback, configured from the README's "Use it from ..." snippets.

Each client runs as a subprocess with its own ``HOME`` (no user config leaks in, nothing is
left behind), its telemetry and update checks off, and the server's address and a test key
in place of the README's ``http://127.0.0.1:8080`` and ``$GAIA_API_KEY``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import manual
from tests.clients import install

README_URL = "http://127.0.0.1:8080"

# Nothing leaves the machine: no telemetry, update checks or error reports.
QUIET = {
    "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_UPDATE_NOTIFIER": "1",
    "OPENAI_AGENTS_DISABLE_TRACING": "1", "LANGSMITH_TRACING": "false",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True", "AIDER_ANALYTICS": "false",
    "AIDER_CHECK_UPDATE": "false", "NO_COLOR": "1",
}

TOOL_WORD = "gaia-tool-ok"


def readme_block(name: str) -> str:
    """The fenced block after ``<!-- client:NAME -->`` in the manual (or the README)."""
    return manual.block(f"client:{name}")


def readme_env(name: str, *, url: str, key: str) -> dict[str, str]:
    """The ``export`` lines of a README block, for this server and key."""
    env: dict[str, str] = {}
    for line in readme_block(name).splitlines():
        if not line.startswith("export "):
            continue
        for word in shlex.split(line[len("export "):]):
            name_, _, value = word.partition("=")
            env[name_] = value.replace(README_URL, url).replace("$GAIA_API_KEY", key)
    return env


def readme_command(name: str) -> list[str]:
    """The command line of a README block (its last line that is not an ``export``)."""
    lines = [ln for ln in readme_block(name).splitlines()
             if ln.strip() and not ln.startswith("export ")]
    return shlex.split(lines[-1])


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass
class ClientEnv:
    url: str
    key: str
    home: Path
    work: Path

    def run(self, cmd: list[str | Path], env: dict[str, str] | None = None,
            timeout: float = 180, stdin: str | None = None) -> Run:
        full = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
            "LANG": "C.UTF-8", "TERM": "dumb", **QUIET, **(env or {}),
        }
        done = subprocess.run([str(c) for c in cmd], cwd=self.work, env=full, text=True,
                              capture_output=True, timeout=timeout, input=stdin or "",
                              check=False)
        return Run(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def client_env(gaia_server: Any, api_key: str, tmp_path: Path) -> ClientEnv:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return ClientEnv(url=gaia_server.url, key=api_key, home=home, work=work)


def _installed(find: Callable[[str], Path]) -> Callable[[str], Path]:
    def get(name: str) -> Path:
        try:
            return find(name)
        except install.InstallError as exc:
            pytest.fail(str(exc), pytrace=False)
    return get


@pytest.fixture(scope="session")
def npm_clients() -> Callable[[str], Path]:
    """``bin(name)``: a Codex CLI or Claude Code executable (``./test`` installed them)."""
    return _installed(install.require_npm)


@pytest.fixture(scope="session")
def client_python() -> Callable[[str], Path]:
    """``python(name)``: the interpreter of a client's own virtualenv (``./test`` made it)."""
    return _installed(install.require_venv)


# Every agent a client talks to here has server-side tools of its own, and uses one first in
# each turn (agents/backends/fake.py, agent_tool): a client sees Gaia's tool activity (mcp_call
# items, the reasoning channel) beside what it asked for, and must still work.
SERVER_TOOL = {"name": "calculator", "arguments": {"expression": "6 * 7"}}
# what the model's call of it costs in output tokens (a turn's usage counts every model call)
SERVER_TOOL_TOKENS = 4  # {"expression": / "6 / * / 7"}: the fake provider counts words


@pytest.fixture
def fake_agents(make_agent: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``make(slug, tool=None, arguments=None)``: a fake agent answering "Hello from Gaia.",
    or calling ``tool`` and then reporting what the tool returned; either way after running
    its own calculator (checked when the test ends: it ran in every thread of the agent)."""
    made: list[Any] = []

    def make(slug: str, tool: str | None = None, arguments: dict[str, Any] | None = None,
             **options: Any) -> Any:
        opts: dict[str, Any] = {"reply": "Hello from Gaia.", **options}
        if tool:
            opts = {"tool_call": {"name": tool, "arguments": arguments or {}},
                    "tool_result_reply": True, **options}
        opts["agent_tool"] = SERVER_TOOL
        agent = make_agent(slug=slug, instructions="", provider__name=f"fake-{slug}",
                           provider__options=opts, tools=["calculator", "current_time"])
        made.append(agent)
        return agent

    yield make
    from agents.models import Message, Thread

    for agent in made:
        for thread in Thread.objects.filter(agent=agent):
            ran = thread.messages.filter(role="tool", internal=True, sender="calculator",
                                         content="42").exists()
            assert ran, (agent.slug, list(Message.objects.filter(thread=thread)
                                          .values_list("role", "content")))
