"""Fixtures for the provider backend tests: fake upstreams on loopback and provider rows."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from agents.kernel.llm import Event, LLMRequest, Message, TextPart
from agents.models import Provider
from tests.fakes.anthropic_upstream import FakeAnthropicUpstream
from tests.fakes.openai_upstream import FakeOpenAIUpstream

_names = itertools.count()


@pytest.fixture
def openai_upstream() -> Iterator[FakeOpenAIUpstream]:
    with FakeOpenAIUpstream(tokens=6, api_key="sk-test-upstream-secret-1234") as up:
        yield up


@pytest.fixture
def anthropic_upstream() -> Iterator[FakeAnthropicUpstream]:
    with FakeAnthropicUpstream(tokens=6, api_key="sk-ant-test-upstream-secret-1234") as up:
        yield up


@pytest.fixture
def new_provider(db: Any) -> Callable[..., Provider]:
    """A Provider: a saved row from sync code (fixtures), or from async test bodies (no DB
    access there) an unsaved instance with its own pk and ``updated_at``, which is all the
    backend cache keys on."""

    def make(kind: str, **fields: Any) -> Provider:
        n = next(_names)
        fields.setdefault("name", f"{kind}-{n}")
        fields.setdefault("timeout_seconds", 10)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return Provider.objects.create(kind=kind, **fields)
        provider = Provider(pk=1_000_000 + n, kind=kind, **fields)
        provider.clean_fields()
        provider.updated_at = timezone.now()
        return provider

    return make


def ask(text: str = "Hello", **kwargs: Any) -> LLMRequest:
    kwargs.setdefault("model", "")
    kwargs.setdefault("system", "")
    return LLMRequest(messages=[Message("user", (TextPart(text),))], **kwargs)


async def collect(stream: Any) -> list[Event]:
    return [event async for event in stream]


async def drain(stream: Any, seen: list[Event]) -> None:
    """Consume ``stream`` into ``seen`` (which keeps what came before an error)."""
    async for event in stream:
        seen.append(event)
