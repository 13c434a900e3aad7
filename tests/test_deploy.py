"""`manage.py check --deploy` is clean with the production settings .env.example documents."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import ROOT


def documented_production_env() -> dict[str, str]:
    text = (ROOT / ".env.example").read_text()
    block = text.split("# Production behind HTTPS.", 1)[1]
    return dict(re.findall(r"^# (GAIA_[A-Z_]+)=(\S+)$", block, re.M))


def check_deploy(env: dict[str, str], tmp_path) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GAIA_")}
    full.update({"GAIA_DATA_DIR": str(tmp_path), "SECRET_KEY": "x" * 30 + "a-long-test-key"
                 + "y" * 30, **env})
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=full, capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_with_the_documented_production_env(tmp_path):
    env = documented_production_env()
    assert env["GAIA_DEBUG"] == "0"
    result = check_deploy(env, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_warns_without_them(tmp_path):
    result = check_deploy({"GAIA_DEBUG": "0"}, tmp_path)
    assert result.returncode != 0
    for warning in ("W004", "W008", "W012", "W016"):
        assert warning in result.stderr + result.stdout
