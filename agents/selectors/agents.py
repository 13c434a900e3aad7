"""Reads of agents: the catalogue a key may use, and each agent's live state (what operators
see: reference 003's agents with their state, current thread and queue depth)."""

from __future__ import annotations

import functools
import uuid
from typing import Any

from django.db import connection
from django.db.models import OuterRef, Subquery

from agents.kernel.exceptions import NotFound
from agents.models import Agent, ApiKey, Thread
from agents.models.threads import stopped_from_outside
from agents.selectors.ordering import Ordering
from agents.selectors.threads import iso


def model_list(*, api_key: ApiKey | None) -> list[Agent]:
    """Enabled, listed agents this key may use, read fresh on every call (admin edits show
    at once). Unlisted agents are left out here only: they answer when named."""
    agents = (Agent.objects.filter(enabled=True, listed=True).select_related("provider")
              .order_by("slug"))
    if api_key is not None:
        allowed = list(api_key.agents.values_list("pk", flat=True))
        if allowed:
            agents = agents.filter(pk__in=allowed)
    return list(agents)


_waiting_turns: dict[int, int] = {}


def turn_waiting(*, agent_id: int, change: int) -> None:
    """Count a turn of this process starting (+1) or ending (-1) a wait for its agent's
    provider or for a thread lease. Event-loop only, so a plain dict suffices."""
    count = _waiting_turns.get(agent_id, 0) + change
    if count > 0:
        _waiting_turns[agent_id] = count
    else:
        _waiting_turns.pop(agent_id, None)


@functools.cache
def leased_thread_sql() -> str:
    """The query of :func:`agent_leased_thread`; its parameters: the agent, the time, the
    thread to leave out."""
    qn = connection.ops.quote_name
    return (f"SELECT {qn('id')} FROM {qn(Thread._meta.db_table)} "  # noqa: S608 - no input
            f"WHERE {qn('agent_id')} = %s AND {qn('lock_expires_at')} > %s "
            f"AND {qn('id')} <> %s LIMIT 1")


def agent_leased_thread(*, agent_id: int, now: Any, other_than: uuid.UUID) -> uuid.UUID | None:
    """A thread of the agent other than ``other_than`` whose turn holds a live lease (in
    any process): whether the agent is still at work. Raw SQL on the ``thread_agent_lease``
    index: every turn's end asks, and the ORM's query building cost ten times the query."""
    pk = Thread._meta.pk
    assert pk is not None
    with connection.cursor() as cursor:
        cursor.execute(leased_thread_sql(), [
            agent_id, Thread._meta.get_field("lock_expires_at").get_db_prep_value(
                now, connection),
            pk.get_db_prep_value(other_than, connection)])
        row = cursor.fetchone()
    return pk.to_python(row[0]) if row else None


def queue_depth(*, agent_id: int) -> int:
    """Turns of this process waiting for the agent's provider or for a thread lease.

    Per process: with several web processes each counts its own (the feed's ``agent_state``
    events carry the count of the process whose turn changed state)."""
    return _waiting_turns.get(agent_id, 0)


def agent_peers() -> dict[str, set[str]]:
    """Each agent's peers: the agents its ``agent:<slug>`` tools call, and those whose tools
    call it (reference 003's ``peers``)."""
    peers: dict[str, set[str]] = {}
    for slug, tools in Agent.objects.values_list("slug", "tools"):
        for ref in tools or ():
            if isinstance(ref, str) and ref.startswith("agent:") and ref[6:] != slug:
                peers.setdefault(slug, set()).add(ref[6:])
                peers.setdefault(ref[6:], set()).add(slug)
    return peers


AGENT_ORDERING = Ordering(
    columns={"agent": "slug", "name": "display_name", "state": "state",
             "queue_depth": "queue_depth", "last_activity": "last_activity",
             "provider": "provider"}, default="agent")


