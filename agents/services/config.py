"""Writes of the declarative configuration: the stamp every change renews, and ``gaia agents
import``/``export`` (providers, agents, knowledge bases, teams, the routing policy)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from agents.kernel.exceptions import InvalidRequest
from agents.models import Agent, ConfigStamp, Provider, options_unmasked
from agents.outlet import events, realtime
from agents.services.entries import entry_fields_known, entry_name
from agents.services.tools import (
    a2a_agents_export,
    a2a_agents_import,
    agent_tools_check,
    mcp_servers_export,
    mcp_servers_import,
)


def config_changed(*, reason: str = "edited") -> None:
    """Renew the configuration stamp: every process drops its cached keys and agents on its
    next request. Called by signals on save/delete, and by services that use ``update()``.
    The feed hears of it (``config_changed``) once the change commits."""
    ConfigStamp.objects.update_or_create(pk=1, defaults={"version": uuid.uuid4().hex})
    realtime.send_event_on_commit(events.config_changed(reason=reason))




PROVIDER_FIELDS = ("kind", "base_url", "api_key_env", "default_model", "timeout_seconds",
                   "max_concurrency", "options")
AGENT_FIELDS = ("display_name", "description", "instructions", "upstream_model",
                "temperature", "top_p", "max_input_tokens", "max_output_tokens", "enabled",
                "listed", "context_overflow", "tools", "memory", "max_steps",
                "tool_budget_seconds", "max_turn_seconds", "require_approval",
                "approval_timeout_seconds", "hosted_tools", "provides")


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


@transaction.atomic
def agents_import(*, data: dict[str, Any], create_only: bool = False) -> ImportReport:
    """Create or update providers and agents from a config document; idempotent.

    With ``create_only`` existing providers and agents are left exactly as they are (the
    defaults ``./run`` applies must never undo an admin's changes).

    ``api_key`` in a provider entry sets the write-only secret; prefer ``api_key_env``.
    Raises :class:`InvalidRequest` naming the offending entry; nothing is written then.
    """
    if not isinstance(data, dict):
        raise InvalidRequest("The config must be a mapping with 'providers' and 'agents'.")
    report = ImportReport()
    providers: dict[str, Provider] = {p.name: p for p in Provider.objects.all()}
    for i, entry in enumerate(data.get("providers") or []):
        name = entry_name(entry, f"providers[{i}]", key="name")
        entry_fields_known(entry, f"providers[{i}] ({name})", ("name", "api_key", *PROVIDER_FIELDS))
        values = {k: entry[k] for k in PROVIDER_FIELDS if k in entry}
        if "api_key" in entry:
            values["api_key_secret"] = entry["api_key"] or ""
        if create_only and name in providers:
            report.unchanged.append(f"provider:{name}")
            continue
        provider = providers.get(name) or Provider(name=name)
        if "options" in values:  # an exported document shows header secrets masked
            values["options"] = options_unmasked(values["options"], provider.options)
        _apply(provider, values, f"provider {name}", report, label=f"provider:{name}")
        providers[name] = provider
    for i, entry in enumerate(data.get("knowledge_bases") or []):
        _knowledge_base_import(i, entry, report, create_only=create_only)
    if "mcp_servers" in data:
        for labels, got in zip((report.created, report.updated, report.unchanged),
                               mcp_servers_import(data["mcp_servers"], create_only=create_only),
                               strict=True):
            labels.extend(got)
    if "a2a_agents" in data:
        for labels, got in zip((report.created, report.updated, report.unchanged),
                               a2a_agents_import(data["a2a_agents"], create_only=create_only),
                               strict=True):
            labels.extend(got)
    imported: list[tuple[int, Agent]] = []
    for i, entry in enumerate(data.get("agents") or []):
        slug = entry_name(entry, f"agents[{i}]")
        if entry.get("tool"):  # an export from before tools: say what replaced it
            raise InvalidRequest(
                f"agents[{i}] ({slug}): 'tool' is gone (it had no effect on /v1; a benchmark "
                "run picks its agents per role): give the agent 'tools' instead.")
        entry = {k: v for k, v in entry.items() if k != "tool"}
        entry_fields_known(entry, f"agents[{i}] ({slug})", (
            "slug", "provider", "fallback_providers", "knowledge_bases", *AGENT_FIELDS))
        agent = Agent.objects.filter(slug=slug).first() or Agent(slug=slug)
        if create_only and agent.pk is not None:
            report.unchanged.append(f"agent:{slug}")
            continue
        values = {k: entry[k] for k in AGENT_FIELDS if k in entry}
        if "provider" in entry:
            provider = providers.get(entry["provider"])
            if provider is None:
                raise InvalidRequest(
                    f"agents[{i}] ({slug}): unknown provider {entry['provider']!r}."
                )
            values["provider"] = provider
        elif agent.pk is None:
            raise InvalidRequest(f"agents[{i}] ({slug}) needs a provider.")
        values.setdefault("display_name", agent.display_name or slug)
        _apply(agent, values, f"agent {slug}", report, label=f"agent:{slug}")
        imported.append((i, agent))
        if "fallback_providers" in entry:
            _agent_fallbacks_set(agent, entry["fallback_providers"], providers,
                                 f"agents[{i}] ({slug})", report)
        if "knowledge_bases" in entry:
            _agent_knowledge_set(agent, entry["knowledge_bases"], f"agents[{i}] ({slug})",
                                 report)
    for i, agent in imported:  # after them all: an agent may name one imported later
        agent_tools_check(agent, what=f"agents[{i}] ({agent.slug})")
    if "routing" in data:
        _routing_policy_set(data["routing"], report)
    for i, entry in enumerate(data.get("teams") or []):
        _team_import(i, entry, report, create_only=create_only)
    return report


TEAM_FIELDS = ("display_name", "description", "mode", "max_total_tokens", "max_seconds",
               "member_timeout_seconds", "enabled")


def _team_import(i: int, entry: Any, report: ImportReport, *, create_only: bool) -> None:
    """One ``teams:`` entry: ``slug``, ``leader`` and ``members`` (agent slugs, in order)
    and :data:`TEAM_FIELDS`."""
    from agents.models import Team, TeamMember

    slug = entry_name(entry, f"teams[{i}]")
    what = f"teams[{i}] ({slug})"
    entry_fields_known(entry, what, ("slug", "leader", "members", *TEAM_FIELDS))
    team = Team.objects.filter(slug=slug).first() or Team(slug=slug)
    if create_only and team.pk is not None:
        report.unchanged.append(f"team:{slug}")
        return
    values = {k: entry[k] for k in TEAM_FIELDS if k in entry}
    agents = {a.slug: a for a in Agent.objects.all()}
    if "leader" in entry:
        if entry["leader"] not in agents:
            raise InvalidRequest(f"{what}: unknown leader agent {entry['leader']!r}.")
        values["leader"] = agents[entry["leader"]]
    elif team.pk is None:
        raise InvalidRequest(f"{what} needs a leader.")
    members = entry.get("members")
    if members is not None:
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise InvalidRequest(f"{what}: members must be a list of agent slugs.")
        missing = [m for m in members if m not in agents]
        if missing:
            raise InvalidRequest(f"{what}: unknown member agents {missing}.")
        if len(set(members)) != len(members):
            raise InvalidRequest(f"{what}: members repeats an agent.")
    elif team.pk is None:
        raise InvalidRequest(f"{what} needs members.")
    values.setdefault("display_name", team.display_name or slug)
    label = f"team:{slug}"
    current = {k: (team.leader_id if k == "leader" and team.pk else getattr(team, k, None))
               for k in values}
    changed = [k for k, v in values.items()
               if current[k] != (v.pk if k == "leader" else v)]
    for k in changed:
        setattr(team, k, values[k])
    from django.core.exceptions import ValidationError

    try:
        team.full_clean()
    except ValidationError as exc:
        raise InvalidRequest(f"team {slug}: {exc.message_dict}") from exc
    is_new = team.pk is None
    if is_new or changed:
        team.save()
    members_changed = False
    if members is not None:
        now = list(team.memberships.order_by("position", "pk").values_list("agent__slug",
                                                                           flat=True))
        if now != members:
            team.memberships.all().delete()
            TeamMember.objects.bulk_create([TeamMember(team=team, agent=agents[m], position=n)
                                            for n, m in enumerate(members)])
            config_changed(reason="team_members")
            members_changed = True
    if is_new:
        report.created.append(label)
    elif changed or members_changed:
        report.updated.append(label)
    else:
        report.unchanged.append(label)


KNOWLEDGE_BASE_FIELDS = ("name", "description", "chunk_chars", "chunk_overlap", "top_k")


def _knowledge_base_import(i: int, entry: Any, report: ImportReport, *,
                           create_only: bool) -> None:
    """One ``knowledge_bases:`` entry: :data:`KNOWLEDGE_BASE_FIELDS` and ``documents``
    (file paths; each is added, and indexed in the background, unless a document of that
    name is already there)."""
    from pathlib import Path

    from agents.models import KnowledgeBase
    from agents.services.knowledge import knowledge_document_add

    slug = entry_name(entry, f"knowledge_bases[{i}]")
    entry_fields_known(entry, f"knowledge_bases[{i}] ({slug})",
                       ("slug", "documents", *KNOWLEDGE_BASE_FIELDS))
    kb = KnowledgeBase.objects.filter(slug=slug).first() or KnowledgeBase(slug=slug)
    if create_only and kb.pk is not None:
        report.unchanged.append(f"knowledge_base:{slug}")
        return
    values = {k: entry[k] for k in KNOWLEDGE_BASE_FIELDS if k in entry}
    values.setdefault("name", kb.name or slug)
    _apply(kb, values, f"knowledge base {slug}", report, label=f"knowledge_base:{slug}")
    have = set(kb.documents.values_list("name", flat=True))
    for path in entry.get("documents") or []:
        file = Path(str(path))
        if file.name in have:
            continue
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise InvalidRequest(f"knowledge_bases[{i}] ({slug}): cannot read {path}: "
                                 f"{exc.strerror}.") from exc
        knowledge_document_add(knowledge_base=kb, name=file.name, data=data)


def _agent_knowledge_set(agent: Agent, slugs: Any, what: str, report: ImportReport) -> None:
    from agents.models import KnowledgeBase

    if not isinstance(slugs, list) or not all(isinstance(s, str) for s in slugs):
        raise InvalidRequest(f"{what}: knowledge_bases must be a list of slugs.")
    bases = {kb.slug: kb for kb in KnowledgeBase.objects.filter(slug__in=slugs)}
    missing = [s for s in slugs if s not in bases]
    if missing:
        raise InvalidRequest(f"{what}: unknown knowledge bases {missing}.")
    if set(agent.knowledge_bases.values_list("slug", flat=True)) == set(slugs):
        return
    agent.knowledge_bases.set(list(bases.values()))
    label = f"agent:{agent.slug}"
    if label in report.unchanged:
        report.unchanged.remove(label)
        report.updated.append(label)


def _routing_policy_set(entry: Any, report: ImportReport) -> None:
    """The ``routing:`` section: ``router``, ``default`` (agent slugs or null) and
    ``router_timeout_seconds``."""
    from agents.models import RoutingPolicy

    if not isinstance(entry, dict) or set(entry) - {"router", "default",
                                                    "router_timeout_seconds"}:
        raise InvalidRequest("routing: a mapping with router, default and "
                             "router_timeout_seconds.")
    policy = RoutingPolicy.objects.first() or RoutingPolicy()
    values: dict[str, Any] = {}
    for name, attr in (("router", "router"), ("default", "default_agent")):
        if name in entry:
            slug = entry[name]
            agent = Agent.objects.filter(slug=slug).first() if slug else None
            if slug and agent is None:
                raise InvalidRequest(f"routing: unknown {name} agent {slug!r}.")
            values[attr] = agent
    if "router_timeout_seconds" in entry:
        values["router_timeout_seconds"] = entry["router_timeout_seconds"]
    changed = [k for k, v in values.items() if getattr(policy, k) != v]
    for k in changed:
        setattr(policy, k, values[k])
    if policy.pk is not None and not changed:
        report.unchanged.append("routing")
        return
    try:
        policy.full_clean()
    except Exception as exc:
        raise InvalidRequest(f"routing: {exc}") from exc
    (report.created if policy.pk is None else report.updated).append("routing")
    policy.save()


def _agent_fallbacks_set(agent: Agent, names: Any, providers: dict[str, Provider], what: str,
                         report: ImportReport) -> None:
    """Replace the agent's fallback providers with ``names`` (in order) if they differ."""
    from agents.models import AgentFallback

    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidRequest(f"{what}: fallback_providers must be a list of provider names.")
    unknown = [n for n in names if n not in providers]
    if unknown:
        raise InvalidRequest(f"{what}: unknown fallback providers {unknown}.")
    if len(set(names)) != len(names) or agent.provider.name in names:
        raise InvalidRequest(f"{what}: fallback_providers repeats a provider.")
    current = list(agent.fallbacks.order_by("position", "pk").values_list("provider__name",
                                                                           flat=True))
    if current == names:
        return
    agent.fallbacks.all().delete()
    AgentFallback.objects.bulk_create([
        AgentFallback(agent=agent, provider=providers[n], position=i)
        for i, n in enumerate(names)])
    config_changed(reason="agent_fallbacks")
    label = f"agent:{agent.slug}"
    if label in report.unchanged:
        report.unchanged.remove(label)
        report.updated.append(label)


def _apply(
    obj: Any, values: dict[str, Any], what: str, report: ImportReport, *, label: str
) -> None:
    from django.core.exceptions import ValidationError

    is_new = obj.pk is None

    def current(name: str) -> Any:
        if name == "provider":
            return obj.provider_id
        return getattr(obj, name)

    changed = [k for k, v in values.items() if current(k) != (v.pk if k == "provider" else v)]
    for k in changed:
        setattr(obj, k, values[k])
    if not is_new and not changed:
        report.unchanged.append(label)
        return
    try:
        obj.full_clean()
    except ValidationError as exc:
        raise InvalidRequest(f"{what}: {exc.message_dict}") from exc
    if is_new:
        obj.save()
        report.created.append(label)
    else:
        obj.save(update_fields=[*changed, "updated_at"])
        report.updated.append(label)


def agents_export() -> dict[str, Any]:
    """The config document for every provider and agent. Secrets are never exported (header
    values in ``options.extra_headers`` show as ``[hidden]``; importing that keeps them)."""
    providers = []
    for p in Provider.objects.order_by("name"):
        entry: dict[str, Any] = {"name": p.name}
        for k in PROVIDER_FIELDS:
            entry[k] = p.options_public if k == "options" else getattr(p, k)
        providers.append(entry)
    agents = []
    for a in Agent.objects.select_related("provider").order_by("slug"):
        entry = {"slug": a.slug, "provider": a.provider.name}
        for k in AGENT_FIELDS:
            entry[k] = getattr(a, k)
        fallbacks = list(a.fallbacks.order_by("position", "pk")
                         .values_list("provider__name", flat=True))
        if fallbacks:
            entry["fallback_providers"] = fallbacks
        bases = list(a.knowledge_bases.order_by("slug").values_list("slug", flat=True))
        if bases:
            entry["knowledge_bases"] = bases
        agents.append(entry)
    doc: dict[str, Any] = {"providers": providers, "agents": agents}
    servers = mcp_servers_export()
    if servers:
        doc["mcp_servers"] = servers
    remotes = a2a_agents_export()
    if remotes:
        doc["a2a_agents"] = remotes
    from agents.models import KnowledgeBase, RoutingPolicy, Team

    bases = [{"slug": kb.slug, **{k: getattr(kb, k) for k in KNOWLEDGE_BASE_FIELDS}}
             for kb in KnowledgeBase.objects.order_by("slug")]
    if bases:
        doc["knowledge_bases"] = bases

    teams = []
    for t in Team.objects.select_related("leader").order_by("slug"):
        entry = {"slug": t.slug, "leader": t.leader.slug, "members": list(
            t.memberships.order_by("position", "pk").values_list("agent__slug", flat=True))}
        for k in TEAM_FIELDS:
            entry[k] = getattr(t, k)
        teams.append(entry)
    if teams:
        doc["teams"] = teams
    policy = RoutingPolicy.objects.select_related("router", "default_agent").first()
    if policy is not None:
        doc["routing"] = {
            "router": policy.router.slug if policy.router else None,
            "default": policy.default_agent.slug if policy.default_agent else None,
            "router_timeout_seconds": policy.router_timeout_seconds}
    return doc


