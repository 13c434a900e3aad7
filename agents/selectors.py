"""Reads: the model catalogue and the health report."""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet

from agents import llm, services
from agents.database import read_nowait, run_db
from agents.exceptions import NotFound
from agents.models import Agent, ApiKey, Message, Provider, Thread

# ---------------------------------------------------------------------------------------------
# The access cache: API keys and agents as the hot path needs them, valid while the
# configuration stamp (agents.models.ConfigStamp) is unchanged.


@dataclass
class _AccessCache:
    version: str | None
    keys: dict[str, ApiKey] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    keys_loaded: bool = False  # every key is in ``keys``: a prefix not there is unknown


_access = _AccessCache(version="<never read>")
_access_lock = threading.Lock()


# Raw SQL: this runs on every request, and the ORM would cost ten times as much.
_STAMP_SQL = "SELECT version FROM agents_configstamp WHERE id = 1"


def _config_version() -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(_STAMP_SQL)
        row = cursor.fetchone()
    return row[0] if row else None


async def config_version_nowait() -> str | None:
    """The configuration stamp, read on the event loop (:func:`agents.database.read_nowait`;
    raises ``ReadNotAvailable`` when it cannot be)."""
    row = await read_nowait(_STAMP_SQL)
    return row[0] if row else None


def access_cache(*, version: str | None | object = ...) -> _AccessCache:
    """The access cache as of ``version`` (read now if not given): one primary-key read
    decides whether it is still valid."""
    global _access
    if version is ...:
        version = _config_version()
    with _access_lock:
        if _access.version != version:
            _access = _AccessCache(version=version)  # type: ignore[arg-type]
        return _access


def access_cache_drop() -> None:
    """Forget every cached key and agent; the next request reads them again."""
    global _access
    with _access_lock:
        _access = _AccessCache(version="<dropped>")


def access_cache_current(version: str | None) -> _AccessCache | None:
    """The access cache if it is the one for ``version``, without touching it otherwise."""
    cache = _access
    return cache if cache.version == version else None


def api_key_cached(*, cache: _AccessCache, prefix: str) -> ApiKey | None:
    """The key with this visible prefix, with ``allowed_agent_ids`` (empty: all agents).

    Every key is read at once (two queries) the first time any is needed: then a known
    prefix and an unknown one cost the same (a dictionary lookup), so timing tells an
    attacker nothing about which prefixes exist, and guessing cannot grow the cache."""
    if not cache.keys_loaded:
        api_keys_load(cache=cache)
    return cache.keys.get(prefix)


def api_keys_load(*, cache: _AccessCache) -> None:
    allowed: dict[int, set[int]] = {}
    for key_id, agent_id in ApiKey.agents.through.objects.values_list("apikey_id", "agent_id"):
        allowed.setdefault(key_id, set()).add(agent_id)
    keys = {}
    for key in ApiKey.objects.all():
        key.allowed_agent_ids = frozenset(allowed.get(key.pk, ()))
        keys[key.prefix] = key
    cache.keys.update(keys)
    cache.keys_loaded = True


def agent_cached(*, cache: _AccessCache, slug: str) -> Agent | None:
    """The enabled agent with this model id (with its provider), or ``None``."""
    agent = cache.agents.get(slug)
    if agent is None and "\x00" not in slug:  # no model id has a NUL (PostgreSQL refuses it)
        agent = Agent.objects.select_related("provider").filter(slug=slug, enabled=True).first()
        if agent is not None:
            agent_provider_chain_load(agent)
            cache.agents[slug] = agent
    return agent


def agent_provider_chain_load(agent: Agent) -> list[Any]:
    """Set and return ``agent.provider_chain``: its provider, then its fallback providers in
    order (what :func:`agents.backends.fallback_stream` tries; the turn runtime reads it)."""
    fallbacks = agent.fallbacks.select_related("provider").order_by("position", "pk")
    agent.provider_chain = [agent.provider, *(f.provider for f in fallbacks)]
    # and the knowledge bases its turns retrieve from (agents.knowledge)
    agent.knowledge_base_ids = list(agent.knowledge_bases.values_list("pk", flat=True))
    return agent.provider_chain


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
    return str(thread.pk), thread.session_key, [services.message_from_row(r) for r in rows]