def agent_list_public(*, slug: str | None = None, sort: str | None = None
                      ) -> list[dict[str, Any]]:
    """Every agent (or the one ``slug``) with its live state:

    ``paused`` (an operator paused it), ``waiting`` (a tool call of its waits for an
    operator's approval, or turns of this process wait for its provider or a thread lease,
    none running), ``processing`` (a thread of its holds a live lease, in any process:
    ``current_thread`` names one), ``error`` (its latest turn failed, of the turns that
    ended of their own: one its client, caller or server stopped is left out), else
    ``idle``. ``queue_depth`` counts this process's waiting turns (:func:`queue_depth`). ``peers``:
    the agents it may call (``agent:<slug>`` tools) and those that may call it. ``sort``: a
    column of :data:`AGENT_ORDERING` (by slug if none)."""
    AGENT_ORDERING.check(sort)
    from django.utils import timezone

    now = timezone.now()
    # Each agent's most recent thread, one read of the (agent, -updated_at) index however many
    # threads it has (a MAX over all of them grew with the data: issue 27), as subqueries of
    # the agents' own query: a query per agent was 8 of the list's 12 round trips, and each
    # round trip is a hand-off of the GIL among the site's threads (at c=8 on SQLite the list
    # kept 0.81-0.87 of its c=1 requests/s).
    latest = Thread.objects.filter(agent_id=OuterRef("pk")).order_by("-updated_at")
    # its light follows the latest turn of its own making (a cancelled run is no failure)
    own = latest.exclude(stopped_from_outside())
    agents = (Agent.objects.select_related("provider")
              .annotate(latest_status=Subquery(own.values("status")[:1]),
                        last_activity=Subquery(latest.values("updated_at")[:1]))
              .order_by("slug"))
    if slug is not None:
        agents = agents.filter(slug=slug)
    agents = list(agents)
    ids = [a.pk for a in agents]
    # Each agent's most recently active thread holding a live lease. Sorted here, not by the
    # database: ordered by updated_at, SQLite walked every thread of the agents by that
    # index (20 ms of 28 at 100,000 threads, issue 27) instead of the few live leases.
    busy: dict[int, str] = {}
    leased = Thread.objects.filter(agent_id__in=ids, lock_expires_at__gt=now).order_by()
    for agent_id, thread_id, _ in sorted(leased.values_list("agent_id", "pk", "updated_at"),
                                         key=lambda row: row[2], reverse=True):
        busy.setdefault(agent_id, str(thread_id))
    approving = set(Thread.objects.filter(agent_id__in=ids, status=Thread.Status.WAITING)
                    .values_list("agent_id", flat=True))
    peers = agent_peers()
    out = []
    for a in agents:
        depth = queue_depth(agent_id=a.pk)
        latest_status, last_activity = a.latest_status, a.last_activity
        if a.paused:
            state = "paused"
        elif a.pk in approving:
            state = "waiting"
        elif a.pk in busy:
            state = "processing"
        elif depth:
            state = "waiting"
        elif latest_status == Thread.Status.ERROR:
            state = "error"
        else:
            state = "idle"
        out.append({
            "name": a.slug,
            "slug": a.slug,
            "display_name": a.display_name,
            "description": a.description,
            "enabled": a.enabled,
            "paused": a.paused,
            "state": state,
            "current_thread": busy.get(a.pk),
            "queue_depth": depth,
            "last_activity": iso(last_activity),
            "peers": sorted(peers.get(a.slug, ())),
            "provider": a.provider.name,
            "model": a.model_name,
        })
    return AGENT_ORDERING.sort_dicts(out, sort) if sort else out


def _agent_not_found(slug: str) -> NotFound:
    return NotFound(f"No agent {slug!r}.", code="agent_not_found", param="slug")


def agent_public_get(*, slug: str) -> dict[str, Any]:
    """:func:`agent_list_public`'s entry for ``slug``, or :class:`NotFound`."""
    if "\x00" in slug:  # no slug holds one, and PostgreSQL refuses it in a query (a 500)
        raise _agent_not_found(slug)
    found = agent_list_public(slug=slug)
    if not found:
        raise _agent_not_found(slug)
    return found[0]


def agent_get(*, slug: str) -> Agent:
    """The agent ``slug`` (enabled or not, with its provider), or :class:`NotFound`."""
    if "\x00" in slug:  # as above
        raise _agent_not_found(slug)
    agent = Agent.objects.select_related("provider").filter(slug=slug).first()
    if agent is None:
        raise _agent_not_found(slug)
    return agent
