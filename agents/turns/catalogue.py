"""Which models exist: the agents a key may use, and the virtual models that are not one agent
(``auto``, ``team/<slug>``), with what each resolves to; and the model objects ``/v1/models``
and the admin show.

The teams and the routable agents are read once per configuration stamp (every edit renews it)
and kept per process with their provider chains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents import selectors, services
from agents.backends import provider_embedding_model
from agents.kernel import bm25
from agents.kernel.exceptions import AgentNotFound, AgentPaused, PermissionDenied
from agents.models import Agent, ApiKey, RoutingPolicy, Team
from agents.tools import tool_names, tools_public

AUTO = "auto"
TEAM_PREFIX = "team/"


def is_virtual(model: str) -> bool:
    """Whether ``model`` names no single agent: ``auto`` or ``team/<slug>``."""
    return model == AUTO or model.startswith(TEAM_PREFIX)


def _allowed(agent: Agent, api_key: ApiKey | None) -> bool:
    return selectors.api_key_may_use(api_key=api_key, agent=agent)


# -- teams ----------------------------------------------------------------------------------


@dataclass
class LoadedTeam:
    team: Team
    leader: Agent
    members: list[Agent]

    @property
    def model_id(self) -> str:
        return TEAM_PREFIX + self.team.slug

    @property
    def agents(self) -> list[Agent]:
        return [self.leader, *self.members]


@dataclass
class _Teams:
    version: str | None
    teams: dict[str, LoadedTeam] = field(default_factory=dict)


_teams: _Teams | None = None


def team_catalogue() -> dict[str, LoadedTeam]:
    """Enabled teams by slug, with their agents and provider chains; read again when the
    configuration stamp changes."""
    global _teams
    version = selectors.config_version()
    cat = _teams
    if cat is not None and cat.version == version:
        return cat.teams
    cat = _Teams(version)
    teams = Team.objects.filter(enabled=True).select_related("leader__provider")
    for team in teams:
        members = [m.agent for m in team.memberships.select_related("agent__provider")
                   .order_by("position", "pk")]
        loaded = LoadedTeam(team, team.leader, members)
        for agent in loaded.agents:
            selectors.agent_provider_chain_load(agent)
        cat.teams[team.slug] = loaded
    _teams = cat
    return cat.teams


def _usable(loaded: LoadedTeam, api_key: ApiKey | None) -> bool:
    return all(a.enabled for a in loaded.agents) and bool(loaded.members) and all(
        _allowed(a, api_key) for a in loaded.agents)


def team_list(*, api_key: ApiKey | None) -> list[LoadedTeam]:
    """The teams this key may use: every agent of theirs enabled and allowed to it."""
    return [t for t in team_catalogue().values() if _usable(t, api_key)]


def team_get(*, api_key: ApiKey | None, model: str) -> LoadedTeam:
    """The team named by ``team/<slug>``: 404 unknown (or unusable), 403 if the key may not
    use one of its agents, 503 if one of them is paused."""
    loaded = team_catalogue().get(model.removeprefix(TEAM_PREFIX))
    if loaded is None or not bool(loaded.members) or not all(a.enabled for a in loaded.agents):
        raise AgentNotFound(f"The model '{model}' does not exist or you do not have access "
                            "to it.", param="model")
    if not _usable(loaded, api_key):
        raise PermissionDenied(f"This API key may not use the model '{model}'.", param="model")
    paused = [a.slug for a in loaded.agents if a.paused]
    if paused:
        raise AgentPaused(f"The model '{model}' has paused agents ({', '.join(paused)}); try "
                          "again later.", retry_after=services.AGENT_PAUSED_RETRY_AFTER)
    return loaded


# -- auto -----------------------------------------------------------------------------------


@dataclass
class RoutingCatalogue:
    """What routing reads, cached per configuration stamp."""

    version: str | None
    agents: list[Agent]
    router: Agent | None
    default: Agent | None
    router_timeout: float
    index: bm25.Index


_routing: RoutingCatalogue | None = None


def routing_catalogue() -> RoutingCatalogue:
    """The routable agents (enabled, not the router) with their provider chains, the policy
    and the ranker's index; read again when the configuration stamp changes."""
    global _routing
    version = selectors.config_version()
    cat = _routing
    if cat is not None and cat.version == version:
        return cat
    policy = RoutingPolicy.objects.select_related("router__provider",
                                                  "default_agent__provider").first()
    router = policy.router if policy and policy.router and policy.router.enabled else None
    agents = [a for a in Agent.objects.select_related("provider").filter(enabled=True)
              .order_by("slug") if router is None or a.pk != router.pk]
    for a in agents:
        selectors.agent_provider_chain_load(a)
    if router is not None:
        selectors.agent_provider_chain_load(router)
    default = policy.default_agent if policy else None
    cat = _routing = RoutingCatalogue(
        version=version, agents=agents, router=router,
        default=next((a for a in agents if default and a.pk == default.pk), None),
        router_timeout=policy.router_timeout_seconds if policy else 10.0,
        index=bm25.Index([f"{a.slug.replace('-', ' ')} {a.display_name} {a.description}"
                          for a in agents]),
    )
    return cat


