"""The model id ``auto``: pick the agent that fits the conversation.

A :class:`Route` comes from, in order:

* ``sticky``: a conversation that started on ``auto`` stays with its agent, unless the last
  user message *clearly* changes subject: the ranker finds it shares no term with the
  agent's description while another agent's description does;
* ``router``: the router agent the admin chose (:class:`agents.models.RoutingPolicy`) picks
  a slug; its output is constrained to the candidates (a required tool call whose argument
  is an enum of them, and only a listed slug is accepted from its text);
* ``ranker``: BM25 over the candidates' slugs, names and descriptions, the last user message
  (and, with less weight, the one before) as the query;
* ``default``: a failed router, a ranker with no match or a tie go to the policy's default
  agent (else the first candidate by slug). Routing never fails a request that has a
  candidate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from agents import bm25, events, llm, realtime, selectors, services, teams
from agents.backends import backend_for, fallback_stream
from agents.database import run_db
from agents.exceptions import AgentNotFound
from agents.models import Agent, ApiKey, RoutingPolicy, Thread

log = logging.getLogger("gaia.routing")

AUTO = "auto"
ROUTE_TOOL = "route_to"


@dataclass
class Route:
    agent: Agent
    method: str  # sticky | router | ranker | default
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"model": AUTO, "agent": self.agent.slug, "method": self.method,
                "reason": self.reason}


@dataclass
class _Catalogue:
    """What routing reads, cached per configuration stamp."""

    version: str | None
    agents: list[Agent]
    router: Agent | None
    default: Agent | None
    router_timeout: float
    index: bm25.Index


_catalogue: _Catalogue | None = None


def routing_catalogue() -> _Catalogue:
    """The routable agents (enabled, not paused, not the router) with their provider chains,
    the policy and the ranker's index; read again when the configuration stamp changes."""
    global _catalogue
    version = selectors.config_version()
    cat = _catalogue
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
    cat = _catalogue = _Catalogue(
        version=version, agents=agents, router=router,
        default=next((a for a in agents if default and a.pk == default.pk), None),
        router_timeout=policy.router_timeout_seconds if policy else 10.0,
        index=bm25.Index([f"{a.slug.replace('-', ' ')} {a.display_name} {a.description}"
                          for a in agents]),
    )
    return cat


@dataclass
class VirtualModel:
    """A model id that is not one agent, shaped like an agent for the model catalogue."""

    slug: str
    display_name: str
    description: str
    created_at: Any
    max_input_tokens: int
    max_output_tokens: int


def is_virtual(model: str) -> bool:
    """Whether ``model`` names no single agent: ``auto`` or ``team/<slug>``."""
    return model == AUTO or model.startswith(teams.TEAM_PREFIX)


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
    for t in teams.team_list(api_key=api_key):
        out.append(VirtualModel(
            t.model_id, t.team.display_name,
            t.team.description or f"A team ({t.team.mode}) led by {t.leader.slug}.",
            t.team.created_at, t.leader.max_input_tokens, t.leader.max_output_tokens))
    return out


def model_list_with_virtual(*, api_key: ApiKey | None) -> list[Any]:
    """``/v1/models``: the key's agents (not the router: an internal construct, reference
    001), then ``auto`` and the teams."""
    router = routing_catalogue().router
    agents = [a for a in selectors.model_list(api_key=api_key)
              if router is None or a.pk != router.pk]
    return agents + virtual_model_list(api_key=api_key)


def reply_model(row: Any) -> str:
    """The model id a stored reply names: its team's, else the agent that answered."""
    route = row.thread.route
    if isinstance(route, dict) and route.get("team"):
        return str(route["model"])
    return row.sender or row.thread.agent.slug


def virtual_model_get(*, api_key: ApiKey | None, model: str) -> VirtualModel:
    found = next((m for m in virtual_model_list(api_key=api_key) if m.slug == model), None)
    if found is None:
        raise AgentNotFound(f"The model '{model}' does not exist or you do not have access "
                            "to it.", param="model")
    return found


def _allowed(agent: Agent, api_key: ApiKey | None) -> bool:
    ids = getattr(api_key, "allowed_agent_ids", None) if api_key is not None else None
    return not ids or agent.pk in ids


def routing_candidates(*, api_key: ApiKey | None) -> list[Agent]:
    """The agents ``auto`` may pick for this key (``/v1/models`` lists ``auto`` if any)."""
    return [a for a in routing_catalogue().agents if _allowed(a, api_key) and not a.paused]


