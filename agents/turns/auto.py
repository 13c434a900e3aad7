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

import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from agents import services
from agents.backends import backend_for
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import AgentNotFound
from agents.models import Agent, ApiKey, Thread
from agents.outlet import events, realtime
from agents.turns.catalogue import AUTO, RoutingCatalogue, routing_candidates, routing_catalogue
from agents.turns.requests import agent_call, agent_request

ROUTE_TOOL = "route_to"


@dataclass
class Route:
    agent: Agent
    method: str  # sticky | router | ranker | default
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"model": AUTO, "agent": self.agent.slug, "method": self.method,
                "reason": self.reason}


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
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _query(messages: list[llm.Message]) -> tuple[str, str]:
    """The last user message, and the one before it (the thread's context)."""
    users = [m.text for m in messages if m.role == "user" and m.text.strip()]
    return (users[-1] if users else ""), (users[-2] if len(users) > 1 else "")


def rank(cat: RoutingCatalogue, candidates: list[Agent], last: str, context: str = ""
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


def _fallback(cat: RoutingCatalogue, candidates: list[Agent], why: str) -> Route:
    default = cat.default if cat.default in candidates else None
    if default is not None:
        return Route(default, "default", f"{why}; the default agent answers")
    missing = "no default agent is configured" if cat.default is None else \
        f"the default agent '{cat.default.slug}' is not available here"
    return Route(candidates[0], "default", f"{why}; {missing}, the first agent answers")


def route_by_ranker(cat: RoutingCatalogue, candidates: list[Agent], last: str, context: str
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
    text = (f"Earlier in the conversation: {context}\n\n" if context else "") + \
        f"Request: {last}"
    slugs = [a.slug for a in candidates]
    return agent_request(
        router, messages=[llm.Message(role="user", parts=(llm.TextPart(text),))],
        system=("You route a user's request to exactly one of these agents:\n" + listing
                + f"\n\nCall {ROUTE_TOOL} with the agent's id, or answer with the id alone."),
        tools=[llm.Tool(ROUTE_TOOL, "Hand the request to one agent.", {
            "type": "object", "properties": {"agent": {"type": "string", "enum": slugs}},
            "required": ["agent"]})],
        tool_choice=llm.ToolChoice("tool", ROUTE_TOOL), max_output_tokens=64, temperature=0.0,
    )


def parse_choice(text: str, arguments: str, slugs: list[str]) -> str | None:
    """The slug the router chose, if it chose exactly one of ``slugs``."""
    if arguments:
        try:
            value = json.loads(arguments).get("agent")
        except (ValueError, AttributeError, RecursionError):
            value = None
        if isinstance(value, str) and value in slugs:
            return value
    said = text.strip().strip("`'\".").strip()
    if said in slugs:
        return said
    lowered = {s.lower(): s for s in slugs}
    if said.lower() in lowered:
        return lowered[said.lower()]
    named = {s for s in slugs if re.search(r"(?<![\w-])" + re.escape(s) + r"(?![\w-])", text)}
    return named.pop() if len(named) == 1 else None


async def route_by_router(cat: RoutingCatalogue, candidates: list[Agent], last: str,
                          context: str) -> Route:
    router = cat.router
    assert router is not None
    request = router_request(router, candidates, last, context)
    if not backend_for(router.provider).accepts_tools:
        request = request.replace(tools=[], tool_choice=llm.ToolChoice())
    # A failed routing never fails the request: the default agent answers.
    call = await agent_call(router, request, within=cat.router_timeout)
    if call.error:
        timed_out = call.error.startswith(f"{router.slug} did not answer")
        why = call.error.removeprefix(f"{router.slug} ") if timed_out else (
            f"failed ({call.error})")
        return _fallback(cat, candidates, f"the router '{router.slug}' {why}")
    slugs = [a.slug for a in candidates]
    choice = parse_choice(call.text, call.tool_args, slugs)
    if choice is None:
        said = (call.text or call.tool_args).strip()[:80]
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

    def load() -> tuple[RoutingCatalogue, list[Agent], str | None]:
        cat = routing_catalogue()
        candidates = routing_candidates(api_key=api_key, cat=cat)
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