def routing_candidates(*, api_key: ApiKey | None, cat: RoutingCatalogue | None = None
                       ) -> list[Agent]:
    """The agents ``auto`` may pick for this key (``/v1/models`` lists ``auto`` if any)."""
    cat = cat or routing_catalogue()
    return [a for a in cat.agents if _allowed(a, api_key) and not a.paused]


# -- the model list -------------------------------------------------------------------------


@dataclass
class VirtualModel:
    """A model id that is not one agent, shaped like an agent for the model catalogue."""

    slug: str
    display_name: str
    description: str
    created_at: Any
    max_input_tokens: int
    max_output_tokens: int


def virtual_model_list(*, api_key: ApiKey | None) -> list[VirtualModel]:
    """``auto`` when it has an agent to route to for this key, then the key's teams."""
    out = []
    candidates = routing_candidates(api_key=api_key)
    if candidates:
        out.append(VirtualModel(
            AUTO, "Auto (routes to the best agent)",
            "Routes each request to the agent whose description fits it best.",
            min(a.created_at for a in candidates),
            min(a.max_input_tokens for a in candidates),
            max(a.max_output_tokens for a in candidates)))
    for t in team_list(api_key=api_key):
        out.append(VirtualModel(
            t.model_id, t.team.display_name,
            t.team.description or f"A team ({t.team.mode}) led by {t.leader.slug}.",
            t.team.created_at, t.leader.max_input_tokens, t.leader.max_output_tokens))
    return out


def model_list(*, api_key: ApiKey | None) -> list[Any]:
    """``/v1/models``: the key's agents (not the router: an internal construct, reference
    001), then ``auto`` and the teams."""
    router = routing_catalogue().router
    agents = [a for a in selectors.model_list(api_key=api_key)
              if router is None or a.pk != router.pk]
    return agents + virtual_model_list(api_key=api_key)


def virtual_model_get(*, api_key: ApiKey | None, model: str) -> VirtualModel:
    found = next((m for m in virtual_model_list(api_key=api_key) if m.slug == model), None)
    if found is None:
        raise AgentNotFound(f"The model '{model}' does not exist or you do not have access "
                            "to it.", param="model")
    return found


def reply_model(row: Any) -> str:
    """The model id a stored reply names: its team's, else the agent that answered."""
    route = row.thread.route
    if isinstance(route, dict) and route.get("team"):
        return str(route["model"])
    return row.sender or row.thread.agent.slug


def model_entry(agent: Any) -> dict[str, Any]:
    """An agent (or a virtual model) as an OpenAI model object, plus the fields chat frontends
    read."""
    return {
        "id": agent.slug,
        "object": "model",
        "created": int(agent.created_at.timestamp()),
        "owned_by": "gaia",
        "name": agent.display_name,
        "description": agent.description,
        "max_input_tokens": agent.max_input_tokens,
        "max_output_tokens": agent.max_output_tokens,
        "gaia": model_extension(agent),
    }


def model_extension(agent: Any) -> dict[str, Any]:
    """Gaia's own field of a model object (``gaia``: SDKs keep or ignore an unknown field):
    the agent's server-side tools (:func:`agents.tools.tools_public`, from its configuration:
    no MCP server is started or asked) and the hosted tools they provide; ``embeddings``, the
    embedding model ``/v1/embeddings`` uses for it, only when it has one. A virtual model
    (``auto``, a team) has none of its own."""
    if not isinstance(agent, Agent):
        return {"tools": [], "provides": {}}
    out: dict[str, Any] = {"tools": tools_public(tool_names(agent)),
                           "provides": dict(agent.provides or {})}
    embedding = provider_embedding_model(agent.provider)
    if embedding:  # /v1/embeddings answers for this model, with that embedding model
        out["embeddings"] = embedding
    return out


def model_entry_anthropic(agent: Any) -> dict[str, Any]:
    """An agent (or a virtual model) as an Anthropic model object."""
    return {
        "type": "model",
        "id": agent.slug,
        "display_name": agent.display_name,
        "created_at": agent.created_at.isoformat().replace("+00:00", "Z"),
        "gaia": model_extension(agent),
    }
