"""Reads of threads and messages: the public shapes operators see (reference 003, the feed
and the operator API), the filtered lists, and the stored replies clients continue from."""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

from django.db import connections
from django.db.models import BooleanField, F, Prefetch, Q, QuerySet, Subquery, Sum
from django.db.models.expressions import Expression, RawSQL

from agents.kernel import llm
from agents.kernel.exceptions import NotFound
from agents.models import Agent, AgentMessageTally, ApiKey, Message, Thread, ThreadTally
from agents.models.threads import stopped_from_outside
from agents.selectors.ordering import Ordering

THREAD_ORDERING = Ordering(
    columns={"last_activity": "updated_at", "created_at": "created_at", "title": "title",
             "status": "status", "message_count": "message_count",
             "input_tokens": "input_tokens", "output_tokens": "output_tokens"},
    default="-last_activity", default_order=("-updated_at", "pk"))


def iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def client_label(*, user: str | None, api_key: ApiKey | None) -> str:
    """Who speaks for the client in a thread: its user, else its key's name."""
    return user or (api_key.name if api_key is not None else "") or "anonymous"


def message_public(row: Message, *, agent: str, client: str) -> dict[str, Any]:
    """A stored message as operators see it: reference 003's ``id, thread_id, from, to,
    payload_type, payload, timestamp`` plus Gaia's own fields. Images are counted, not
    shown (they may be megabytes of base64)."""
    if row.role == Message.Role.ASSISTANT:
        sender, recipient = agent, client
        payload_type = "tool_calls" if row.tool_calls else "reply"
    else:  # user messages and tool results both come from the client
        sender, recipient = client, agent
        payload_type = "tool_result" if row.role == Message.Role.TOOL else "text"
    if row.sender:  # a team's inner work, or a reply by a member: who spoke is stored
        sender, recipient = row.sender, row.recipient or recipient
        if row.internal and row.role == Message.Role.USER:
            payload_type = "task"
    payload: dict[str, Any] = {"content": row.content}
    if row.reasoning:
        payload["reasoning"] = row.reasoning
    if row.tool_calls:
        payload["tool_calls"] = row.tool_calls
    if row.tool_call_id:
        payload["tool_call_id"] = row.tool_call_id
    if row.tool_calls or row.tool_call_id:
        # who runs the tool: the agent's own tools run in Gaia (internal work), a client's
        # tools in the client
        payload["origin"] = "agent" if row.internal else "client"
    if row.parts:
        payload["images"] = len(row.parts)
    return {
        "id": row.pk,
        "thread_id": str(row.thread_id),
        "seq": row.seq,
        "from": sender,
        "to": recipient,
        "role": row.role,
        "payload_type": payload_type,
        "payload": payload,
        "timestamp": iso(row.created_at),
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "usage_estimated": row.usage_estimated,
        "finish_reason": row.finish_reason or None,
        "ttft_ms": row.ttft_ms,
        "latency_ms": row.latency_ms,
        "response_id": row.response_id or None,
        "dialect": row.dialect or None,
        "provider": row.provider or None,
        "internal": row.internal,
        "passages": row.passages,
        "error": row.error or None,
        "note": row.note or None,
        "dropped_tools": row.dropped_tools or None,  # hosted tools left out (agents.tools.hosted)
    }


def thread_public(thread: Thread, *, agent: str, client: str) -> dict[str, Any]:
    """A thread as operators see it (reference 003 plus Gaia's own fields)."""
    return {
        "id": str(thread.pk),
        "agent": agent,
        "title": thread.title,
        "status": thread.status,
        "participants": [client, agent],
        "user": thread.user or None,
        "message_count": thread.message_count,
        "input_tokens": thread.input_tokens,
        "output_tokens": thread.output_tokens,
        "usage_estimated": thread.usage_estimated,
        "workspace_root": thread.workspace_root or None,
        "forked_from": str(thread.forked_from_id) if thread.forked_from_id else None,
        "created_at": iso(thread.created_at),
        "last_activity": iso(thread.updated_at),
        "error": thread.last_error or None,
        "route": thread.route,
        "run": thread.run_id,
    }