# ---------------------------------------------------------------------------------------------
# Turns waiting in this process (the runtime counts them; operators read the queue depth)

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
def _leased_thread_sql(vendor: str) -> str:
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
        cursor.execute(_leased_thread_sql(connection.vendor), [
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


# ---------------------------------------------------------------------------------------------
# Public shapes of threads and messages (the operator API and the feed; reference 003)


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
    }


# ---------------------------------------------------------------------------------------------
# What operators see: the organism, agents with their state, active threads (reference 003)

_PROCESS_STARTED = time.monotonic()


def organism_info() -> dict[str, Any]:
    """Name, status, uptime (of this process), agent count, active threads, total messages."""
    return {
        "name": settings.GAIA_ORGANISM_NAME,
        "status": "running",
        "uptime_seconds": int(time.monotonic() - _PROCESS_STARTED),
        "agent_count": Agent.objects.filter(enabled=True).count(),
        "active_threads": Thread.objects.filter(status=Thread.Status.ACTIVE).count(),
        "total_messages": Message.objects.count(),
        "mode": "redis" if settings.REDIS_URL else "single-process",
    }


def agent_list_public(*, slug: str | None = None) -> list[dict[str, Any]]:
    """Every agent (or the one ``slug``) with its live state:

    ``paused`` (an operator paused it), ``processing`` (a thread of its holds a live lease, in
    any process: ``current_thread`` names one), ``waiting`` (turns of this process wait for its
    provider or a thread lease, none running), ``error`` (its latest turn failed), else
    ``idle``. ``queue_depth`` counts this process's waiting turns (:func:`queue_depth`)."""
    from django.db.models import Max
    from django.utils import timezone

    now = timezone.now()
    agents = Agent.objects.select_related("provider").order_by("slug")
    if slug is not None:
        agents = agents.filter(slug=slug)
    agents = list(agents.annotate(last_activity=Max("threads__updated_at")))
    ids = [a.pk for a in agents]
    busy: dict[int, str] = {}
    for agent_id, thread_id in (Thread.objects.filter(agent_id__in=ids, lock_expires_at__gt=now)
                                .order_by("-updated_at").values_list("agent_id", "pk")):
        busy.setdefault(agent_id, str(thread_id))
    out = []
    for a in agents:
        depth = queue_depth(agent_id=a.pk)
        latest = (Thread.objects.filter(agent_id=a.pk).order_by("-updated_at")
                  .values_list("status", flat=True).first())
        if a.paused:
            state = "paused"
        elif a.pk in busy:
            state = "processing"
        elif depth:
            state = "waiting"
        elif latest == Thread.Status.ERROR:
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
            "last_activity": iso(a.last_activity),
            "peers": [],
            "provider": a.provider.name,
            "model": a.model_name,
        })
    return out


def thread_list_active(*, limit: int = 100) -> list[dict[str, Any]]:
    """The most recently active threads with status ``active`` (the feed's snapshot)."""
    threads = (Thread.objects.filter(status=Thread.Status.ACTIVE)
               .select_related("agent", "api_key").order_by("-updated_at")[:limit])
    return [thread_public(t, agent=t.agent.slug,
                          client=client_label(user=t.user, api_key=t.api_key))
            for t in threads]


# ---------------------------------------------------------------------------------------------
# The operator API's reads (agents/apis.py): threads and messages filtered, configs sanitised,
# what an agent accepts


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
                q: str | None = None) -> QuerySet[Thread]:
    """Threads, most recently active first. ``agent`` is an agent's slug, ``since`` keeps the
    threads active at or after that time, ``q`` searches titles and message texts
    (case-insensitive substring)."""
    threads = Thread.objects.select_related("agent", "api_key").order_by("-updated_at", "pk")
    if status:
        threads = threads.filter(status=status)
    if agent:
        threads = threads.filter(agent__slug=agent)
    if since is not None:
        threads = threads.filter(updated_at__gte=since)
    if q:
        threads = threads.filter(
            Q(title__icontains=q)
            | Exists(Message.objects.filter(thread=OuterRef("pk"), content__icontains=q)))
    return threads


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
    """Stored messages (every thread, or one), newest first unless told otherwise."""
    rows = Message.objects.select_related("thread__agent", "thread__api_key")
    if thread_id is not None:
        rows = rows.filter(thread_id=thread_id)
    if agent:
        rows = rows.filter(thread__agent__slug=agent)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if role:
        rows = rows.filter(role=role)
    return rows.order_by("-created_at", "-pk") if newest_first else rows.order_by("seq")


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


REDACTED = "[redacted]"
_SECRET_OPTION = re.compile(r"key|secret|token|password|authorization|credential", re.I)


