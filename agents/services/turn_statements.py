"""A turn's writes on PostgreSQL as one statement at each end: its new thread with the
client's messages, and its reply with the thread's update and the usage roll-up.

On SQLite a statement is a function call in the process; on PostgreSQL it is a round trip,
and a chat turn was ten of them (BEGIN, INSERT thread, INSERT messages, COMMIT; BEGIN,
UPDATE thread, INSERT reply, upsert usage, SELECT the agent's other leased thread, COMMIT),
each costing the server's CPU and a PostgreSQL backend's. Written as one statement with
data-modifying CTEs they are two, each atomic by itself, so no BEGIN or COMMIT is sent
outside a transaction (`scripts/perf/chat.py --production` gives the figures in the
README). What is written is the same rows, in the same transaction boundaries as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connection, transaction

from agents.infra.rows import rows_cursor, rows_insert_sql, rows_inserted, rows_update_sql
from agents.models import Message, Thread
from agents.selectors.agents import leased_thread_sql
from agents.services.usage import UsageTurn, usage_statements

if TYPE_CHECKING:
    from agents.services.budgets import HoldStatement


def single_statements() -> bool:
    """Whether this database takes a turn's writes as one statement (PostgreSQL: CTEs that
    write; SQLite has none, and needs none)."""
    return connection.vendor == "postgresql"


def _held_first(hold: HoldStatement | None) -> tuple[str, list[Any], str]:
    """The turn's budget holds as the statement's first CTE (``spend``), and the condition
    that all of them were taken (a statement whose condition fails writes nothing)."""
    if hold is None:
        return "", [], ""
    return (f"spend AS ({hold.sql}), ", hold.params,
            f" AND (SELECT count(*) FROM spend) = {int(hold.count)}")  # noqa: S608


def thread_create_one(thread: Thread, rows: Sequence[Message],
                      hold: HoldStatement | None = None) -> None:
    """Insert ``thread`` and its first ``rows`` in one statement (primary keys set on them).
    Outside a transaction it is one round trip, atomic by itself. ``hold``: the turn's budget
    holds, taken in the same statement; when a budget has no room the messages have no
    thread, the statement fails on their NOT NULL and nothing is written: raises
    :class:`NotOneStatement`."""
    qn = connection.ops.quote_name
    t_sql, t_params = rows_insert_sql([thread])
    spend, h_params, all_held = _held_first(hold)
    if hold is None:
        m_sql, m_params = rows_insert_sql(rows)
    else:
        t_sql += f" RETURNING {qn('id')}"
        m_sql, m_params = rows_insert_sql(rows, computed={"thread_id": (
            f"(SELECT {qn('id')} FROM new_thread WHERE TRUE{all_held})")})  # noqa: S608
    try:
        with (transaction.atomic() if connection.in_atomic_block and hold else nullcontext()), \
                rows_cursor(connection, prepared=True) as cursor:
            cursor.execute(f"WITH {spend}new_thread AS ({t_sql}) {m_sql}",
                           h_params + t_params + m_params)
            ids = [r[0] for r in cursor.fetchall()]
    except IntegrityError as exc:
        if hold is None:
            raise
        raise NotOneStatement(str(exc)) from None
    rows_inserted([thread], [])
    rows_inserted(rows, ids)


class NotOneStatement(Exception):
    """Nothing was written: the turn no longer holds its thread's lease, or its writes do not
    fit one statement. The caller takes the transaction of several."""


def thread_continue_one(*, thread_id: Any, digest: str, count: int, update: dict[str, Any],
                        rows: Sequence[Message], hold: HoldStatement | None = None) -> None:
    """Take the lease of the thread ``thread_id`` (free: no lease, not an expired one) whose
    stored conversation is still ``digest`` with ``count`` messages, apply ``update`` to it
    and insert the client's ``rows`` after them, in one statement (primary keys set on the
    rows). The rows' thread is read from the update, so when the thread is busy or moved on
    the update matches nothing, the insert fails on its NOT NULL and nothing is written:
    raises :class:`NotOneStatement` (the caller takes the transaction, which tells a busy
    thread from an abandoned one). Before: BEGIN, SELECT, the lease's UPDATE, INSERT, the
    count's UPDATE, COMMIT."""
    qn = connection.ops.quote_name
    u_sql, u_params = rows_update_sql(
        Thread, where={"id": thread_id, "history_digest": digest, "message_count": count},
        values=update)
    m_sql, m_params = rows_insert_sql(
        rows, computed={"thread_id": f"(SELECT {qn('id')} FROM held)"})  # noqa: S608
    spend, h_params, all_held = _held_first(hold)
    sql = (f"WITH {spend}held AS ({u_sql} AND {qn('lock_expires_at')} IS NULL{all_held} "
           f"RETURNING {qn('id')}) {m_sql}")
    try:
        with (transaction.atomic() if connection.in_atomic_block else nullcontext()), \
                rows_cursor(connection, prepared=True) as cursor:
            cursor.execute(sql, h_params + u_params + m_params)
            ids = [r[0] for r in cursor.fetchall()]
    except IntegrityError as exc:
        raise NotOneStatement(str(exc)) from None
    rows_inserted(rows, ids)