def thread_list_active(*, limit: int = 100) -> list[dict[str, Any]]:
    """The most recently active threads at work (``active``, or ``waiting`` for an approval:
    :attr:`Thread.RUNNING`): the feed's snapshot, the dashboard's list."""
    threads = (Thread.objects.filter(status__in=Thread.RUNNING)
               .select_related("agent", "api_key").order_by("-updated_at")[:limit])
    return [thread_public(t, agent=t.agent.slug,
                          client=client_label(user=t.user, api_key=t.api_key))
            for t in threads]


def thread_public_row(thread: Thread) -> dict[str, Any]:
    """:func:`thread_public` of a thread read with ``agent`` and ``api_key``."""
    return thread_public(thread, agent=thread.agent.slug,
                         client=client_label(user=thread.user, api_key=thread.api_key))


def message_public_row(row: Message) -> dict[str, Any]:
    """:func:`message_public` of a message read with ``thread__agent`` and
    ``thread__api_key``."""
    thread = row.thread
    return message_public(row, agent=thread.agent.slug,
                          client=client_label(user=thread.user, api_key=thread.api_key))


def thread_list(*, status: str | None = None, agent: str | None = None, since: Any = None,
                until: Any = None, q: str | None = None, run: int | None = None,
                sort: str | None = None) -> QuerySet[Thread]:
    """Threads, most recently active first. ``agent`` is an agent's slug, ``since`` keeps the
    threads active at or after that time, ``until`` those begun at or before it (together:
    the threads active in that window), ``q`` searches titles and message texts
    (case-insensitive substring). The threads of benchmark runs are left out, unless ``run``
    names the run whose threads to list (then only those). ``sort``: a column of
    :data:`THREAD_ORDERING` (InvalidRequest for another)."""
    threads = THREAD_ORDERING.apply(Thread.objects.select_related("agent", "api_key"), sort
                                    ).filter(run_id=run)
    if status:
        threads = threads.filter(status=status)
    if agent:
        threads = threads.filter(agent__slug=agent)
    if since is not None:
        threads = threads.filter(updated_at__gte=since)
    if until is not None:
        threads = threads.filter(created_at__lte=until)
    if q:
        threads = threads.filter(thread_matching(q))
    return threads


def thread_list_count(*, status: str | None = None, agent: str | None = None,
                      since: Any = None, until: Any = None, q: str | None = None,
                      run: int | None = None) -> int | None:
    """How many threads :func:`thread_list` with these filters lists, where the tally knows
    it without counting (no filter: every thread outside benchmark runs), else ``None``
    (count the list). What the thread list's API and page both ask."""
    if any(v is not None and v != "" for v in (status, agent, since, until, q, run)):
        return None
    return thread_total(runs=False)


def thread_total(*, runs: bool = True) -> int:
    """How many threads are stored (with ``runs=False``, those outside benchmark runs), kept
    by triggers (ThreadTally, migration 0024): a few small rows, not 100,000 counted."""
    total = ThreadTally.objects.aggregate(n=Sum("n"), runs=Sum("runs"))
    return (total["n"] or 0) - (0 if runs else total["runs"] or 0)


# The shortest text SQLite's trigram index can find (shorter ones are looked for by a scan).
TRIGRAM = 3


# Up to this many matching threads are read once and handed to the list's queries as ids;
# more, and those queries join the search itself.
MATCHES_READ = 5000


def thread_matches(q: str) -> QuerySet[Any]:
    """The query of the ids of the threads whose title or one of whose messages contains
    ``q`` (case-insensitive), found through the text indexes (migrations 0015 and 0020:
    trigram indexes on PostgreSQL, FTS5 on SQLite), not by reading every message: the two
    sets of ids, joined."""
    titles = Thread.objects.filter(title__icontains=q).order_by().values("pk")
    if connections[Message.objects.db].vendor == "sqlite" and len(q) >= TRIGRAM:
        phrase = '"' + q.replace('"', '""') + '"'  # an FTS5 string: every character literal
        titles = Thread.objects.filter(pk__in=RawSQL(  # migration 0020
            "SELECT thread_id FROM agents_thread_title WHERE id IN (SELECT rowid FROM "
            "agents_thread_title_fts WHERE agents_thread_title_fts MATCH %s)",
            (phrase,))).order_by().values("pk")
        messages = Message.objects.filter(pk__in=RawSQL(
            "SELECT rowid FROM agents_message_fts WHERE agents_message_fts MATCH %s",
            (phrase,))).order_by().values("thread_id")
    else:
        messages = Message.objects.filter(content__icontains=q).order_by().values("thread_id")
    return titles.union(messages)


