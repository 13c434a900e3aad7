"""Budgets as staff manage them: made, changed and deleted by the rules the budgets API, the
console page and the admin's form share, each change audited. How a turn holds and settles
against them is :mod:`agents.services.budgets`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from agents.kernel.exceptions import InvalidRequest
from agents.models import Agent, ApiKey, Budget
from agents.models.spend import dollars_of, nanos_of
from agents.services.audit import Actor, audit_record

BUDGET_FIELDS = ("name", "scope", "api_key", "agent", "user", "unit", "limit", "period",
                 "soft_percent")


def _checked(budget: Budget) -> None:
    scope = budget.scope
    needs = {Budget.Scope.KEY: ("api_key",), Budget.Scope.AGENT: ("agent",),
             Budget.Scope.USER: ("user",), Budget.Scope.GLOBAL: ()}[scope]
    if scope == Budget.Scope.KEY and budget.api_key_id is None:
        raise InvalidRequest("A key budget names its key.", param="key")
    if scope == Budget.Scope.AGENT and budget.agent_id is None:
        raise InvalidRequest("An agent budget names its agent.", param="agent")
    if scope == Budget.Scope.USER and not budget.user:
        raise InvalidRequest("A user budget names its user.", param="user")
    for name, present in (("key", budget.api_key_id is not None and "api_key" not in needs
                           and scope != Budget.Scope.USER),
                          ("agent", budget.agent_id is not None and "agent" not in needs),
                          ("user", bool(budget.user) and "user" not in needs)):
        if present:
            raise InvalidRequest(f"A {scope} budget has no {name}.", param=name)
    if budget.limit <= 0:
        raise InvalidRequest("limit must be more than 0.", param="limit")
    if budget.limit >= 2**63 // 2:  # spent + reserved + a turn must fit a 64-bit integer
        raise InvalidRequest("limit is too large (at most 9,000,000,000 USD, or that many "
                             "billion tokens).", param="limit")
    if budget.soft_percent is not None and not 1 <= budget.soft_percent <= 100:
        raise InvalidRequest("soft_percent is between 1 and 100.", param="soft_percent")
    clash = Budget.objects.filter(name=budget.name).exclude(pk=budget.pk).exists()
    if clash:
        raise InvalidRequest(f"A budget named '{budget.name}' exists.", param="name",
                             code="budget_exists")


def budget_save(*, budget: Budget | None, fields: dict[str, Any], actor: Actor | None,
                commit: bool = True) -> Budget:
    """Create (``budget=None``) or change a budget, audited. ``fields``: the model's, with
    ``limit`` in the budget's unit as given (USD as a decimal, tokens as an integer), ``key``
    a key's prefix or id and ``agent`` a slug. ``commit=False``: check only (the admin's
    form, before it saves); raises :class:`InvalidRequest` naming the field."""
    creating = budget is None
    b = budget or Budget(period_start=datetime(1970, 1, 1, tzinfo=UTC))
    before = {f: getattr(b, f"{f}_id" if f in ("api_key", "agent") else f)
              for f in BUDGET_FIELDS} if not creating else {}
    for name, value in fields.items():
        if name == "key":
            b.api_key = _key_named(value) if value not in (None, "") else None
        elif name == "agent":
            b.agent = _agent_named(value) if value not in (None, "") else None
        elif name == "limit":
            continue
        else:
            setattr(b, name, value if value is not None or name == "soft_percent" else "")
    if "limit" in fields:
        b.limit = (nanos_of(fields["limit"]) if b.unit == Budget.Unit.USD
                   else int(fields["limit"]))
    elif not creating and "unit" in fields and fields["unit"] != before.get("unit"):
        raise InvalidRequest("A budget's unit changes with its limit.", param="limit")
    _checked(b)
    if not commit:
        return b
    with transaction.atomic():
        b.save()
        after = {f: getattr(b, f"{f}_id" if f in ("api_key", "agent") else f)
                 for f in BUDGET_FIELDS}
        changed = {k: v for k, v in after.items() if before.get(k) != v}
        audit_record(actor=actor, action="budget_create" if creating else "budget_update",
                     target=f"budget:{b.name}",
                     detail={"changed": sorted(changed), **({"limit": str(
                         dollars_of(b.limit)) if b.unit == "usd" else b.limit}
                         if "limit" in changed else {})})
    return b


def budget_delete(*, budget: Budget, actor: Actor | None) -> None:
    with transaction.atomic():
        name = budget.name
        budget.delete()
        audit_record(actor=actor, action="budget_delete", target=f"budget:{name}")


def _key_named(value: Any) -> ApiKey:
    rows = ApiKey.objects.filter(pk=int(value)) if str(value).isdecimal() else \
        ApiKey.objects.filter(prefix=str(value))
    found = rows.first()
    if found is None:
        raise InvalidRequest(f"No API key {value!r}.", param="key")
    return found


def _agent_named(slug: str) -> Agent:
    found = Agent.objects.filter(slug=slug).first()
    if found is None:
        raise InvalidRequest(f"No agent {slug!r}.", param="agent")
    return found
