"""Fixtures of the operator API tests: keys by scope, clients, threads stored by the real
turn services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents import services
from agents.kernel import llm


@pytest.fixture
def operator_secret(make_key: Callable[..., tuple[Any, str]]) -> str:
    return make_key("ops", scopes=["operator"])[1]


@pytest.fixture
def chat_secret(make_key: Callable[..., tuple[Any, str]]) -> str:
    return make_key("chatter", scopes=["chat"])[1]


@pytest.fixture
def staff(django_user_model: Any) -> APIClient:
    """A logged-in staff member's API client (the console's session)."""
    user = django_user_model.objects.create_user("ann", password="pw-12345678", is_staff=True)
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def ops(operator_secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {operator_secret}")
    return client


@pytest.fixture
def make_thread(db: Any) -> Callable[..., Any]:
    """Store a turn as /v1 does (``thread_turn_begin`` + ``thread_turn_finish``); returns the
    thread id. ``reply=None`` leaves the turn running (the lease held)."""

    def make(agent: Any, text: str, *, reply: str | None = "ok", user: str = "alice",
             session: str | None = None, error: str = "", api_key: Any = None) -> str:
        start = services.thread_turn_begin(
            agent=agent, api_key=api_key, session_key=session or f"s:{text}", thread_id=None,
            user=user, incoming=[llm.Message(role="user", parts=(llm.TextPart(text),))],
            workspace_root=None, dialect="chat", lease_seconds=60)
        assert start is not None
        if reply is not None:
            result = services.TurnResult(text=reply, error=error,
                                         finish_reason="error" if error else "stop",
                                         input_tokens=3, output_tokens=2, ttft_ms=5)
            services.thread_turn_finish(start=start, result=result, dialect="chat")
        return str(start.thread_id)

    return make