def thread_matching(q: str) -> Q:
    """The condition on threads of :func:`thread_matches`: its ids read once when there are
    at most :data:`MATCHES_READ` (a list's count and its page then use the ids rather than
    each running the search again: two searches were most of a search's 55-68 ms at a
    million messages, issue 27), else the search itself as a subquery."""
    matching = thread_matches(q)
    # The ids as the database spells them (text), never as UUID objects: they only go back.
    sql, params = matching.query.sql_with_params()
    pg = connections[Thread.objects.db].vendor == "postgresql"
    with connections[Thread.objects.db].cursor() as cursor:
        cursor.execute(f"SELECT {'CAST(pk AS text)' if pg else 'pk'} FROM ({sql}) AS m "  # noqa: S608 - the ORM's
                       "LIMIT %s", [*params, MATCHES_READ + 1])
        ids = [row[0] for row in cursor.fetchall()]
    return Q(AmongIds(F("pk"), ids)) if len(ids) <= MATCHES_READ else Q(pk__in=matching)


class AmongIds(Expression):
    """``column IN ids`` (the ids as the database spells them), sent as one value: a
    PostgreSQL array's text, a JSON list on SQLite. As an ``IN`` of 1,000 placeholders each
    of a search's two queries spent 1.9 ms in Django's lookup and 1.6 ms in psycopg quoting
    them one by one, and as a list of UUIDs 1.1 ms in psycopg's array dumper (py-spy, 15 ms
    of CPU in the thread page's search at a million messages, issue 27)."""

    conditional = True
    output_field = BooleanField()

    def __init__(self, column: Any, ids: list[str]) -> None:
        super().__init__()
        self.column, self.ids = column, ids

    def get_source_expressions(self) -> list[Any]:
        return [self.column]

    def set_source_expressions(self, exprs: list[Any]) -> None:
        (self.column,) = exprs

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.column)
        if connection.vendor == "postgresql":
            return f"{column} = ANY(CAST(%s AS uuid[]))", [*params, "{" + ",".join(self.ids) + "}"]
        return (f"{column} IN (SELECT value FROM json_each(%s))",  # noqa: S608 - compiled
                [*params, json.dumps(self.ids)])


def thread_admin_search(threads: QuerySet[Thread], term: str) -> QuerySet[Thread]:
    """The admin's thread search: the thread with this id, the threads of this session key,
    and those whose title or messages contain ``term`` (through the text indexes, as
    :func:`thread_list`'s ``q``). Substring matches on ids and keys read every thread (a
    million messages' admin search took 0.9-1.1 s, issue 27)."""
    term = term.strip()
    if not term:
        return threads
    match = Q(session_key=term) | thread_matching(term)
    with contextlib.suppress(ValueError):
        match |= Q(pk=uuid.UUID(term))
    return threads.filter(match)


def thread_get(*, thread_id: Any) -> Thread:
    """The thread ``thread_id`` (with its agent and key), or :class:`NotFound`."""
    try:
        return Thread.objects.select_related("agent", "api_key").get(
            pk=uuid.UUID(str(thread_id)))
    except (ValueError, Thread.DoesNotExist):
        raise NotFound(f"No thread {str(thread_id)!r}.", code="thread_not_found",
                       param="thread_id") from None


