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
from typing import TYPE_CHECKING, Any

from agents import selectors, services
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import QuotaExceeded, RateLimited

if TYPE_CHECKING:
    from agents.turns.spec import TurnSpec


def _worst_case(spec: TurnSpec) -> tuple[int, int]:
    """The turn's prompt tokens (estimated from what the client sent and the agent's
    instructions) and its output limit."""
    agent, request = spec.agent, spec.request
    prompt = llm.estimate_request_tokens(request) + llm.estimate_tokens(agent.instructions)
    limits = [x for x in (agent.max_output_tokens, request.max_output_tokens) if x]
    return prompt, min(limits) if limits else 4096


class Reservation:
    """What a turn checks and holds before it is stored: :meth:`run` (on a database thread,
    in the hop that stores the turn) checks the key's tokens a minute and holds the turn's
    worst case against its budgets; ``holds`` are what it then holds, settled when the turn
    ends (:class:`agents.turns.ending.TurnEnding`)."""

    __slots__ = ("done", "holds", "key_id", "provider", "model", "rules", "tpm", "tpm_checked",
                 "tokens", "turn")

    def __init__(self, spec: TurnSpec, rules: list[Any]) -> None:
        key = spec.api_key
        self.key_id = key.pk if key is not None else 0
        self.tpm = key.tokens_per_minute if key is not None else 0
        self.rules = rules
        self.tokens = _worst_case(spec)
        self.provider, self.model = spec.agent.provider.name, spec.agent.model_name
        self.turn = f"{spec.response_id[:80]}:{uuid.uuid4().hex[:12]}"
        self.holds: services.Holds | None = None
        self.done = self.tpm_checked = False

    def run(self) -> dict[str, Any] | None:
        """Raises :class:`RateLimited` or :class:`QuotaExceeded` (nothing held then); returns
        what the turn's thread keeps of its holds (``Thread.budget_holds``)."""
        if self.tpm and not self.tpm_checked:
            tpm_check(key_id=self.key_id, limit=self.tpm)
        if self.rules:
            prompt, output = self.tokens
            self.holds = services.budget_reserve(
                rules=self.rules, turn=self.turn, provider_name=self.provider, model=self.model,
                input_tokens=prompt, output_tokens=output)
        self.done = True
        return self.holds.stored() if self.holds is not None else None

    def statement(self) -> services.HoldStatement | None:
        """:meth:`run`'s holds unsent, for the statement that stores the turn (PostgreSQL:
        no round trip of their own); what the turn holds once that statement succeeds.
        A statement that fails holds nothing: then :meth:`run`, in the transaction."""
        if self.tpm:
            tpm_check(key_id=self.key_id, limit=self.tpm)
            self.tpm_checked = True  # this try's: not again if the transaction takes over
        if not self.rules:
            return None
        prompt, output = self.tokens
        statement = services.budget_reserve_statement(
            rules=self.rules, turn=self.turn, provider_name=self.provider, model=self.model,
            input_tokens=prompt, output_tokens=output)
        self.holds, self.done = statement.holds, True
        return statement


async def reservation(spec: TurnSpec) -> Reservation | None:
    """The turn's :class:`Reservation`, or ``None`` when no budget applies and its key has no
    token limit: then nothing is done (the budgets are in memory for the current stamp)."""
    rules = selectors.budget_rules_current()
    if rules is None:
        rules = await run_db(selectors.budget_rules)
    applying = selectors.budgets_applying(rules, api_key=spec.api_key, agent_id=spec.agent.pk,
                                          user=spec.end_user or spec.user)
    if not applying and not (spec.api_key is not None and spec.api_key.tokens_per_minute):
        return None
    return Reservation(spec, applying)


def reserved_begin(reservation: Reservation, **begin: Any) -> Any:
    """:func:`agents.services.thread_turn_begin` with the reservation's holds taken in the
    transaction that stores the turn (SQLite: one commit, where a commit of its own was half
    the budget check's cost), or in its one statement (PostgreSQL: no round trip of their
    own; scripts/perf/spend.py). A refusal stores nothing, and the feed hears of it once
    that transaction has ended. A busy thread holds nothing meanwhile: the next try holds
    again."""
    start = None
    try:
        start = services.thread_turn_begin(before=reservation.run, hold=reservation.statement,
                                           **begin)
    except QuotaExceeded as exc:
        services.budget_refusal_announce(exc)
        raise
    finally:
        if start is None:  # refused, failed or busy
            _forget(reservation)
    return start


def _forget(reservation: Reservation) -> None:
    """What the turn held was not stored (its transaction or statement wrote nothing): it
    holds nothing, and takes its holds again on its next try at the thread."""
    reservation.holds, reservation.done, reservation.tpm_checked = None, False, False


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
