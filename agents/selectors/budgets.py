"""Reads of budgets: which apply to a turn (from memory, read once per configuration stamp),
their periods, and their public shape (with ``spent``, ``remaining`` and ``resets_at``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet

from agents.kernel.exceptions import NotFound
from agents.models import Budget
from agents.models.spend import dollars_of
from agents.selectors.access import access_cache_latest
from agents.selectors.ordering import Ordering

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # a total budget's one period starts here


def period_start(period: str, now: datetime) -> datetime:
    """The start (UTC) of the ``period`` (day, month, total) holding ``now``."""
    now = now.astimezone(UTC)
    if period == Budget.Period.DAY:
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == Budget.Period.MONTH:
        return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return EPOCH


def period_end(period: str, now: datetime) -> datetime | None:
    """When the ``period`` holding ``now`` resets; ``None`` for a total budget."""
    start = period_start(period, now)
    if period == Budget.Period.DAY:
        return start + timedelta(days=1)
    if period == Budget.Period.MONTH:
        return (start + timedelta(days=32)).replace(day=1)
    return None


@dataclass(frozen=True)
class BudgetRule:
    """A budget as a turn needs it, held in memory while the configuration is unchanged."""

    id: int
    name: str
    scope: str
    key_id: int | None
    agent_id: int | None
    agent_slug: str
    user: str
    unit: str
    limit: int
    period: str
    soft_percent: int | None

    @property
    def target(self) -> str:
        if self.scope == Budget.Scope.KEY:
            return f"key:{self.key_id}"
        if self.scope == Budget.Scope.AGENT:
            return f"agent:{self.agent_slug}"
        if self.scope == Budget.Scope.USER:
            return f"user:{self.user}" + (f" of key:{self.key_id}" if self.key_id else "")
        return "global"

    def amount_public(self, amount: int) -> str | int:
        return str(dollars_of(amount)) if self.unit == Budget.Unit.USD else amount

    def applies(self, *, key_id: int | None, trusted: bool, agent_id: int,
                user: str | None) -> bool:
        if self.scope == Budget.Scope.GLOBAL:
            return True
        if self.scope == Budget.Scope.KEY:
            return key_id is not None and self.key_id == key_id
        if self.scope == Budget.Scope.AGENT:
            return self.agent_id == agent_id
        # a user is their key's (alice of one key is not alice of another), or everyone's
        # across the keys trusted to speak for users across keys
        return bool(user) and user == self.user and (
            self.key_id == key_id if self.key_id else (trusted and key_id is not None))


def budget_rules() -> list[BudgetRule]:
    """Every budget, read once per configuration stamp (a budget's save renews it). Call on a
    database thread; :func:`budget_rules_current` reads them on the event loop."""
    cache = access_cache_latest()
    if cache.budgets is None:
        cache.budgets = [
            BudgetRule(b.pk, b.name, b.scope, b.api_key_id, b.agent_id,
                       b.agent.slug if b.agent_id else "", b.user, b.unit, b.limit, b.period,
                       b.soft_percent)
            for b in Budget.objects.select_related("agent").order_by("pk")]
    return cache.budgets


def budget_rules_current() -> list[BudgetRule] | None:
    """The budgets as this process last read them for the current stamp, ``None`` if not
    read yet (every request reads the stamp first: a change is seen at once)."""
    from agents.selectors import access

    return access._access.budgets  # the cache as of the stamp just read


def budgets_applying(rules: list[BudgetRule], *, api_key: Any, agent_id: int,
                     user: str | None) -> list[BudgetRule]:
    """The budgets a turn of ``agent_id`` for ``api_key`` and end user ``user`` counts
    against; none for a key staff exempted (``ApiKey.budget_exempt``)."""
    if not rules or (api_key is not None and api_key.budget_exempt):
        return []
    key_id = api_key.pk if api_key is not None else None
    trusted = bool(api_key is not None and api_key.users_across_keys)
    return [r for r in rules
            if r.applies(key_id=key_id, trusted=trusted, agent_id=agent_id, user=user)]


BUDGET_ORDERING = Ordering(columns={"name": "name", "scope": "scope", "period": "period",
                                    "created_at": "created_at"}, default="name")


def budget_list(*, scope: str | None = None, sort: str | None = None) -> QuerySet[Budget]:
    rows = Budget.objects.select_related("api_key", "agent")
    if scope:
        rows = rows.filter(scope=scope)
    return BUDGET_ORDERING.apply(rows, sort)


def budget_get(*, budget_id: int) -> Budget:
    found = Budget.objects.select_related("api_key", "agent").filter(pk=budget_id).first()
    if found is None:
        raise NotFound(f"No budget {budget_id}.", code="budget_not_found")
    return found


def budget_public(budget: Budget, *, now: datetime | None = None) -> dict[str, Any]:
    """A budget as the API and the console show it. A period that ended shows as the new
    one, spent 0 (the first reservation of the new period resets the stored figures)."""
    now = now or datetime.now(UTC)
    current = period_start(budget.period, now)
    stale = budget.period_start < current
    spent = 0 if stale else budget.spent
    reserved = 0 if stale else budget.reserved
    usd = budget.unit == Budget.Unit.USD

    def shown(amount: int) -> str | int:
        return str(dollars_of(amount)) if usd else amount

    resets = period_end(budget.period, now)
    return {
        "id": budget.pk, "name": budget.name, "scope": budget.scope,
        "key": budget.api_key.prefix if budget.api_key_id else None,
        "agent": budget.agent.slug if budget.agent_id else None,
        "user": budget.user or None, "unit": budget.unit, "limit": shown(budget.limit),
        "period": budget.period, "soft_percent": budget.soft_percent,
        "spent": shown(spent), "reserved": shown(reserved),
        "remaining": shown(max(0, budget.limit - spent - reserved)),
        "period_start": current.isoformat(),
        "resets_at": resets.isoformat() if resets else None,
        "created_at": budget.created_at.isoformat(), "updated_at": budget.updated_at.isoformat(),
    }
