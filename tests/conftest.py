"""Shared fixtures: factories and a real Gaia server process on the test database.

``gaia_server`` runs uvicorn serving ``gaia_site.asgi:application`` in a subprocess pointed at
pytest-django's test database, so tests talk to Gaia over real sockets. Tests that use it must
commit their data: mark them ``@pytest.mark.django_db(transaction=True)``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings

ROOT = Path(__file__).resolve().parent.parent

# No embedded benchmark worker in the test process itself (importing gaia_site.asgi starts
# one): runs submitted here are executed explicitly by the tests, and the embedded worker is
# tested in real server processes, which get the variable they need from start_gaia.
os.environ.setdefault("GAIA_EMBEDDED_WORKER", "0")
# pytest-django has loaded the settings before this file runs, so the variable alone came too
# late for this process (settings.GAIA_EMBEDDED_WORKER was True: an in-process import of
# gaia_site.asgi started a worker that kept polling the test database).
django_settings.GAIA_EMBEDDED_WORKER = False
# Nor an embedded background-response worker (the same import started one, which polled the
# test database between tests: "Database access not allowed"); the servers' own run them.
django_settings.GAIA_BACKGROUND_EMBEDDED = False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def within_one_rate_window(seconds: float) -> None:
    """Wait, if need be, until ``seconds`` fit before the rate limit's one-minute window
    turns over: its counters are a fixed window per minute, and requests that straddle
    two windows are counted in two (CI once saw four requests pass a limit of three)."""
    if 60 - time.time() % 60 < seconds:
        time.sleep(61 - time.time() % 60)


def live_database_url() -> str:
    from django.db import connection

    d = connection.settings_dict
    if d["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{d['NAME']}"
    user = d.get("USER") or "postgres"
    password = f":{d['PASSWORD']}" if d.get("PASSWORD") else ""
    host, port = d.get("HOST") or "127.0.0.1", d.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{d['NAME']}"


@dataclass
class GaiaServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_gaia(tmp_dir: Path, env: dict[str, str] | None = None, *, server: str = "uvicorn"
               ) -> GaiaServer:
    """A Gaia server process; ``server="daphne"`` starts it as ``gaia api start --server
    daphne`` does (the CLI itself, which execs daphne in its own process)."""
    port = free_port()
    log_path = tmp_dir / f"gaia-{port}.log"
    full_env = {
        **os.environ,
        "DATABASE_URL": live_database_url(),
        "GAIA_DATA_DIR": str(tmp_dir),
        "GAIA_KEEPALIVE_SECONDS": "15",
        # Benchmark runs queued by tests are executed by the tests' own workers.
        "GAIA_EMBEDDED_WORKER": "0",
        # Schedules are fired by the beats the schedule tests start (or a server that asks).
        "GAIA_EMBEDDED_BEAT": "0",
        # Stale runs and workers are left to the tests that make them (a check an hour), unless
        # a test asks; a server with an embedded worker beats for it as ./run does.
        "GAIA_BENCH_REAP_SECONDS": "10" if (env or {}).get("GAIA_EMBEDDED_WORKER") == "1"
        else "3600",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    cmd = [sys.executable, "-m", "uvicorn", "gaia_site.asgi:application", "--host", "127.0.0.1",
           "--port", str(port), "--lifespan", "on", "--loop", "uvloop", "--http", "httptools",
           "--timeout-graceful-shutdown", "2"]
    if server == "daphne":
        cmd = [sys.executable, "-m", "gaia_site.cli", "api", "start", "--server", "daphne",
               "--host", "127.0.0.1", "--port", str(port)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    gaia = GaiaServer(f"http://127.0.0.1:{port}", proc, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Gaia exited early:\n{gaia.log()}")
        try:
            httpx.get(gaia.url + "/health", timeout=1)
            return gaia
        except httpx.HTTPError:
            time.sleep(0.1)
    gaia.stop()
    raise RuntimeError(f"Gaia did not start:\n{gaia.log()}")


@pytest.fixture(scope="session", autouse=True)
def _close_db_threads(django_db_setup: Any) -> Iterator[None]:
    """In-process requests leave connections on Gaia's database threads; close them before
    the test database is dropped."""
    yield
    from agents.infra.database import close_db_threads

    close_db_threads()


@pytest.fixture(scope="session")
def gaia_server(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[GaiaServer]:
    server = start_gaia(tmp_path_factory.mktemp("gaia"), {"GAIA_KEEPALIVE_SECONDS": "1"})
    yield server
    server.stop()


@pytest.fixture
def gaia_server_factory(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[Callable[..., GaiaServer]]:
    """Start extra servers with other settings (debug switches, a broken Redis...)."""
    started: list[GaiaServer] = []

    def start(**env: str) -> GaiaServer:
        server = start_gaia(tmp_path_factory.mktemp("gaia-extra"), env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# ---------------------------------------------------------------------------------------------
# Data


@pytest.fixture
def make_provider(db: Any) -> Callable[..., Any]:
    from tests.factories import ProviderFactory

    return ProviderFactory


@pytest.fixture
def make_agent(db: Any) -> Callable[..., Any]:
    from tests.factories import AgentFactory

    return AgentFactory


@pytest.fixture
def make_key(db: Any) -> Callable[..., tuple[Any, str]]:
    from agents.services import api_key_create

    def make(name: str = "test", **kwargs: Any) -> tuple[Any, str]:
        return api_key_create(name=name, **kwargs)

    return make


@pytest.fixture
def echo_agent(make_agent: Callable[..., Any]) -> Any:
    return make_agent(slug="echo", provider__options={})


@pytest.fixture
def api_key(make_key: Callable[..., tuple[Any, str]]) -> str:
    return make_key()[1]


@pytest.fixture
def feed_listener() -> Iterator[Any]:
    """The operator feed as live servers publish it (tests/feed.py); needs Redis."""
    from tests.feed import FeedListener

    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("the feed crosses processes only through Redis (set REDIS_URL)")
    listener = FeedListener(url).start()
    yield listener
    listener.stop()


@pytest.fixture
def knowledge_indexer(django_db_setup: Any, tmp_path: Any) -> Iterator[str]:
    """What indexes uploads: with Redis, a real Celery worker process on the test database;
    without, the embedded worker thread of the process that uploads (this one)."""
    url = os.environ.get("REDIS_URL")
    if not url:
        yield "thread"
        return
    with celery_worker_process(tmp_path / "celery.log"):
        yield "celery"


@contextlib.contextmanager
def celery_worker_process(log_path: Path, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker process (one, solo) on the test database and ``REDIS_URL``, with
    ``env`` on top of this process's; stopped (and its log closed) when the block ends."""
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "gaia_site", "worker", "--pool", "solo",
         "--concurrency", "1", "--loglevel", "info", "--without-gossip", "--without-mingle",
         "--without-heartbeat"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "DATABASE_URL": live_database_url(),
             "REDIS_URL": os.environ["REDIS_URL"], **env})
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
