"""A remote provider's row makes its backend one way (``agents.backends.provider_settings``),
whatever its kind: name, base URL, credential (the stored secret, else the named variable),
default model, timeout and a copy of its options."""

from __future__ import annotations

import pytest

from agents.backends.anthropic_backend import AnthropicBackend
from agents.backends.openai_compat import OpenAIBackend
from agents.models import Provider


@pytest.mark.parametrize("backend", [OpenAIBackend, AnthropicBackend])
def test_remote_backends_are_made_from_the_provider_alike(backend, monkeypatch) -> None:
    monkeypatch.setenv("GAIA_TEST_UPSTREAM_KEY", "sk-from-env")
    options = {"images": False, "extra_headers": {"X-Org": "o"}}
    provider = Provider(name="up", kind="openai", base_url="https://up.example/v1",
                        api_key_env="GAIA_TEST_UPSTREAM_KEY", default_model="m",
                        timeout_seconds=7, options=options)
    made = backend.from_provider(provider)
    assert (made.name, made.api_key, made.default_model, made.timeout) == (
        "up", "sk-from-env", "m", 7.0)
    assert isinstance(made.timeout, float)
    assert made.options == options
    assert made.options is not provider.options  # the backend's own copy
    assert made.accepts_images is False
    provider.api_key_secret = "sk-stored"
    assert backend.from_provider(provider).api_key == "sk-stored"