def _options_sanitised(options: Any) -> Any:
    """A provider's options with every header value and every secret-looking value hidden
    (``extra_headers`` carry credentials more often than not)."""
    if not isinstance(options, dict):
        return {}
    out: dict[str, Any] = {}
    for name, value in options.items():
        if name == "extra_headers" and isinstance(value, dict):
            out[name] = dict.fromkeys(value, REDACTED)
        elif _SECRET_OPTION.search(str(name)):
            out[name] = REDACTED
        else:
            out[name] = value
    return out


def _url_sanitised(url: str) -> str | None:
    """``url`` without the password it may carry (``https://user:secret@host/v1``)."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{REDACTED}@{parts.hostname}" + (
        f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def provider_config(provider: Provider) -> dict[str, Any]:
    """A provider as operators see it: never its secret (``has_credentials`` says whether it
    has one, ``api_key_env`` names the variable, not its value)."""
    return {
        "name": provider.name,
        "kind": provider.kind,
        "base_url": _url_sanitised(provider.base_url),
        "api_key_env": provider.api_key_env or None,
        "has_credentials": provider.has_credentials,
        "default_model": provider.default_model,
        "timeout_seconds": provider.timeout_seconds,
        "max_concurrency": provider.max_concurrency,
        "options": _options_sanitised(provider.options),
    }


def agent_config(agent: Agent, *, provider: bool = True) -> dict[str, Any]:
    """An agent's configuration (what ``gaia agents export`` writes, plus its state fields);
    with its sanitised provider unless ``provider=False`` (the organism config lists
    providers once)."""
    out: dict[str, Any] = {
        "slug": agent.slug,
        "display_name": agent.display_name,
        "description": agent.description,
        "instructions": agent.instructions,
        "provider": agent.provider.name,
        "upstream_model": agent.upstream_model or None,
        "model": agent.model_name,
        "tool": agent.tool or None,
        "temperature": agent.temperature,
        "top_p": agent.top_p,
        "max_input_tokens": agent.max_input_tokens,
        "max_output_tokens": agent.max_output_tokens,
        "enabled": agent.enabled,
        "paused": agent.paused,
        "created_at": iso(agent.created_at),
        "updated_at": iso(agent.updated_at),
    }
    if provider:
        out["provider_config"] = provider_config(agent.provider)
    return out


def organism_config() -> dict[str, Any]:
    """Every provider and agent, sanitised (reference 003's ``/organism/config``)."""
    return {
        "name": settings.GAIA_ORGANISM_NAME,
        "mode": "redis" if settings.REDIS_URL else "single-process",
        "providers": [provider_config(p) for p in Provider.objects.order_by("name")],
        "agents": [agent_config(a, provider=False)
                   for a in Agent.objects.select_related("provider").order_by("slug")],
    }


# What the mesh tools read and write (mesh/tools.py: ToolInput, TOOL_TAGS, PIPELINE).
_TOOL_UPSTREAM = {"search": [], "extract": ["search_docs"], "triple": ["sentences"],
                  "reason": ["sentences", "triples"]}
_TOOL_OUTPUT = {"search": "search_docs", "extract": "sentences", "triple": "triples",
                "reason": "final_answer"}

INJECT_PAYLOAD_SCHEMA: dict[str, Any] = {
    "description": "POST /api/v1/inject's payload: the text of a user message, as a string or "
                   "as an object whose 'text' (or else 'content') is that string.",
    "oneOf": [
        {"type": "string", "minLength": 1},
        {"type": "object", "properties": {"text": {"type": "string", "minLength": 1}},
         "required": ["text"]},
        {"type": "object", "properties": {"content": {"type": "string", "minLength": 1}},
         "required": ["content"]},
    ],
}


def agent_schema(agent: Agent) -> dict[str, Any]:
    """The JSON Schema (2020-12) of what ``agent`` accepts: a chat request (the OpenAI Chat
    Completions body as Gaia reads it), an operator inject payload, and, for a mesh tool
    agent, its tool's input."""
    text_part = {"type": "object", "properties": {"type": {"const": "text"},
                                                   "text": {"type": "string"}},
                 "required": ["type", "text"]}
    image_part = {"type": "object", "properties": {"type": {"const": "image_url"},
                                                    "image_url": {"type": "object"}},
                  "required": ["type", "image_url"]}
    chat = {
        "type": "object",
        "description": "POST /v1/chat/completions (the same conversation is accepted by "
                       "/v1/responses and /v1/messages in their own dialects). Unknown "
                       "fields are ignored. Output beyond max_output_tokens is cut.",
        "properties": {
            "model": {"const": agent.slug},
            "messages": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
                        "content": {"anyOf": [
                            {"type": "string"}, {"type": "null"},
                            {"type": "array", "items": {"anyOf": [text_part, image_part]}},
                        ]},
                        "tool_calls": {"type": "array"},
                        "tool_call_id": {"type": "string"},
                    },
                    "required": ["role"],
                },
            },
            "stream": {"type": "boolean"},
            "max_tokens": {"type": "integer", "minimum": 1},
            "max_completion_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "top_p": {"type": "number", "minimum": 0, "maximum": 1},
            "tools": {"type": "array"},
            "user": {"type": "string"},
        },
        "required": ["model", "messages"],
        "x-gaia-limits": {"max_input_tokens": agent.max_input_tokens,
                          "max_output_tokens": agent.max_output_tokens},
    }
    defs: dict[str, Any] = {"chat": chat, "inject": INJECT_PAYLOAD_SCHEMA}
    choices = [{"$ref": "#/$defs/chat"}, {"$ref": "#/$defs/inject"}]
    described = "a chat request (#/$defs/chat) or an operator inject payload (#/$defs/inject)"
    if agent.tool:
        upstream = _TOOL_UPSTREAM.get(agent.tool, [])
        defs["tool"] = {
            "type": "object",
            "description": f"The mesh tool '{agent.tool}' (benchmarks): its input, a question "
                           "with its paragraphs and the outputs of earlier pipeline tools by "
                           f"tag; it answers under the tag '{_TOOL_OUTPUT.get(agent.tool)}'.",
            "properties": {
                "question": {"type": "string", "minLength": 1},
                "paragraphs": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"title": {"type": "string"},
                                   "sentences": {"type": "array", "items": {"type": "string"}}},
                    "required": ["title", "sentences"]}},
                "upstream": {"type": "object",
                             "properties": {tag: {"type": "object"} for tag in upstream}},
            },
            "required": ["question", "paragraphs"],
        }
        choices.append({"$ref": "#/$defs/tool"})
        described += f", or the input of its mesh tool '{agent.tool}' (#/$defs/tool)"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:gaia:agent:{agent.slug}:input",
        "title": f"What the agent '{agent.slug}' accepts",
        "description": f"Gaia chose to describe {described}. The chat schema lists the fields "
                       "Gaia reads; the real contract is the OpenAI Chat Completions API.",
        "$defs": defs,
        "anyOf": choices,
    }