def turn_finish_one(*, thread_id: Any, lock_token: str, update: dict[str, Any], row: Message,
                    usage_of: Callable[[Message], UsageTurn], agent_id: int, now: Any,
                    ask_busy: bool = True, settle: tuple[str, list[Any]] | None = None
                    ) -> tuple[Any, list[Any] | None]:
    """Update the thread held by ``lock_token``, insert the reply ``row`` after it and add
    the turn to the usage roll-up, in one statement; returns another thread of the agent
    whose turn holds a live lease (the agent is still at work), or ``None`` (not asked
    with ``ask_busy=False``: the caller knows), and what ``settle`` returned (the statement
    that settles the turn's budget holds, :func:`agents.services.budget_settle_statement`:
    in the same statement as the write that clears them from the thread).

    The reply's ``seq`` is read from the thread's update, so when the lease was lost (the
    update matched no row) the reply has none, the statement fails on its NOT NULL and
    nothing is written: raises :class:`NotOneStatement`, and the caller takes the slow path."""
    u_sql, u_params = rows_update_sql(
        Thread, where={"id": thread_id, "lock_token": lock_token}, values=update)
    qn = connection.ops.quote_name
    m_sql, m_params = rows_insert_sql(
        [row], computed={"seq": f"(SELECT {qn('message_count')} - 1 FROM held)"})  # noqa: S608
    statements, _ = usage_statements(turns=[usage_of(row)])
    if not 1 <= len(statements) <= 2:  # its rows, and its user's: anything else, the slow path
        raise NotOneStatement("usage in several statements")
    pk = Thread._meta.pk
    assert pk is not None
    usage = ", ".join(f"usage{i} AS ({g_sql})" for i, (g_sql, _) in enumerate(statements))
    spend, s_params = (f", spend AS ({settle[0]})", settle[1]) if settle else ("", [])
    sql = f"WITH held AS ({u_sql} RETURNING {qn('message_count')}), {usage}{spend} {m_sql}"
    params = u_params + [p for _, g_params in statements for p in g_params] + s_params + m_params
    if ask_busy:
        sql += f", ({leased_thread_sql()})"
        params += [agent_id, Thread._meta.get_field("lock_expires_at").get_db_prep_value(
            now, connection), pk.get_db_prep_value(thread_id, connection)]
    if settle is not None:
        sql += f", ARRAY(SELECT ARRAY[{qn('id')}, {qn('spent')}] FROM spend)"  # noqa: S608
    try:
        # Inside a transaction (a test's, a caller's) a failure must not end it: a savepoint.
        with (transaction.atomic() if connection.in_atomic_block else nullcontext()), \
                rows_cursor(connection, prepared=True) as cursor:
            cursor.execute(sql, params)
            new_id, *more = cursor.fetchone()
    except IntegrityError as exc:
        raise NotOneStatement(str(exc)) from None
    rows_inserted([row], [new_id])
    row.seq = update["message_count"] - 1
    spent = more.pop() if settle is not None else None
    return (pk.to_python(more[0]) if more and more[0] is not None else None), spent