def thread_previous_agent(*, api_key: ApiKey | None, thread_id: str | None,
                          session_key: str | None, messages: list[llm.Message]
                          ) -> str | None:
    """The agent an earlier ``auto`` turn of this conversation went to, if any: the named
    thread, else the session's latest routed thread, else the thread whose stored history
    the client resends."""
    routed = Thread.objects.filter(api_key=api_key, route__isnull=False)
    thread = None
    if thread_id:
        thread = routed.filter(pk=thread_id).only("route").first() if _is_uuid(thread_id) \
            else None
    elif session_key:
        thread = routed.filter(session_key=session_key).only("route").order_by(
            "-updated_at").first()
    elif any(m.role == "assistant" for m in messages):
        chain = services.digest_chain(messages)[1:-1]
        thread = routed.filter(history_digest__in=chain).only("route").order_by(
            "-updated_at").first()
    route = thread.route if thread is not None else None
    if isinstance(route, dict) and route.get("model") == AUTO:
        return route.get("agent")
    return None


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _query(messages: list[llm.Message]) -> tuple[str, str]:
    """The last user message, and the one before it (the thread's context)."""
    users = [m.text for m in messages if m.role == "user" and m.text.strip()]
    return (users[-1] if users else ""), (users[-2] if len(users) > 1 else "")


def rank(cat: _Catalogue, candidates: list[Agent], last: str, context: str = ""
         ) -> list[tuple[Agent, float, int]]:
    """``(agent, score, shared terms)`` for every candidate, best first (slug breaks ties).
    The last message counts fully, the earlier context at a third."""
    scores = cat.index.scores(last)
    overlap = cat.index.overlap(last)
    if context:
        extra = cat.index.scores(context)
        scores = [s + e / 3 for s, e in zip(scores, extra, strict=True)]
        overlap = [o + p for o, p in zip(overlap, cat.index.overlap(context), strict=True)]
    pos = {a.pk: i for i, a in enumerate(cat.agents)}
    out = [(a, scores[pos[a.pk]], overlap[pos[a.pk]]) for a in candidates]
    out.sort(key=lambda t: (t[2] == 0, -t[1], t[0].slug))
    return out


def _fallback(cat: _Catalogue, candidates: list[Agent], why: str) -> Route:
    default = cat.default if cat.default in candidates else None
    if default is not None:
        return Route(default, "default", f"{why}; the default agent answers")
    missing = "no default agent is configured" if cat.default is None else \
        f"the default agent '{cat.default.slug}' is not available here"
    return Route(candidates[0], "default", f"{why}; {missing}, the first agent answers")


def route_by_ranker(cat: _Catalogue, candidates: list[Agent], last: str, context: str
                    ) -> Route:
    ranked = rank(cat, candidates, last, context)
    best, score, shared = ranked[0]
    if not shared:
        return _fallback(cat, candidates, "no agent's description matches the request")
    if len(ranked) > 1 and ranked[1][2] and abs(ranked[1][1] - score) < 1e-9:
        return _fallback(cat, candidates,
                         f"'{best.slug}' and '{ranked[1][0].slug}' fit equally well")
    return Route(best, "ranker", f"its description fits best (BM25 {score:.2f}, "
                                 f"{shared} shared term{'s' if shared != 1 else ''})")


def router_request(router: Agent, candidates: list[Agent], last: str, context: str
                   ) -> llm.LLMRequest:
    listing = "\n".join(f"- {a.slug}: {a.description or a.display_name}" for a in candidates)
    system = (
        (router.instructions.strip() + "\n\n" if router.instructions.strip() else "")
        + "You route a user's request to exactly one of these agents:\n" + listing
        + f"\n\nCall {ROUTE_TOOL} with the agent's id, or answer with the id alone."
    )
    text = (f"Earlier in the conversation: {context}\n\n" if context else "") + \
        f"Request: {last}"
    slugs = [a.slug for a in candidates]
    return llm.LLMRequest(
        model=router.model_name, system=system,
        messages=[llm.Message(role="user", parts=(llm.TextPart(text),))],
        tools=[llm.Tool(ROUTE_TOOL, "Hand the request to one agent.", {
            "type": "object", "properties": {"agent": {"type": "string", "enum": slugs}},
            "required": ["agent"]})],
        tool_choice=llm.ToolChoice("tool", ROUTE_TOOL),
        max_output_tokens=64, temperature=0.0,
    )


