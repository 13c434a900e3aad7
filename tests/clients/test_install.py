"""The client programs are installed by ``./test``'s set-up, never by a test: a test that finds
one missing fails saying how to install it."""

from __future__ import annotations

import pytest

from tests.clients import install


def test_a_missing_client_names_the_command_that_installs_it(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "CLIENTS", tmp_path / "clients")
    with pytest.raises(install.InstallError) as npm:
        install.require_npm("codex")
    assert "./test installs them" in str(npm.value)
    assert "python -m tests.clients.install" in str(npm.value)
    with pytest.raises(install.InstallError) as venv:
        install.require_venv("aider")
    assert "aider-chat==" in str(venv.value)
    assert not (tmp_path / "clients").exists()  # looked up, nothing installed


def test_the_installed_clients_are_found():
    """./test's set-up ran before this suite: every client is there."""
    for name in install.NPM:
        assert install.require_npm(name).exists()
    for name in install.VENVS:
        assert install.require_venv(name).exists()
