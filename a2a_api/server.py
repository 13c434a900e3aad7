"""``/a2a``: every listed agent as an A2A agent (issue 39), served by the ``a2a-sdk``.

* ``GET /a2a/<slug>/.well-known/agent-card.json``: the agent's card (its name, description,
  version, the JSON-RPC interface ``/a2a/<slug>`` of protocol 1.0, streaming, a skill per
  tool, a bearer scheme). Read with a key that may use the agent, or by anyone when
  ``GAIA_A2A_PUBLIC_CARDS`` is true. ``GET /a2a/`` lists the cards the key may read.
* ``POST /a2a/<slug>``: the JSON-RPC methods (:mod:`a2a_api.handler`), parsed and answered by
  the SDK's dispatcher; v0.3 clients' methods (``message/send``...) through its compatibility
  layer.

Who asks is settled here, before the protocol, exactly as ``/v1`` and ``/mcp`` settle it
(:func:`agents.turns.authorize`): no key or a bad one is a 401 with ``WWW-Authenticate:
Bearer``; an agent the key may not use a 403, an unknown one a 404, a key over its rate limit a
429 with ``Retry-After``; each with a JSON-RPC error body.
"""

from __future__ import annotations

import re
from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import a2a_pb2 as pb
from django.conf import settings
from starlette.requests import Request

from a2a_api.handler import Handler
from agents import turns
from agents.http.jsonrpc import counted, json_answer, jsonrpc_refuse, scope_headers
from agents.kernel.exceptions import AgentPaused, GaiaError, NotFound
from agents.models import Agent

PREFIX = "/a2a"
# a slug may hold "/" (team.writer/v2); the card is under it
_PATH = re.compile(r"^/a2a/(?P<slug>[^/]+(?:/[^/.][^/]*)*?)"
                   r"(?P<card>/\.well-known/agent-card\.json)?/?$")


class _Context(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> Any:
        context = super().build(request)
        scope = request.scope
        for name in ("gaia.key", "gaia.agent", "gaia.slug", "gaia.refusal"):
            context.state[name] = scope.get(name)
        context.state["gaia.participant"] = request.headers.get("user-agent", "")[:300] or None
        return context


dispatcher = JsonRpcDispatcher(request_handler=Handler(), context_builder=_Context(),
                               enable_v0_3_compat=True)


def _base_url(scope: dict[str, Any]) -> str:
    if settings.GAIA_PUBLIC_URL:
        return settings.GAIA_PUBLIC_URL
    server = scope.get("server") or ("localhost", 80)
    host = scope_headers(scope).get("host") or f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"


def agent_card(agent: Agent, base_url: str) -> pb.AgentCard:
    """The agent's card: how an A2A client finds out what it is and how to call it."""
    from agents.tools import tool_names

    url = f"{base_url}{PREFIX}/{agent.slug}"
    description = agent.description or f"The Gaia agent '{agent.slug}'."
    skills = [pb.AgentSkill(id="ask", name=agent.display_name or agent.slug,
                            description=description, tags=["chat"],
                            input_modes=["text/plain", "application/json"],
                            output_modes=["text/plain"])]
    for ref in tool_names(agent, memory=False):
        skills.append(pb.AgentSkill(id=f"tool:{ref}", name=ref, tags=["tool"],
                                    description=f"Uses its tool {ref} when the task needs it."))
    card = pb.AgentCard(
        name=agent.display_name or agent.slug, description=description,
        version=agent.updated_at.strftime("%Y%m%d%H%M%S") if agent.updated_at else "1",
        supported_interfaces=[pb.AgentInterface(url=url, protocol_binding="JSONRPC",
                                                protocol_version="1.0")],
        provider=pb.AgentProvider(organization="Gaia", url=base_url),
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"], skills=skills)
    card.security_schemes["bearer"].CopyFrom(pb.SecurityScheme(
        http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
            scheme="bearer", description="A Gaia API key with the 'chat' scope.")))
    card.security_requirements.append(pb.SecurityRequirement(
        schemes={"bearer": pb.StringList()}))
    return card


async def _card_agent(raw: str | None, slug: str) -> Agent:
    """The listed agent ``slug`` as the key (or, with public cards, anyone) may see it."""
    public = settings.GAIA_A2A_PUBLIC_CARDS
    agent = next((a for a in await _listed(raw, everyone=public) if a.slug == slug), None)
    if agent is None or not agent.listed:
        raise NotFound(f"No agent '{slug}'.")
    return agent


async def _listed(raw: str | None, *, everyone: bool = False) -> list[Agent]:
    key = None
    if not everyone:
        key, _ = await turns.authorize(raw_key=raw, throttle=False)
    return [m for m in await turns.model_list(api_key=key) if isinstance(m, Agent)]


@counted("a2a")
async def a2a_application(scope: dict[str, Any], receive: Any, send: Any, raw: str | None
                          ) -> None:
    """ASGI for ``/a2a/...``. Each request is counted in ``gaia_requests_total{route="a2a"}``
    and logged on ``gaia.access``."""
    path, method = scope["path"], scope["method"]
    match = _PATH.match(path)
    try:
        if path in ("/a2a", "/a2a/") and method == "GET":
            public = settings.GAIA_A2A_PUBLIC_CARDS and not raw
            if not public:
                await turns.authorize(raw_key=raw)
            base = _base_url(scope)
            cards = [agent_card_to_dict(agent_card(a, base))
                     for a in await _listed(raw, everyone=public) if a.listed]
            await json_answer(send, 200, {"agents": cards})
            return
        if match is None:
            raise NotFound(f"No A2A endpoint at {path}.")
        slug = match["slug"]
        if match["card"]:
            if method not in ("GET", "HEAD"):
                await json_answer(send, 405, {"error": "Use GET for an agent card."},
                            [(b"allow", b"GET")])
                return
            if not settings.GAIA_A2A_PUBLIC_CARDS:
                await turns.authorize(raw_key=raw)
            agent = await _card_agent(raw, slug)
            await json_answer(send, 200, agent_card_to_dict(agent_card(agent, _base_url(scope))))
            return
        if method != "POST":
            await json_answer(send, 405, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "A2A's JSON-RPC binding takes POST."}},
                [(b"allow", b"POST")])
            return
        refusal = None
        try:  # the key (401), its rate limit (429), the agent (404, 403, 503): /v1's order
            key, agent = await turns.authorize(raw_key=raw, model=slug)
        except AgentPaused as exc:  # its tasks still read and cancel; a new message is refused
            key, _ = await turns.authorize(raw_key=raw, throttle=False)
            agent, refusal = None, exc
        if isinstance(agent, str):  # auto, team/...: not an A2A agent
            raise NotFound(f"No agent '{slug}'.")
    except GaiaError as exc:
        await jsonrpc_refuse(send, exc)
        return
    request = Request({**scope, "gaia.key": key, "gaia.agent": agent, "gaia.slug": slug,
                       "gaia.refusal": refusal}, receive)
    response = await dispatcher.handle_requests(request)
    await response(scope, receive, send)
