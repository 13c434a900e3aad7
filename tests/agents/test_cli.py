"""The `gaia` console script: agents import/export and keys create, as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agents.models import Agent, ApiKey
from agents.services import api_key_authenticate
from tests.conftest import ROOT, live_database_url

pytestmark = pytest.mark.django_db(transaction=True)

GAIA = [str(Path(sys.executable).parent / "gaia")]


def gaia(*args, tmp_path, **extra_env):
    # PYTHONPATH: this checkout's code, whichever checkout the installed script points at.
    env = {**os.environ, "DATABASE_URL": live_database_url(), "GAIA_DATA_DIR": str(tmp_path),
           "PYTHONPATH": str(ROOT), **extra_env}
    return subprocess.run([*GAIA, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_gaia_agents_import_export_and_keys(tmp_path):
    config = tmp_path / "agents.yaml"
    config.write_text(yaml.safe_dump({
        "providers": [{"name": "echo", "kind": "fake", "options": {"reply": "Hello!"}}],
        "agents": [{"slug": "helper", "display_name": "Helper", "provider": "echo",
                    "instructions": "Hi.", "max_output_tokens": 512}],
    }))
    first = gaia("agents", "import", str(config), tmp_path=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "created   agent:helper" in first.stdout
    second = gaia("agents", "import", str(config), tmp_path=tmp_path)
    assert "unchanged agent:helper" in second.stdout
    assert Agent.objects.get(slug="helper").max_output_tokens == 512

    exported = gaia("agents", "export", tmp_path=tmp_path)
    assert yaml.safe_load(exported.stdout)["agents"][0]["slug"] == "helper"

    made = gaia("keys", "create", "--name", "cli", "--agent", "helper", tmp_path=tmp_path)
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    key = api_key_authenticate(raw=secret)
    assert key.name == "cli"
    assert list(key.agents.values_list("slug", flat=True)) == ["helper"]
    assert secret not in ApiKey.objects.get(pk=key.pk).hashed_secret


def test_gaia_import_reports_errors_without_traceback(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("agents:\n  - {slug: x, provider: missing}\n")
    result = gaia("agents", "import", str(config), tmp_path=tmp_path)
    assert result.returncode == 1
    assert "unknown provider" in result.stderr
    assert "Traceback" not in result.stderr


def test_gaia_api_start_status_stop(tmp_path):
    from tests.conftest import free_port

    port = str(free_port())
    started = gaia("api", "start", "--port", port, "--background", tmp_path=tmp_path)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        status = gaia("api", "status", "--port", port, tmp_path=tmp_path)
        assert status.returncode == 0
        assert "ok" in status.stdout
    finally:
        stopped = gaia("api", "stop", "--port", port, tmp_path=tmp_path)
    assert stopped.returncode == 0
    assert gaia("api", "status", "--port", port, tmp_path=tmp_path).returncode == 1


def test_gaia_keys_create_refuses_a_key_expiring_after_zero_days(tmp_path):
    made = gaia("keys", "create", "--name", "zero", "--expires-days", "0", tmp_path=tmp_path)
    assert made.returncode != 0
    assert "at least 1" in made.stderr
    assert not ApiKey.objects.filter(name="zero").exists()
    made = gaia("keys", "create", "--name", "one", "--expires-days", "1", tmp_path=tmp_path)
    assert made.returncode == 0, made.stderr
    assert ApiKey.objects.get(name="one").expires_at is not None


def test_gaia_agents_export_hides_header_values_and_import_keeps_them(tmp_path):
    config = tmp_path / "agents.yaml"
    config.write_text(yaml.safe_dump({"providers": [{
        "name": "up", "kind": "openai", "base_url": "https://x.example/v1",
        "options": {"extra_headers": {"X-Token": "tok-very-secret", "X-Org": "env:GAIA_ORG"}},
    }]}))
    assert gaia("agents", "import", str(config), tmp_path=tmp_path).returncode == 0
    exported = gaia("agents", "export", tmp_path=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "tok-very-secret" not in exported.stdout
    headers = yaml.safe_load(exported.stdout)["providers"][0]["options"]["extra_headers"]
    assert headers == {"X-Token": "[hidden]", "X-Org": "env:GAIA_ORG"}
    config.write_text(exported.stdout)  # the export imported back changes nothing
    assert gaia("agents", "import", str(config), tmp_path=tmp_path).returncode == 0
    from agents.models import Provider

    stored = Provider.objects.get(name="up").options["extra_headers"]
    assert stored == {"X-Token": "tok-very-secret", "X-Org": "env:GAIA_ORG"}


def test_gaia_api_stop_stops_a_foreground_run_server(tmp_path, make_key):
    """``./run`` serves in the foreground (``gaia api start`` without ``--background``); it
    records itself too, so ``status`` names it and ``stop`` ends it from another terminal."""
    from tests.conftest import free_port

    port = free_port()
    env = {**os.environ, "DATABASE_URL": live_database_url(), "GAIA_DATA_DIR": str(tmp_path),
           "PYTHONPATH": str(ROOT), "GAIA_PORT": str(port)}
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(ROOT / "run")], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        for _ in range(1200):
            status = gaia("api", "status", "--port", str(port), tmp_path=tmp_path)
            if status.returncode == 0 or proc.poll() is not None:
                break
        assert proc.poll() is None, log_path.read_text()
        assert status.returncode == 0, status.stdout + log_path.read_text()
        assert f"(pid {proc.pid})" in status.stdout
        assert "GAIA_API_KEY" in status.stdout  # how to see the components, not "{}"
        _, key = make_key("ops", scopes=["operator"])
        checks = gaia("api", "status", "--port", str(port), tmp_path=tmp_path, GAIA_API_KEY=key)
        assert '"database"' in checks.stdout, checks.stdout
        again = gaia("api", "start", "--port", str(port), tmp_path=tmp_path)
        assert again.returncode == 1
        assert "already runs" in again.stderr
        stopped = gaia("api", "stop", "--port", str(port), tmp_path=tmp_path)
        assert stopped.returncode == 0, stopped.stdout
        assert proc.wait(30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert gaia("api", "status", "--port", str(port), tmp_path=tmp_path).returncode == 1
    assert not (tmp_path / f"gaia-api-{port}.pid").exists()