def message_list(*, thread_id: Any = None, agent: str | None = None, since: Any = None,
                 role: str | None = None, newest_first: bool = True) -> QuerySet[Message]:
    """Stored messages (every thread, or one), newest first unless told otherwise.

    Across threads, their threads come in a second query (a page's worth): joined into the
    list's query, they led SQLite to start from the agents and sort every message (2.7 s at
    a million, issue 27) instead of reading the newest off the ``message_recent`` index."""
    if thread_id is not None:  # one thread: its own index, and the join costs nothing
        rows = Message.objects.select_related("thread__agent", "thread__api_key").filter(
            thread_id=thread_id)
    else:
        rows = Message.objects.prefetch_related(
            Prefetch("thread", Thread.objects.select_related("agent", "api_key")))
    if agent:
        # The agent's own messages, newest first: one seek of ``message_agent_recent``
        # (migration 0022), the agent's id read in the same statement.
        rows = rows.filter(agent_id=Subquery(Agent.objects.filter(slug=agent).values("pk")))
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if role:
        rows = rows.filter(role=role)
    return rows.order_by("-created_at", "-pk") if newest_first else rows.order_by("seq")


def message_count_of_agent(*, agent: str) -> int:
    """How many messages the agent's threads hold, kept by triggers (AgentMessageTally):
    counting its messages (125,000 of them) took 32 ms, summing its threads' counts 8.7 ms
    (issue 27); this reads a few rows."""
    return (AgentMessageTally.objects.filter(agent__slug=agent)
            .aggregate(n=Sum("n"))["n"] or 0)


def thread_messages_page(*, thread_id: Any, before: int | None = None, limit: int = 50
                         ) -> tuple[list[Message], int | None]:
    """A thread's latest ``limit`` messages (before the message ``seq`` ``before``, if
    given), in conversation order, and the cursor to the ones before them (the ``seq`` to
    pass as ``before``; ``None``: these are the first). Keyset on ``(thread, seq)`` (its
    unique index): a page costs the same at message 10 as at message 100,000. What the
    thread API and the thread page embed, rather than every message."""
    rows = Message.objects.select_related("thread__agent", "thread__api_key").filter(
        thread_id=thread_id)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    page = list(rows.order_by("-seq")[:limit + 1])
    older = page[limit - 1].seq if len(page) > limit else None
    page = page[:limit]
    page.reverse()
    return page, older


def stored_reply_get(*, response_id: str, api_key: ApiKey | None) -> Message | None:
    """The stored reply ``response_id`` of a thread this key owns (any dialect's id)."""
    if "\x00" in response_id or len(response_id) > 100:  # no stored id is like that
        return None
    return (
        Message.objects.select_related("thread__agent")
        .filter(response_id=response_id, role=Message.Role.ASSISTANT, thread__api_key=api_key)
        .order_by("-pk")
        .first()
    )


def thread_branch_for_response(*, response_id: str, api_key: ApiKey | None
                       ) -> tuple[str, str, list[llm.Message] | None]:
    """``(thread id, session key, history)`` to continue from the stored reply ``response_id``.

    ``history`` is ``None`` when that reply is its thread's latest message (the thread simply
    continues); otherwise it holds the thread up to that reply, which the caller resends as
    client-held history so the conversation branches there (a fork), as the Responses API
    branches from an older response.
    """
    row = stored_reply_get(response_id=response_id, api_key=api_key)
    if row is None:
        raise NotFound(f"Previous response with id '{response_id}' not found.",
                       param="previous_response_id", code="previous_response_not_found")
    thread = row.thread
    if row.seq == thread.message_count - 1:
        return str(thread.pk), thread.session_key, None
    rows = thread.messages.filter(seq__lte=row.seq, internal=False).order_by("seq")
    return str(thread.pk), thread.session_key, [r.to_llm() for r in rows]


def agent_last_error(*, agent_id: int) -> dict[str, Any] | None:
    """The agent's latest failed thread, if its latest thread failed: what the agent page
    shows beside the ``error`` state (the thread, when, and what went wrong). A thread some
    other party stopped (its client gone, its server stopped) is not the agent's failure."""
    latest = (Thread.objects.filter(agent_id=agent_id).exclude(stopped_from_outside())
              .order_by("-updated_at", "-pk")
              .values("pk", "status", "last_error", "updated_at").first())
    if latest is None or latest["status"] != Thread.Status.ERROR:
        return None
    return {"thread_id": str(latest["pk"]), "error": latest["last_error"] or "(no message)",
            "at": iso(latest["updated_at"])}