def parse_choice(text: str, arguments: str, slugs: list[str]) -> str | None:
    """The slug the router chose, if it chose exactly one of ``slugs``."""
    if arguments:
        try:
            value = json.loads(arguments).get("agent")
        except (ValueError, AttributeError):
            value = None
        if isinstance(value, str) and value in slugs:
            return value
    said = text.strip().strip("`'\".").strip()
    if said in slugs:
        return said
    lowered = {s.lower(): s for s in slugs}
    if said.lower() in lowered:
        return lowered[said.lower()]
    import re

    named = {s for s in slugs if re.search(r"(?<![\w-])" + re.escape(s) + r"(?![\w-])", text)}
    return named.pop() if len(named) == 1 else None


async def route_by_router(cat: _Catalogue, candidates: list[Agent], last: str, context: str
                          ) -> Route:
    router = cat.router
    assert router is not None
    request = router_request(router, candidates, last, context)
    if not backend_for(router.provider).accepts_tools:
        request = request.replace(tools=[], tool_choice=llm.ToolChoice())
    text: list[str] = []
    args: list[str] = []
    try:
        async with asyncio.timeout(cat.router_timeout):
            chain = getattr(router, "provider_chain", None) or [router.provider]
            async for event in fallback_stream(chain, request):
                if isinstance(event, llm.TextDelta):
                    text.append(event.text)
                elif isinstance(event, llm.ToolCallDelta):
                    args.append(event.arguments)
    except TimeoutError:
        return _fallback(cat, candidates, f"the router '{router.slug}' did not answer within "
                                          f"{cat.router_timeout:g} s")
    except Exception as exc:  # noqa: BLE001 - a failed routing never fails the request
        message = getattr(exc, "message", type(exc).__name__)
        return _fallback(cat, candidates, f"the router '{router.slug}' failed ({message})")
    slugs = [a.slug for a in candidates]
    choice = parse_choice("".join(text), "".join(args), slugs)
    if choice is None:
        said = ("".join(text) or "".join(args)).strip()[:80]
        return _fallback(cat, candidates,
                         f"the router '{router.slug}' named no single listed agent ({said!r})")
    agent = next(a for a in candidates if a.slug == choice)
    return Route(agent, "router", f"the router '{router.slug}' chose it")


async def route_choose(*, api_key: ApiKey | None, messages: list[llm.Message],
                       thread_id: str | None = None, session_key: str | None = None,
                       response_id: str = "") -> Route:
    """Pick the agent for a request to ``auto`` (see the module docstring); the feed hears
    of it (``route_chosen``). Raises :class:`AgentNotFound` only when no agent is routable
    for this key."""
    t0 = time.monotonic()

    def load() -> tuple[_Catalogue, list[Agent], str | None]:
        cat = routing_catalogue()
        candidates = [a for a in cat.agents if _allowed(a, api_key) and not a.paused]
        previous = thread_previous_agent(api_key=api_key, thread_id=thread_id,
                                         session_key=session_key, messages=messages) \
            if candidates and (thread_id or session_key or len(messages) > 1) else None
        return cat, candidates, previous

    cat, candidates, previous = await run_db(load)
    if not candidates:
        raise AgentNotFound("The model 'auto' has no agent to route to for this key.",
                            param="model")
    last, context = _query(messages)
    route = None
    sticky = next((a for a in candidates if a.slug == previous), None)
    if sticky is not None:
        ranked = rank(cat, candidates, last)
        top = ranked[0]
        own = next(r for r in ranked if r[0].pk == sticky.pk)
        if top[0].pk != sticky.pk and top[2] and not own[2]:
            why = (f"the conversation changed subject (from '{sticky.slug}' to "
                   f"'{top[0].slug}')")
            route = (await route_by_router(cat, candidates, last, "")
                     if cat.router is not None else route_by_ranker(cat, candidates, last, ""))
            route.reason = f"{why}; {route.reason}"
        else:
            route = Route(sticky, "sticky", "the conversation started with this agent")
    elif cat.router is not None:
        route = await route_by_router(cat, candidates, last, context)
    else:
        route = route_by_ranker(cat, candidates, last, context)
    realtime.send_event(events.route_chosen(
        model=AUTO, agent=route.agent.slug, method=route.method,
        reason=route.reason, response_id=response_id,
        elapsed_ms=round((time.monotonic() - t0) * 1000, 2)))
    return route
