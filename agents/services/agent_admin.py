"""Agents as staff edit them: made, changed and deleted by one rule, shared by the agents API
(``/api/v1/agents``), the console's agent editor and the admin's form, each change audited.
The rule is the YAML import's (:func:`agents.services.agents_import`): the model's own checks
(``full_clean``), tools that exist (:func:`agent_tools_check`), a provider, knowledge bases and
fallback providers that exist."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError, RestrictedError

from agents.kernel.exceptions import Conflict, InvalidRequest
from agents.models import Agent, AgentFallback, KnowledgeBase, Provider
from agents.services.audit import Actor, audit_record
from agents.services.config import AGENT_FIELDS, config_changed
from agents.services.control import agent_changed_announce, agent_set_paused
from agents.services.tools import agent_tools_check

# What an editor sets: the import document's agent fields, and ``paused``.
AGENT_EDIT_FIELDS = ("slug", "provider", *AGENT_FIELDS, "paused", "knowledge_bases",
                     "fallback_providers")
_RELATED = ("knowledge_bases", "fallback_providers")


def agent_editable(agent: Agent) -> dict[str, Any]:
    """The agent as its editor shows it (the import document's entry, with ``paused``): no
    secret is in it, and the provider is named, never shown."""
    out: dict[str, Any] = {"slug": agent.slug, "provider": agent.provider.name}
    out.update({k: getattr(agent, k) for k in AGENT_FIELDS})
    out["paused"] = agent.paused
    out["knowledge_bases"] = sorted(agent.knowledge_bases.values_list("slug", flat=True)) \
        if agent.pk else []
    out["fallback_providers"] = list(agent.fallbacks.order_by("position", "pk").values_list(
        "provider__name", flat=True)) if agent.pk else []
    return out


def agent_save(*, agent: Agent | None, fields: dict[str, Any], actor: Actor | None,
               commit: bool = True) -> Agent:
    """Create (``agent=None``; ``slug`` and ``provider`` needed) or change an agent, audited
    (``agent_create``/``agent_update``; a change of ``paused`` is the pause service's
    ``pause``/``resume``). ``fields``: :data:`AGENT_EDIT_FIELDS`, ``provider`` and
    ``fallback_providers`` by name, ``knowledge_bases`` by slug. ``commit=False``: check only
    (the admin's form, before it saves). Raises :class:`InvalidRequest` naming the field."""
    unknown = sorted(set(fields) - set(AGENT_EDIT_FIELDS))
    if unknown:
        raise InvalidRequest(f"Unknown field {unknown[0]!r}.", param=unknown[0])
    creating = agent is None
    a = agent or Agent()
    before = agent_editable(a) if not creating else {}
    if creating:
        slug = fields.get("slug") or ""
        if not slug:
            raise InvalidRequest("A new agent needs a slug (its model id).", param="slug")
        if Agent.objects.filter(slug=slug).exists():
            raise InvalidRequest(f"An agent {slug!r} exists.", param="slug",
                                 code="agent_exists")
        a.slug = slug
        if not fields.get("provider"):
            raise InvalidRequest("A new agent needs a provider.", param="provider")
    elif "slug" in fields and fields["slug"] != a.slug:
        raise InvalidRequest("An agent's slug (the model id its clients send) does not "
                             "change: make a new agent.", param="slug")
    for name, value in fields.items():
        if name in ("slug", "paused", *_RELATED):
            continue
        if name == "provider":
            a.provider = _provider_named(value, param="provider")
        else:
            setattr(a, name, value)
    if creating:
        a.paused = bool(fields.get("paused", False))
        if not a.display_name:
            a.display_name = a.slug
    bases = _bases_named(fields["knowledge_bases"]) if "knowledge_bases" in fields else None
    fallbacks = (_fallbacks_named(fields["fallback_providers"], a)
                 if "fallback_providers" in fields else None)
    agent_checked(a)
    if not commit:
        return a
    with transaction.atomic():
        a.save()
        if bases is not None:
            a.knowledge_bases.set(bases)
        if fallbacks is not None and [p.name for p in fallbacks] != before.get(
                "fallback_providers"):
            a.fallbacks.all().delete()
            AgentFallback.objects.bulk_create([AgentFallback(agent=a, provider=p, position=i)
                                               for i, p in enumerate(fallbacks)])
        if not creating and "paused" in fields and bool(fields["paused"]) != a.paused:
            agent_set_paused(agent=a, paused=bool(fields["paused"]), actor=actor)
        after = agent_editable(a)
        changed = sorted(k for k, v in after.items() if before.get(k) != v and k != "paused")
        if creating or changed:
            audit_record(actor=actor, action="agent_create" if creating else "agent_update",
                         target=f"agent:{a.slug}",
                         detail={"provider": a.provider.name} if creating else
                         {"changed": changed})
            config_changed(reason="agent_created" if creating else "agent_updated")
            agent_changed_announce(agent=a, change="created" if creating else "updated")
    return a


def agent_checked(agent: Agent) -> None:
    """The rule every way of saving an agent shares: the model's checks, then its tools
    (:func:`agent_tools_check`: built-ins, MCP servers, agents and A2A agents that exist).
    :class:`InvalidRequest` naming the field."""
    try:
        agent.full_clean(validate_unique=False)
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        param = None if field == "__all__" else field
        raise InvalidRequest(f"{param or 'agent'}: {' '.join(messages)}", param=param) from exc
    agent_tools_check(agent, what="tools")


def agent_delete(*, agent: Agent, actor: Actor | None) -> None:
    """Delete the agent and its threads, audited. An agent a team leads or counts as a
    member is not deleted (:class:`Conflict`): take it out of the team first."""
    slug = agent.slug
    try:
        with transaction.atomic():
            agent.delete()
            audit_record(actor=actor, action="agent_delete", target=f"agent:{slug}")
            config_changed(reason="agent_deleted")
    except (ProtectedError, RestrictedError) as exc:
        raise Conflict(f"{slug} is in a team: take it out of the team first.",
                       code="agent_in_use") from exc
    agent.slug = slug
    agent_changed_announce(agent=agent, change="deleted")


def _provider_named(name: Any, *, param: str) -> Provider:
    found = Provider.objects.filter(name=str(name)).first() if name else None
    if found is None:
        raise InvalidRequest(f"No provider {name!r}.", param=param)
    return found


def _bases_named(slugs: Any) -> list[KnowledgeBase]:
    if not isinstance(slugs, list) or not all(isinstance(s, str) for s in slugs):
        raise InvalidRequest("knowledge_bases: a list of slugs.", param="knowledge_bases")
    bases = {kb.slug: kb for kb in KnowledgeBase.objects.filter(slug__in=slugs)}
    missing = [s for s in slugs if s not in bases]
    if missing:
        raise InvalidRequest(f"Unknown knowledge bases {missing}.", param="knowledge_bases")
    return list(bases.values())


def _fallbacks_named(names: Any, agent: Agent) -> list[Provider]:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidRequest("fallback_providers: a list of provider names.",
                             param="fallback_providers")
    found = [_provider_named(n, param="fallback_providers") for n in names]
    if len(set(names)) != len(names) or (agent.provider_id and agent.provider.name in names):
        raise InvalidRequest("fallback_providers repeats a provider (or the agent's own).",
                             param="fallback_providers")
    return found
