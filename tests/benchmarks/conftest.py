"""Fixtures for benchmark runs: the built-in suite, captured events, a private file storage."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SUITE_FILE = Path(__file__).resolve().parents[2] / "mesh" / "data" / "hotpotqa-dev-30.json"


@pytest.fixture(autouse=True)
def _no_embedded_worker_here(settings: Any) -> None:
    """Runs submitted in the test process are executed explicitly by the tests (the embedded
    worker is tested in a real server process)."""
    settings.GAIA_EMBEDDED_WORKER = False


@pytest.fixture
def storage_dir(settings: Any, tmp_path: Path) -> Path:
    location = tmp_path / "files"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                    "OPTIONS": {"location": str(location)}},
    }
    return location


@pytest.fixture
def suite(db: Any) -> Any:
    """The built-in suite (its data migration's row is gone after a transactional test)."""
    from benchmarks.models import BenchmarkSuite
    from benchmarks.services import suite_create

    found = BenchmarkSuite.objects.filter(name="hotpotqa-dev-30").first()
    return found or suite_create(name="hotpotqa-dev-30", builtin=True,
                                 questions=json.loads(SUITE_FILE.read_text()))


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every feed event sent in this process (the outlet's single entry point)."""
    from agents.outlet import realtime

    sent: list[dict[str, Any]] = []

    def capture(payload: dict[str, Any]) -> None:
        sent.append(payload)

    monkeypatch.setattr(realtime, "send_event", capture)
    return sent


@pytest.fixture
def bench_key(make_key: Callable[..., tuple[Any, str]]) -> tuple[Any, str]:
    return make_key(name="bench", scopes=["benchmarks"])
