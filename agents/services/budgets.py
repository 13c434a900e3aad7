"""Budgets that hold under concurrency, across processes.

Before a turn, :func:`budget_reserve` holds the turn's worst case (its prompt's estimated
tokens plus its output limit; priced, for a budget in money) against every budget that
applies, each with one conditional ``UPDATE``: ``reserved`` grows only if ``spent +
reserved`` stays within the limit. The database decides (a row lock on PostgreSQL, the write
lock on SQLite), never a read followed by a write, so fifty turns racing at a budget with room
for ten get ten holds, whichever processes serve them. All of a turn's holds are taken in one
transaction, budgets in id order (no deadlock): refused by one, it holds none.

When the turn ends, however it ends (a reply, an error, a kill, a client gone),
:func:`budget_settle` gives the hold back and adds what the turn really used. A hold whose
turn's process died is released when it expires (``GAIA_BUDGET_HOLD_SECONDS``) by the next
reservation that would otherwise be refused, and by the sweep at server start.

A new period (day, month, in UTC) starts in the statement of its first reservation, which
resets ``spent`` and ``reserved`` (holds of the period before settle into nothing)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents.kernel.exceptions import InvalidRequest, QuotaExceeded
from agents.models import Agent, ApiKey, Budget, BudgetHold
from agents.models.spend import dollars_of, nanos_of
from agents.outlet import events, realtime
from agents.selectors.budgets import BudgetRule, period_end, period_start
from agents.services.audit import Actor, audit_record
from agents.services.prices import Price, price_of

log = logging.getLogger("gaia.budgets")

_T = "agents_budget"


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _dt(value: datetime) -> Any:
    return Budget._meta.get_field("period_start").get_db_prep_value(value, connection)


@dataclass(frozen=True)
class Held:
    """One budget a running turn holds an amount of."""

    rule: BudgetRule
    amount: int
    period_start: datetime


@dataclass
class Holds:
    """What a turn reserved (``turn``: its response id), to settle when it ends."""

    turn: str
    held: list[Held]
    price: Price | None
    settled: bool = False


def _reserve_sql() -> str:
    ps, sp, rs, lim = _q("period_start"), _q("spent"), _q("reserved"), _q("limit")
    fresh = f"{ps} < %s"
    return (f"UPDATE {_T} SET {sp} = CASE WHEN {fresh} THEN 0 ELSE {sp} END, "  # noqa: S608
            f"{rs} = CASE WHEN {fresh} THEN %s ELSE {rs} + %s END, "
            f"{ps} = CASE WHEN {fresh} THEN %s ELSE {ps} END "
            f"WHERE {_q('id')} = %s "
            f"AND (CASE WHEN {fresh} THEN 0 ELSE {sp} + {rs} END) + %s <= {lim}")


def _amount(rule: BudgetRule, *, tokens: int, price: Price | None, input_tokens: int,
            output_tokens: int) -> int | None:
    if rule.unit == Budget.Unit.TOKENS:
        return tokens
    if price is None:
        return None
    return price.cost_nanos(input_tokens, output_tokens)


def budget_reserve(*, rules: list[BudgetRule], turn: str, provider_name: str, model: str,
                   input_tokens: int, output_tokens: int, now: datetime | None = None
                   ) -> Holds:
    """Hold ``input_tokens + output_tokens`` (priced by ``provider_name``'s ``model`` for a
    budget in money) against every budget in ``rules``, or raise :class:`QuotaExceeded`
    naming the first that has no room (and hold nothing). A money budget cannot hold a turn
    whose model has no known price: it is refused, not let through. Call on a database
    thread."""
    now = now or timezone.now()
    price = price_of(provider_name=provider_name, model=model) if any(
        r.unit == Budget.Unit.USD for r in rules) else None
    tokens = input_tokens + output_tokens
    held: list[Held] = []
    refused: tuple[BudgetRule, str] | None = None
    sql = _reserve_sql()
    expires = now + timedelta(seconds=settings.GAIA_BUDGET_HOLD_SECONDS)
    with transaction.atomic(), connection.cursor() as cursor:
        for rule in sorted(rules, key=lambda r: r.id):
            amount = _amount(rule, tokens=tokens, price=price, input_tokens=input_tokens,
                             output_tokens=output_tokens)
            if amount is None:
                refused = (rule, f"no price is known for the model '{model}' (set one)")
                break
            start = period_start(rule.period, now)
            p = _dt(start)
            params = [p, p, amount, amount, p, p, rule.id, p, amount]
            cursor.execute(sql, params)
            if not cursor.rowcount and _holds_expired_release(rule.id, now):
                cursor.execute(sql, params)  # room held by a dead process's turn, freed
            if not cursor.rowcount:
                refused = (rule, "it has no room for this request")
                break
            held.append(Held(rule, amount, start))
        if refused is None and held:
            BudgetHold.objects.bulk_create([
                BudgetHold(budget_id=h.rule.id, turn=turn, amount=h.amount,
                           period_start=h.period_start, expires_at=expires) for h in held])
        elif refused is not None:
            transaction.set_rollback(True)
    if refused is not None:
        rule, why = refused
        _signal_once(rule, "budget_exceeded", "exceeded_period", now)
        end = period_end(rule.period, now)
        raise QuotaExceeded(
            f"Budget '{rule.name}' ({rule.target}, {rule.amount_public(rule.limit)} "
            f"{rule.unit} a {rule.period if rule.period != 'total' else 'lifetime'}): {why}.",
            retry_after=max(1, int((end - now).total_seconds()) + 1) if end else None)
    return Holds(turn, held, price)


def _holds_expired_release(budget_id: int, now: datetime) -> int:
    """Give back the holds on ``budget_id`` that expired (their turns' processes died)."""
    released = 0
    for hold in BudgetHold.objects.filter(budget_id=budget_id, expires_at__lt=now):
        if BudgetHold.objects.filter(pk=hold.pk).delete()[0]:
            Budget.objects.filter(pk=budget_id, period_start=hold.period_start).update(
                reserved=_F("reserved") - hold.amount)
            released += 1
    return released


def _F(name: str) -> Any:
    from django.db.models import F

    return F(name)


def budget_holds_sweep(*, now: datetime | None = None) -> int:
    """Release every expired hold (at server start, after the turns of a dead process)."""
    now = now or timezone.now()
    ids = set(BudgetHold.objects.filter(expires_at__lt=now).values_list("budget_id", flat=True))
    return sum(_holds_expired_release(i, now) for i in ids)


def budget_settle(*, holds: Holds, input_tokens: int, output_tokens: int,
                  cost_nanos: int | None, now: datetime | None = None) -> None:
    """The turn of ``holds`` ended having used these tokens and cost (``None``: unknown, then
    its reservation is what it is charged): each hold is given back and the real use added,
    in the period it was held in. Idempotent. Call on a database thread."""
    if holds.settled:
        return
    holds.settled = True
    if not holds.held:
        return
    now = now or timezone.now()
    sp, rs, ps = _q("spent"), _q("reserved"), _q("period_start")
    same = f"{ps} = %s"
    crossed: list[tuple[BudgetRule, int]] = []
    with transaction.atomic(), connection.cursor() as cursor:
        kept = {b for b, in BudgetHold.objects.filter(turn=holds.turn).values_list("budget_id")}
        BudgetHold.objects.filter(turn=holds.turn).delete()
        for h in holds.held:
            used = (input_tokens + output_tokens if h.rule.unit == Budget.Unit.TOKENS
                    else cost_nanos if cost_nanos is not None else h.amount)
            back = h.amount if h.rule.id in kept else 0
            p = _dt(h.period_start)
            cursor.execute(
                f"UPDATE {_T} SET {sp} = {sp} + CASE WHEN {same} THEN %s ELSE 0 END, "  # noqa: S608
                f"{rs} = {rs} - CASE WHEN {same} THEN %s ELSE 0 END WHERE {_q('id')} = %s "
                f"RETURNING {sp}", [p, used, p, back, h.rule.id])
            row = cursor.fetchone()
            if row is not None:
                crossed.append((h.rule, row[0]))
    for rule, spent in crossed:  # the feed hears of a threshold once a period
        if rule.soft_percent and spent * 100 >= rule.limit * rule.soft_percent:
            _signal_once(rule, "budget_threshold", "threshold_period", now,
                         percent=rule.soft_percent)
        if spent >= rule.limit:
            _signal_once(rule, "budget_exceeded", "exceeded_period", now, percent=100)


_signalled: set[tuple[int, str, datetime]] = set()  # this process's, to skip asking again


def _signal_once(rule: BudgetRule, kind: str, mark: str, now: datetime,
                 percent: int | None = None) -> None:
    """Tell the feed ``kind`` for ``rule`` once a period: the mark's conditional update
    decides which process does (with ``percent``: only once spend reached it)."""
    start = period_start(rule.period, now)
    if (rule.id, kind, start) in _signalled:
        return
    rows = Budget.objects.filter(pk=rule.id, period_start__lte=start)
    if percent is not None:
        rows = rows.filter(period_start=start, spent__gte=rule.limit * percent / 100)
    from django.db.models import Q

    rows = rows.filter(Q(**{f"{mark}__isnull": True}) | Q(**{f"{mark}__lt": start}))
    done = rows.update(**{mark: start})
    if percent is not None:
        _signalled.add((rule.id, kind, start))  # reached: it stays so until the period ends
    if not done:
        return
    spent = Budget.objects.filter(pk=rule.id).values_list("spent", flat=True).first() or 0
    realtime.send_event_on_commit(events.budget_signal(kind, rule=rule, spent=spent,
                                                       period_start=start.isoformat()))


# -- managing them -------------------------------------------------------------------------

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
    if budget.soft_percent is not None and not 1 <= budget.soft_percent <= 100:
        raise InvalidRequest("soft_percent is between 1 and 100.", param="soft_percent")
    clash = Budget.objects.filter(name=budget.name).exclude(pk=budget.pk).exists()
    if clash:
        raise InvalidRequest(f"A budget named '{budget.name}' exists.", param="name",
                             code="budget_exists")


def budget_save(*, budget: Budget | None, fields: dict[str, Any], actor: Actor | None
                ) -> Budget:
    """Create (``budget=None``) or change a budget, audited. ``fields``: the model's, with
    ``limit`` in the budget's unit as given (USD as a decimal, tokens as an integer), ``key``
    a key's prefix or id and ``agent`` a slug."""
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
    rows = ApiKey.objects.filter(pk=int(value)) if str(value).isdigit() else \
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
