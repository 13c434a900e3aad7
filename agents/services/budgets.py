"""Budgets that hold under concurrency, across processes.

Before a turn, :func:`budget_reserve` holds the turn's worst case (its prompt's estimated
tokens plus its output limit; priced, for a budget in money) against every budget that
applies, each with one conditional ``UPDATE``: ``reserved`` grows only if ``spent +
reserved`` stays within the limit. The database decides (a row lock on PostgreSQL, the write
lock on SQLite), never a read followed by a write, so fifty turns racing at a budget with room
for ten get ten holds, whichever processes serve them. All of a turn's holds are taken in one
transaction, budgets in id order (no deadlock): refused by one, it holds none.

The turn's holds are written on its thread with its lease (``Thread.budget_holds``): when the
turn ends, however it ends (a reply, an error, a kill, a client gone), :func:`budget_settle`
gives them back and adds what the turn really used, while the reply's own write clears them.
A turn whose process died is found by its expired lease (the next turn on its thread, or the
sweep at server start: ``agents.services.leases``), which gives its holds back
(:func:`budget_holds_release`). On SQLite holding and settling are one statement each in
the transactions that store the turn and its reply; on PostgreSQL they are part of those
statements (CTEs: :func:`budget_reserve_statement`, :func:`budget_settle_statement`), so a
turn's budgets cost it no round trip (as statements of their own they cost +0.80 ms of the
server's CPU a turn with three budgets, and a hold left when a process died between the
reply and its settlement; scripts/perf/spend.py).

A new period (day, month, in UTC) starts in the statement of its first reservation, which
resets ``spent`` and ``reserved`` (holds of the period before settle into nothing)."""

from __future__ import annotations

import functools
import logging
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents.kernel.exceptions import QuotaExceeded
from agents.models import Budget
from agents.outlet import events, realtime
from agents.selectors.budgets import BudgetRule, period_end, period_start
from agents.services.prices import Price, price_of
from agents.services.webhooks import webhook_budget_data, webhook_event_send

log = logging.getLogger("gaia.budgets")

_T = "agents_budget"


def _q(name: str) -> str:
    return f'"{name}"'  # PostgreSQL's and SQLite's quoting alike (no lookup: it is per turn)


def _dt(value: datetime, vendor: str) -> Any:
    """A period's start as a parameter: PostgreSQL's driver takes an aware datetime itself."""
    return value if vendor == "postgresql" else _prepared(value, vendor)


@functools.lru_cache(maxsize=512)
def _prepared(value: datetime, vendor: str) -> Any:
    """A datetime as the database takes it: periods repeat (a day's, a month's), and an
    expiry is to the second, so most are prepared once (15 us each otherwise, 7 a turn)."""
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

    def stored(self) -> dict[str, Any]:
        """What the turn's thread keeps of them while it runs (``Thread.budget_holds``)."""
        return {str(h.rule.id): [h.amount, h.period_start.isoformat()] for h in self.held}


_B = f'{_T}.'  # a column of the budget's row, where another table has one of that name


def _rows(n: int, vendor: str, columns: tuple[tuple[str, str], ...]) -> str:
    """``n`` rows of parameters named ``columns`` (name, SQL type) as a table ``v``: a
    SELECT ... UNION ALL (SQLite names no columns of a VALUES list). Three parameters a
    budget, where a CASE per value repeated them: 9 instead of 51 for three budgets, and on
    PostgreSQL every parameter is one more value to send (scripts/perf/spend.py)."""
    if vendor == "postgresql":
        one = ", ".join(f"CAST(%s AS {kind}) AS {name}" for name, kind in columns)
    else:
        one = ", ".join(f"%s AS {name}" for name, _ in columns)
    return "(" + " UNION ALL ".join([f"SELECT {one}"] * n) + ") AS v"


_HOLD = (("id", "BIGINT"), ("p", "TIMESTAMP WITH TIME ZONE"), ("a", "BIGINT"))
_USE = (("id", "BIGINT"), ("p", "TIMESTAMP WITH TIME ZONE"), ("u", "BIGINT"), ("b", "BIGINT"))


