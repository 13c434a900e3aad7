"""Real Celery worker processes for the end-to-end benchmark tests, and process inspection."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT, live_database_url


@dataclass
class Worker:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"{text!r} not in worker log:\n{self.log()[-4000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the worker and everything it started (a machine that dies)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def start_worker(data_dir: Path, name: str, redis_url: str, **env: str) -> Worker:
    log_path = data_dir / f"worker-{name}.log"
    full_env = {
        **os.environ,
        "DATABASE_URL": live_database_url(),
        "REDIS_URL": redis_url,
        "GAIA_DATA_DIR": str(data_dir),
        "GAIA_BENCH_HEARTBEAT_SECONDS": "0.5",
        "GAIA_BENCH_STALE_SECONDS": "3",
        "GAIA_BENCH_REAP_SECONDS": "0.5",
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    cmd = [sys.executable, "-m", "celery", "-A", "gaia_site", "worker", "-P", "solo",
           "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
           "-l", "info"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    worker = Worker(name, proc, log_path)
    try:
        worker.wait_log(" ready.", timeout=60)
    except AssertionError:
        worker.stop()
        raise
    return worker


def mesh_agents_of(pid: int) -> list[int]:
    """Pids of the live ``mesh.agent`` processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z" and b"mesh.agent" in cmdline:
            found.append(int(entry.name))
    return found
