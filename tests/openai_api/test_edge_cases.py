"""Edges of the /v1 contract: our own bugs, chunked oversized bodies."""

from __future__ import annotations

import json

import httpx
import pytest
from django.test import AsyncClient

pytestmark = pytest.mark.django_db(transaction=True)


async def test_our_own_bug_is_a_500_envelope_without_traceback(echo_agent, api_key, monkeypatch):
    from openai_api.dialects import chat

    def broken(data):
        raise RuntimeError("a bug with a secret detail")

    monkeypatch.setattr(chat, "parse_request", broken)
    response = await AsyncClient().post(
        "/v1/chat/completions", content_type="application/json",
        data=json.dumps({"model": "echo", "messages": [{"role": "user", "content": "x"}]}),
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert response.status_code == 500
    error = json.loads(response.content)["error"]
    assert error["type"] == "server_error"
    assert error["code"] == "internal_error"
    assert "Traceback" not in response.content.decode()
    assert "secret detail" not in response.content.decode()


def test_chunked_oversized_body_is_413(gaia_server, echo_agent, api_key):
    from django.conf import settings

    def chunks():
        piece = b"x" * 65536
        sent = 0
        while sent <= settings.GAIA_MAX_BODY_BYTES:
            yield piece
            sent += len(piece)

    r = httpx.post(gaia_server.v1 + "/chat/completions", content=chunks(), timeout=60,
                   headers={"Authorization": f"Bearer {api_key}",
                            "Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
