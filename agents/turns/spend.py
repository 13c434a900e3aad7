"""What a turn may spend, checked before it opens and settled when it ends.

* A key's tokens per minute (``ApiKey.tokens_per_minute``): a turn is refused (429
  ``rate_limit_exceeded``) once the key's minute has used them; a turn's tokens are added
  when it ends. Counted in the shared cache (Redis in production: every process's), as the
  requests per minute are.
* Budgets (:mod:`agents.services.budgets`): the turn's worst case is held against every
  budget that applies before anything is stored; refused: 429 ``insufficient_quota``.

A turn of an agent delegated by another (``agent:<slug>``, a team's member) carries its
caller's key and end user, so it counts against the caller's budgets too.

Cost when no budget applies and the key has no token limit: reading the budgets this process
holds for the current configuration stamp, in memory (no query, no thread hop)."""

from __future__ import annotations

import math
import time
import uuid
from typing import TYPE_CHECKING

from agents import selectors, services
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import RateLimited

if TYPE_CHECKING:
    from agents.turns.spec import TurnSpec


def _worst_case(spec: TurnSpec) -> tuple[int, int]:
    """The turn's prompt tokens (estimated from what the client sent and the agent's
    instructions) and its output limit."""
    agent, request = spec.agent, spec.request
    prompt = llm.estimate_request_tokens(request) + llm.estimate_tokens(agent.instructions)
    limits = [x for x in (agent.max_output_tokens, request.max_output_tokens) if x]
    return prompt, min(limits) if limits else 4096


async def turn_reserve(spec: TurnSpec) -> services.Holds | None:
    """Check the key's tokens a minute and hold the turn's worst case against its budgets;
    raises :class:`RateLimited` or :class:`QuotaExceeded` (nothing held then)."""
    key = spec.api_key
    if key is not None and key.tokens_per_minute:
        await run_db(tpm_check, key_id=key.pk, limit=key.tokens_per_minute)
    rules = selectors.budget_rules_current()
    if rules is None:
        rules = await run_db(selectors.budget_rules)
    applying = selectors.budgets_applying(rules, api_key=key, agent_id=spec.agent.pk,
                                          user=spec.end_user or spec.user)
    if not applying:
        return None
    prompt, output = _worst_case(spec)
    return await run_db(
        services.budget_reserve, rules=applying,
        turn=f"{spec.response_id[:80]}:{uuid.uuid4().hex[:12]}",
        provider_name=spec.agent.provider.name, model=spec.agent.model_name,
        input_tokens=prompt, output_tokens=output)


def _tpm_key(key_id: int, window: int) -> str:
    return f"gaia:tpm:{key_id}:{window}"


def tpm_check(*, key_id: int, limit: int) -> None:
    """429 if the key's current minute has used ``limit`` tokens already."""
    now = time.time()
    used = services.counter_read(_tpm_key(key_id, int(now // 60)))
    if used >= limit:
        raise RateLimited(
            f"Rate limit of {limit} tokens per minute reached for this API key.",
            retry_after=max(1, math.ceil(60 - now % 60)))


def tpm_add(*, key_id: int, tokens: int) -> None:
    if tokens > 0:
        services.counter_add(_tpm_key(key_id, int(time.time() // 60)), tokens)