@functools.lru_cache(maxsize=32)
def _reserve_sql(n: int, vendor: str) -> str:
    """One ``UPDATE`` that holds ``v.a`` on every one of ``n`` budgets that has room for it
    in its period ``v.p`` (a period that began since starts afresh in the same statement),
    returning the ids it held on. Parameters: (id, period start, amount) a budget."""
    ps, sp, rs = f"{_B}{_q('period_start')}", f"{_B}{_q('spent')}", f"{_B}{_q('reserved')}"
    fresh = f"{ps} < v.p"
    return (f"UPDATE {_T} SET {_q('spent')} = CASE WHEN {fresh} THEN 0 ELSE {sp} END, "  # noqa: S608
            f"{_q('reserved')} = CASE WHEN {fresh} THEN v.a ELSE {rs} + v.a END, "
            f"{_q('period_start')} = CASE WHEN {fresh} THEN v.p ELSE {ps} END "
            f"FROM {_rows(n, vendor, _HOLD)} WHERE {_B}{_q('id')} = v.id "
            f"AND (CASE WHEN {fresh} THEN 0 ELSE {sp} + {rs} END) + v.a <= "
            f"{_B}{_q('limit')}{_in_order(n, vendor)} RETURNING {_B}{_q('id')}")


@functools.lru_cache(maxsize=32)
def _settle_sql(n: int, vendor: str) -> str:
    """Add each budget's use ``v.u`` and give back its hold ``v.b``, in the period ``v.p``
    it was held in, returning each one's spend. Parameters: (id, period, use, back)."""
    ps, sp, rs = f"{_B}{_q('period_start')}", f"{_B}{_q('spent')}", f"{_B}{_q('reserved')}"
    return (f"UPDATE {_T} SET {_q('spent')} = {sp} + CASE WHEN {ps} = v.p THEN v.u "  # noqa: S608
            f"ELSE 0 END, {_q('reserved')} = {rs} - CASE WHEN {ps} = v.p THEN v.b ELSE 0 END "
            f"FROM {_rows(n, vendor, _USE)} WHERE {_B}{_q('id')} = v.id"
            f"{_in_order(n, vendor)} RETURNING {_B}{_q('id')}, {sp}")


def _in_order(n: int, vendor: str) -> str:
    """PostgreSQL, several budgets: their rows locked in id order first (parameters: the
    ids, sorted, last), so that two turns' statements over the same budgets never wait for
    each other in opposite orders (a deadlock). SQLite has one writer. (The ids one
    parameter each: psycopg dumps a list in Python, 20 us a turn.)"""
    if vendor != "postgresql" or n < 2:
        return ""
    ids = ", ".join(["%s"] * n)
    return (f" AND {_B}{_q('id')} IN (SELECT {_q('id')} FROM {_T} WHERE {_q('id')} "  # noqa: S608
            f"IN ({ids}) ORDER BY {_q('id')} FOR UPDATE)")


def _with_order(params: list[Any], ids: list[int], vendor: str) -> list[Any]:
    if vendor != "postgresql" or len(ids) < 2:
        return params
    return [*params, *sorted(ids)]


@functools.lru_cache(maxsize=64)
def _placeholders(sql: str, vendor: str) -> str:
    return sql.replace("%s", "?") if vendor == "sqlite" else sql