def model_entry(agent: Agent) -> dict[str, Any]:
    """An agent as an OpenAI model object (plus the fields chat frontends read)."""
    return {
        "id": agent.slug,
        "object": "model",
        "created": int(agent.created_at.timestamp()),
        "owned_by": "gaia",
        "name": agent.display_name,
        "description": agent.description,
        "max_input_tokens": agent.max_input_tokens,
        "max_output_tokens": agent.max_output_tokens,
    }


def model_entry_anthropic(agent: Agent) -> dict[str, Any]:
    return {
        "type": "model",
        "id": agent.slug,
        "display_name": agent.display_name,
        "created_at": agent.created_at.isoformat().replace("+00:00", "Z"),
    }


def _database_check() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


async def _timed(check: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(3):
            detail = await check()
    except Exception as exc:  # a failing component is reported, not raised
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
    out = {"status": "ok", "latency_ms": round((time.perf_counter() - t0) * 1000, 2)}
    if detail:
        out.update(detail)
    return out


async def _channel_layer_check() -> dict[str, Any]:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = await layer.new_channel()
    token = uuid.uuid4().hex
    await layer.send(channel, {"type": "health.ping", "token": token})
    message = await layer.receive(channel)
    if message.get("token") != token:
        raise RuntimeError("channel layer returned a different message")
    return {"backend": type(layer).__name__}


async def _broker_check() -> dict[str, Any]:
    if not settings.REDIS_URL:
        return {"mode": "eager (no broker: tasks run in-process)"}
    import redis.asyncio as aioredis

    client = aioredis.from_url(settings.REDIS_URL)
    try:
        await client.ping()
    finally:
        await client.aclose()
    return {"mode": "redis"}


async def health_report() -> dict[str, Any]:
    """Per-component checks; ``status`` is ``ok`` only when every required component is."""
    database, layer, broker = await asyncio.gather(
        _timed(functools.partial(run_db, _database_check)),
        _timed(_channel_layer_check),
        _timed(_broker_check),
    )
    checks = {"database": database, "channel_layer": layer, "broker": broker}
    ok = all(c["status"] == "ok" for c in checks.values())
    return {
        "status": "ok" if ok else "unavailable",
        "checks": checks,
        "mode": "redis" if settings.REDIS_URL else "single-process",
    }
