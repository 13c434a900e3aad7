"""The key check of every /v1 request, in process: from memory on the event loop while the
configuration stamp says that memory is current, from the database otherwise."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.core.cache import cache

from agents import services
from agents.infra import database
from agents.infra.database import ReadNotAvailable, run_db
from agents.kernel.exceptions import AgentNotFound, AuthenticationFailed, RateLimited
from agents.turns import door

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def db_trips(monkeypatch):
    """Calls that went to a database thread from the door (the real run_db still runs)."""
    trips = []

    async def counted(fn, /, *args, **kwargs):
        trips.append(fn.__name__)
        return await run_db(fn, *args, **kwargs)

    monkeypatch.setattr(door, "run_db", counted)
    return trips


def authorize(secret, model="echo"):
    return door.authorize(raw_key=secret, model=model)


async def test_a_warm_key_check_needs_no_database_thread(echo_agent, make_key, db_trips):
    key, secret = await run_db(make_key)
    got_key, agent = await authorize(secret)  # first sight: loaded on a database thread
    assert (got_key.pk, agent.slug) == (key.pk, "echo")
    assert db_trips == ["request_authorize"]
    db_trips.clear()
    for _ in range(3):
        got_key, agent = await authorize(secret)
        assert (got_key.pk, agent.slug) == (key.pk, "echo")
    assert db_trips == []
    # A wrong secret for a known prefix is refused from memory too.
    with pytest.raises(AuthenticationFailed):
        await authorize(secret[:-2] + ("AA" if not secret.endswith("AA") else "BB"))
    assert db_trips == []


async def test_a_revocation_elsewhere_refuses_the_next_request(echo_agent, make_key,
                                                               db_trips):
    key, secret = await run_db(make_key)
    await authorize(secret)
    await authorize(secret)
    await run_db(services.api_key_revoke, key=key)  # as another process would
    with pytest.raises(AuthenticationFailed, match="revoked"):
        await authorize(secret)
    assert db_trips[-1] == "request_authorize"  # the stamp changed: memory was not trusted


async def test_an_unknown_model_is_looked_up_then_404(echo_agent, make_key, db_trips):
    _, secret = await run_db(make_key)
    await authorize(secret)
    db_trips.clear()
    with pytest.raises(AgentNotFound):
        await authorize(secret, model="nope")
    assert db_trips == ["request_authorize"]  # unknown slugs are not remembered


async def test_rate_limits_count_each_request_once(echo_agent, make_key):
    key, secret = await run_db(make_key, requests_per_minute=3)
    if time.time() % 60 > 55:  # the counter's one-minute window must not turn over
        await asyncio.sleep(6)
    cache.delete(f"gaia:rl:{key.pk}:{int(time.time() // 60)}")  # a deleted key's, same pk
    for _ in range(3):  # the first from the database, the others from memory (or Redis)
        await authorize(secret)
    with pytest.raises(RateLimited):
        await authorize(secret)


def test_in_memory_sqlite_is_read_on_a_database_thread():
    with pytest.raises(ReadNotAvailable):
        database._sqlite_read(":memory:", "SELECT 1")


async def test_a_lost_read_connection_is_replaced(echo_agent, make_key, db_trips):
    from django.db import connection

    key, secret = await run_db(make_key)
    await authorize(secret)
    await authorize(secret)
    loop = asyncio.get_running_loop()
    if connection.vendor == "postgresql":
        # The server ends the event loop's connection, as a restart or an idle timeout would.
        pid = database._pg_reads[loop].info.backend_pid

        def terminate():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])  # waits for it

        await run_db(terminate)
    else:
        database.close_loop_reads()  # the SQLite read connection is gone
    db_trips.clear()
    got_key, _ = await authorize(secret)  # answered all the same, from a database thread
    assert got_key.pk == key.pk
    assert db_trips == ["request_authorize"]
    got_key, _ = await authorize(secret)  # a new read connection: on the loop again
    assert got_key.pk == key.pk
    assert db_trips == ["request_authorize"]