def _run(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """``sql`` on the database driver's own cursor, binding its parameters on the server:
    Django's wrappers rewrote a budget statement's placeholders with a regular expression on
    every turn (SQLite), and wrote each parameter into the statement's text (PostgreSQL's
    client-side binding); both cost more than the statements (py-spy, scripts/perf/spend.py).
    Inside the caller's transaction, if any."""
    connection.ensure_connection()
    raw = connection.connection
    vendor = connection.vendor
    if vendor == "sqlite":
        cursor: Any = sqlite3.Cursor(raw)  # not the connection's factory (Django's wrapper)
        execute = functools.partial(cursor.execute, _placeholders(sql, vendor), params)
    else:
        import psycopg

        cursor = psycopg.Cursor(raw)  # server-side binding; prepared as the turn's are
        execute = functools.partial(cursor.execute, sql, params,
                                    prepare=settings.GAIA_DB_PREPARED_STATEMENTS or None)
    try:
        execute()
        return cursor.fetchall() if cursor.description else []
    finally:
        cursor.close()


def _amount(rule: BudgetRule, *, tokens: int, price: Price | None, input_tokens: int,
            output_tokens: int) -> int | None:
    if rule.unit == Budget.Unit.TOKENS:
        return tokens
    if price is None:
        return None
    return price.cost_nanos(input_tokens, output_tokens)


def _planned(*, rules: list[BudgetRule], turn: str, provider_name: str, model: str,
             input_tokens: int, output_tokens: int, now: datetime, vendor: str
             ) -> tuple[Holds, list[Any]]:
    """The holds ``rules`` take for this turn, and their statement's parameters (refused
    here, before any statement, by a money budget and a model with no known price)."""
    price = price_of(provider_name=provider_name, model=model) if any(
        r.unit == Budget.Unit.USD for r in rules) else None
    tokens = input_tokens + output_tokens
    held = []
    for rule in rules:
        amount = _amount(rule, tokens=tokens, price=price, input_tokens=input_tokens,
                         output_tokens=output_tokens)
        if amount is None:
            _refuse(rule, f"no price is known for the model '{model}' (set one)", now)
        held.append(Held(rule, amount, period_start(rule.period, now)))  # type: ignore[arg-type]
    params = [v for h in held for v in (h.rule.id, _dt(h.period_start, vendor), h.amount)]
    return Holds(turn, held, price), _with_order(params, [h.rule.id for h in held], vendor)


@dataclass(frozen=True)
class HoldStatement:
    """A turn's holds as part of the statement that stores it (PostgreSQL: a CTE, so that
    holding costs no round trip of its own; scripts/perf/spend.py): ``sql`` is an ``UPDATE``
    returning a row for each budget it held on, all ``count`` of them or the statement must
    fail (the caller's condition), ``holds`` what the turn then holds. Refused, the caller
    runs :func:`budget_reserve`, which names the budget."""

    sql: str
    params: list[Any]
    count: int
    holds: Holds


def budget_reserve_statement(*, rules: list[BudgetRule], turn: str, provider_name: str,
                             model: str, input_tokens: int, output_tokens: int
                             ) -> HoldStatement:
    """:func:`budget_reserve`'s statement, unsent (see :class:`HoldStatement`)."""
    vendor = connection.vendor
    holds, params = _planned(rules=rules, turn=turn, provider_name=provider_name, model=model,
                             input_tokens=input_tokens, output_tokens=output_tokens,
                             now=timezone.now(), vendor=vendor)
    n = len(holds.held)
    return HoldStatement(_reserve_sql(n, vendor), params, n, holds)


def budget_reserve(*, rules: list[BudgetRule], turn: str, provider_name: str, model: str,
                   input_tokens: int, output_tokens: int, now: datetime | None = None
                   ) -> Holds:
    """Hold ``input_tokens + output_tokens`` (priced by ``provider_name``'s ``model`` for a
    budget in money) against every budget in ``rules``, or raise :class:`QuotaExceeded`
    naming one that has no room (and hold nothing). A money budget cannot hold a turn whose
    model has no known price: it is refused, not let through. Call on a database thread.

    One ``UPDATE`` for every budget (reading the holds back, one row at a time through the
    ORM, cost 1 ms a turn with three budgets: scripts/perf/spend.py)."""
    now, vendor = now or timezone.now(), connection.vendor
    holds, params = _planned(rules=rules, turn=turn, provider_name=provider_name, model=model,
                             input_tokens=input_tokens, output_tokens=output_tokens, now=now,
                             vendor=vendor)
    n = len(holds.held)
    # One statement: atomic alone. Inside the turn's own transaction, a refusal rolls that
    # back; else what it held on some budgets is given back.
    got = {row[0] for row in _run(_reserve_sql(n, vendor), params)}
    if len(got) < n and connection.in_atomic_block:
        transaction.set_rollback(True)  # all or none
    if len(got) == n:
        return holds
    if got and not connection.in_atomic_block:  # held on some, committed: give them back
        _unreserve({h.rule.id: h.amount for h in holds.held if h.rule.id in got},
                   {h.rule.id: _dt(h.period_start, vendor) for h in holds.held
                    if h.rule.id in got})
    _refuse(next(h.rule for h in holds.held if h.rule.id not in got),
            "it has no room for this request", now)
    raise AssertionError("unreachable")


def _unreserve(amounts: dict[int, int], periods: dict[int, Any]) -> None:
    vendor = connection.vendor
    _run(_settle_sql(len(amounts), vendor), _with_order(
        [v for pk in amounts for v in (pk, periods[pk], 0, amounts[pk])], list(amounts),
        vendor))


def _refuse(rule: BudgetRule, why: str, now: datetime) -> None:
    """Raise the refusal; the feed hears of it once a period, once the transaction the
    caller may hold has ended (:func:`budget_refusal_announce`), or now if it holds none."""
    end = period_end(rule.period, now)
    exc = QuotaExceeded(
        f"Budget '{rule.name}' ({rule.target}, {rule.amount_public(rule.limit)} "
        f"{rule.unit} a {rule.period if rule.period != 'total' else 'lifetime'}): {why}.",
        retry_after=max(1, int((end - now).total_seconds()) + 1) if end else None)
    exc.announce = functools.partial(_signal_once, rule, "budget_exceeded", "exceeded_period",
                                     now)
    if not connection.in_atomic_block:
        budget_refusal_announce(exc)
    raise exc


def budget_refusal_announce(exc: QuotaExceeded) -> None:
    """Tell the feed of a refusal (once a period), after the transaction that refused it."""
    announce, exc.announce = exc.announce, None
    if callable(announce):
        announce()


def budget_holds_release(held: dict[str, Any] | None) -> None:
    """Give back what a turn held (``Thread.budget_holds``, as :meth:`Holds.stored` wrote
    it) whose process died: found by its expired lease, in the transaction that records it
    as interrupted. Nothing is charged: what it used is unknown."""
    if not held:
        return
    amounts = {int(pk): amount for pk, (amount, _) in held.items()}
    vendor = connection.vendor
    periods = {int(pk): _dt(datetime.fromisoformat(start), vendor)
               for pk, (_, start) in held.items()}
    _unreserve(amounts, periods)


def budget_settle_statement(*, holds: Holds, input_tokens: int, output_tokens: int,
                            cost_nanos: int | None, kept: bool = True
                            ) -> tuple[str, list[Any]] | None:
    """:func:`budget_settle`'s statement (an ``UPDATE`` returning each budget's id and spend),
    unsent, for the statement that stores the turn's reply (PostgreSQL: a CTE, no round trip
    of its own, and the reply's write that clears the thread's holds is the one that settles
    them); ``None`` when there is nothing to settle. Then :func:`budget_settled`."""
    if holds.settled or not holds.held:
        return None
    used = {h.rule.id: (input_tokens + output_tokens if h.rule.unit == Budget.Unit.TOKENS
                        else cost_nanos if cost_nanos is not None else h.amount)
            for h in holds.held}
    vendor = connection.vendor
    params = [v for h in holds.held for v in (h.rule.id, _dt(h.period_start, vendor),
                                              used[h.rule.id], h.amount if kept else 0)]
    return _settle_sql(len(used), vendor), _with_order(params, list(used), vendor)


def budget_settle(*, holds: Holds, input_tokens: int, output_tokens: int,
                  cost_nanos: int | None, now: datetime | None = None,
                  kept: bool = True) -> None:
    """The turn of ``holds`` ended having used these tokens and cost (``None``: unknown, then
    its reservation is what it is charged): each hold is given back and the real use added,
    in the period it was held in, in one statement. ``kept=False``: its holds were given
    back already (its lease expired and another process recorded it as interrupted), so
    only its use is added. Idempotent. Call on a database thread."""
    statement = budget_settle_statement(holds=holds, input_tokens=input_tokens,
                                        output_tokens=output_tokens, cost_nanos=cost_nanos,
                                        kept=kept)
    holds.settled = True
    if statement is not None:
        budget_settled(holds=holds, spent=_run(*statement), now=now)


def budget_settled(*, holds: Holds, spent: list[Any] | None, now: datetime | None = None
                   ) -> None:
    """``holds`` were settled, leaving each budget's spend ``spent`` ((id, spent) pairs):
    the feed hears of a threshold or a limit reached, once a period."""
    holds.settled = True
    rules = {h.rule.id: h.rule for h in holds.held}
    now = now or timezone.now()
    for pk, total in spent or ():
        rule = rules[pk]
        if rule.soft_percent and total * 100 >= rule.limit * rule.soft_percent:
            _signal_once(rule, "budget_threshold", "threshold_period", now,
                         percent=rule.soft_percent)
        if total >= rule.limit:
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
    webhook_event_send(type=kind.replace("_", "."), data=webhook_budget_data(
        rule, spent=spent, period_start=start.isoformat(), percent=percent))
