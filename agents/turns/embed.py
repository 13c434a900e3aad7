"""Embeddings (``/v1/embeddings``) of an agent: the door's rules for what is not a turn.

An embedding request has no conversation, so no thread: it is authorized as a turn is
(:func:`agents.turns.authorize`: key, scope, the key's agents, rate limit, a paused agent),
refused while the organism is stopped, bounded before any work, answered by the first
provider of the agent's chain that embeds (an ``openai`` provider with
``options.embedding_model`` passes through to its upstream's ``/v1/embeddings``; the ``local``
kind answers offline from the package-shipped model, :mod:`agents.backends.local_raw`), and
then counted as a turn is: a row in the usage roll-up (the agent, the key, the embedding
model, its input tokens, its duration; a failure under its error kind) and an ``embeddings``
event on the feed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from agents import services
from agents.backends import (
    backend_for,
    can_fall_back,
    provider_embedding_model,
    provider_semaphore,
)
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import BackendError, BackendTimeout, GaiaError, InvalidRequest
from agents.models import Agent, ApiKey
from agents.outlet import events, realtime
from agents.turns.door import _organism_running_check

MAX_INPUTS = 2048  # OpenAI's own limit per request
MAX_INPUT_CHARS = 32768  # per input: about 8,192 tokens, OpenAI's per-input limit


@dataclass
class Embedded:
    vectors: list[list[float]]
    input_tokens: int
    model: str  # the embedding model that answered (the upstream's, or the shipped one)
    provider: str


def embeddings_check(inputs: list[str], *, param: str = "input") -> None:
    """Bound the work before it starts: at most :data:`MAX_INPUTS` inputs of at most
    :data:`MAX_INPUT_CHARS` characters, none empty (400 naming the input)."""
    if not inputs:
        raise InvalidRequest("'input' must not be empty.", param=param)
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequest(f"At most {MAX_INPUTS} inputs per request; this one has "
                             f"{len(inputs)}.", param=param, code="too_many_inputs")
    for i, text in enumerate(inputs):
        where = f"{param}[{i}]" if len(inputs) > 1 else param
        if not text:
            raise InvalidRequest("An input must not be an empty string.", param=where)
        if len(text) > MAX_INPUT_CHARS:
            raise InvalidRequest(f"An input may hold at most {MAX_INPUT_CHARS} characters; "
                                 f"this one has {len(text)}.", param=where,
                                 code="input_too_long")


def _embedders(agent: Agent) -> list[tuple[Any, Any, str]]:
    """``(provider, backend, embedding model)`` for each provider of the agent's chain that
    embeds, in order."""
    chain = getattr(agent, "provider_chain", None) or [agent.provider]
    found = []
    for provider in chain:
        model = provider_embedding_model(provider)
        if model:
            try:
                found.append((provider, backend_for(provider), model))
            except BackendError:
                continue
    return found


async def embeddings_create(*, target: Agent | str, api_key: ApiKey | None,
                            inputs: list[str], dimensions: int | None = None) -> Embedded:
    """Embed ``inputs`` with ``target`` (an agent from :func:`authorize`). Raises 400 for a
    model that does not embed (a virtual model, an agent whose providers have no embedding
    model) or dimensions it cannot give, 503 while the organism is stopped, the provider's
    errors otherwise. Usage and the feed are told whatever the outcome."""
    embeddings_check(inputs)
    if not isinstance(target, Agent):
        raise InvalidRequest(f"The model '{target}' does not create embeddings; name an agent "
                             "whose provider has an embedding model.", param="model",
                             code="embeddings_not_supported")
    await _organism_running_check()
    found = _embedders(target)
    if not found:
        raise InvalidRequest(
            f"The model '{target.slug}' does not create embeddings: its provider "
            f"'{target.provider.name}' has no embedding model (an openai provider's "
            "options.embedding_model; the local kind has one built in).", param="model",
            code="embeddings_not_supported")
    started = time.monotonic()
    provider, backend, model = found[0]
    limit = getattr(backend, "embedding_dimensions", None)
    if dimensions is not None and limit is not None and dimensions > limit:
        raise InvalidRequest(f"The model '{target.slug}' gives at most {limit} dimensions.",
                             param="dimensions", code="invalid_value")
    try:
        for i, (provider, backend, model) in enumerate(found):  # noqa: B007 - named below
            try:
                vectors, tokens = await _embed(provider, backend, inputs, dimensions)
                break
            except BackendError as exc:
                if i == len(found) - 1 or not can_fall_back(exc):
                    raise
        embedded = Embedded(vectors, tokens or sum(map(llm.estimate_tokens, inputs)),
                            model, provider.name)
    except GaiaError as exc:
        await _counted(target, api_key, model, started, inputs=len(inputs), tokens=0,
                       provider=provider.name, error=exc.message)
        raise
    await _counted(target, api_key, model, started, inputs=len(inputs),
                   tokens=embedded.input_tokens, provider=provider.name)
    return embedded


async def _embed(provider: Any, backend: Any, inputs: list[str], dimensions: int | None
                 ) -> tuple[list[list[float]], int]:
    """One provider's embeddings within its concurrency limit and timeout."""
    timeout = provider.timeout_seconds
    try:
        async with asyncio.timeout(timeout), provider_semaphore(provider):
            return await backend.embed(inputs, dimensions=dimensions)
    except TimeoutError:
        raise BackendTimeout(
            f"Provider {provider.name!r} did not answer within {timeout:g} s.") from None


async def _counted(agent: Agent, api_key: ApiKey | None, model: str, started: float, *,
                   inputs: int, tokens: int, provider: str = "", error: str = "") -> None:
    latency = int((time.monotonic() - started) * 1000)
    await run_db(services.usage_record, turn=services.UsageTurn(
        at=timezone.now(), agent_id=agent.pk, key_id=api_key.pk if api_key else 0,
        model=model, error_kind="error" if error else "", input_tokens=tokens,
        output_tokens=0, ttft_ms=None, latency_ms=latency))
    realtime.send_event(events.embeddings(
        agent=agent.slug, key=api_key.name if api_key else "", model=model, provider=provider,
        inputs=inputs, input_tokens=tokens, latency_ms=latency, error=error))
