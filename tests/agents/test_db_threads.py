"""The database threads (agents.infra.database): a call goes to a thread with nothing to do.

In CI a ``/health`` waited 676 ms for the one database thread that was storing a 1 MB message
(PostgreSQL's trigram index of its text), three others idle: a plain rotation handed every
fourth call to that thread whatever it was doing."""

from __future__ import annotations

import asyncio

import pytest
from django.db import connection

from agents.infra import database
from agents.infra.database import run_db


@pytest.mark.django_db(transaction=True)
def test_a_slow_statement_holds_no_quick_one_while_a_thread_is_idle() -> None:
    if database._size() < 2:
        pytest.skip("SQLite: one database thread (its writes are serial anyway)")
    order: list[object] = []

    def slow() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(2)")
        order.append("slow")

    def quick(n: int) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        order.append(n)

    async def main() -> None:
        held = asyncio.ensure_future(run_db(slow))
        for n in range(3 * database._size()):  # every thread's turn, more than once
            await run_db(quick, n)
        await held

    asyncio.run(main())
    assert order == [*range(3 * database._size()), "slow"]
