"""The /v1 HTTP interface: parse input, call the core, render the dialect.

These are plain async Django views rather than DRF views: DRF cannot run ``async def``
handlers, and anything here waits on an LLM, which must never hold a worker thread
(STYLE.md, "Async"). Each view parses, calls one service or the turn core, and renders.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from agents import llm, routing, selectors, services, teams, turns
from agents.authentication import raw_api_key
from agents.backends import backend_for
from agents.database import ReadNotAvailable, run_db
from agents.exceptions import (
    GaiaError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
)
from agents.models import ApiKey
from agents.runtime import KEEPALIVE, Turn, TurnSpec, as_gaia_error, count_tokens
from openai_api.dialects import chat, messages, responses
from openai_api.dialects.common import SSE_DONE, SSE_KEEPALIVE, parse_json, sse_data
from openai_api.errors import error_response, openai_error_body
from openai_api.sessions import (
    extract_workspace_root,
    session_from_headers,
    thread_title,
    user_from_headers,
)

log = logging.getLogger("gaia.api")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def json_response(payload: Any, *, status: int = 200, headers: dict[str, str] | None = None
                  ) -> HttpResponse:
    return HttpResponse(
        json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
        status=status, content_type="application/json", headers=headers,
    )


def request_body(request: HttpRequest) -> bytes:
    try:
        return request.body
    except RequestDataTooBig:
        raise PayloadTooLarge(
            f"The request body is larger than {settings.GAIA_MAX_BODY_BYTES} bytes."
        ) from None


@method_decorator(csrf_exempt, name="dispatch")
class V1View(View):
    """Async view base: every error leaves in the envelope of ``dialect``, never a traceback.

    CSRF does not apply: these routes authenticate with API keys in headers, not cookies.
    """

    dialect = "openai"

    def error_dialect(self, request: HttpRequest) -> str:
        return self.dialect

    async def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            handler = getattr(self, request.method.lower(), None)
            if request.method.lower() not in self.http_method_names or handler is None:
                raise MethodNotAllowed(
                    f"Method {request.method} is not allowed on {request.path}."
                )
            return await handler(request, *args, **kwargs)
        except GaiaError as exc:
            response = error_response(exc, dialect=self.error_dialect(request))
            if isinstance(exc, MethodNotAllowed):
                response["Allow"] = ", ".join(
                    m.upper() for m in self.http_method_names if hasattr(self, m)
                )
            return response
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            return error_response(
                GaiaError("The server had an error while processing your request.",
                          code="internal_error"),
                dialect=self.error_dialect(request),
            )

    async def options(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = HttpResponse(status=204)
        response["Allow"] = ", ".join(m.upper() for m in self.http_method_names if hasattr(self, m))
        return response

    async def authorize(self, request: HttpRequest, agent_slug: str | None = None) -> Any:
        """``(key, agent)``: on the event loop when what it needs is in memory and the
        configuration stamp says it is current (the usual case), else on a database thread
        (a first sight of a key or agent, an edit, a ``last_used_at`` to write, a rate
        limit counted in Redis). The stamp is read on every request, so a revoked key is
        refused on the next request, as before."""
        args: dict[str, Any] = {"raw_key": raw_api_key(request), "agent_slug": agent_slug,
                                "anonymous_allowed": settings.GAIA_ALLOW_ANONYMOUS}
        try:
            version = await selectors.config_version_nowait()
        except ReadNotAvailable:
            return await run_db(services.request_authorize, **args)
        try:
            return services.request_authorize(version=version, cached_only=True, **args)
        except services.NeedsDatabase:
            return await run_db(services.request_authorize, version=version, **args)


class HealthApi(V1View):
    http_method_names = ["get", "head", "options"]

    async def get(self, request: HttpRequest) -> HttpResponse:
        """``{"status": ...}`` (200 or 503) for anyone: enough for a load balancer. The
        components, with their hosts and errors, only for a key with the operator scope."""
        raw = raw_api_key(request)
        if raw is not None:
            await run_db(services.api_key_authenticate, raw=raw, scope=ApiKey.Scope.OPERATOR)
        report = await selectors.health_report()
        status = 200 if report["status"] == "ok" else 503
        if raw is None:
            return json_response({"status": report["status"]}, status=status)
        return json_response(report, status=status)

    head = get


class RootApi(V1View):
    """``/``: Claude Code probes ``HEAD /`` on every run; a 200 says the server is there."""

    http_method_names = ["get", "head", "options"]

    async def get(self, request: HttpRequest) -> HttpResponse:
        return json_response({"name": "gaia", "api": "/v1", "health": "/health"})

    head = get


class ModelListApi(V1View):
    http_method_names = ["get", "options"]

    def error_dialect(self, request: HttpRequest) -> str:
        return "anthropic" if "anthropic-version" in request.headers else "openai"

    async def get(self, request: HttpRequest) -> HttpResponse:
        key, _ = await self.authorize(request)
        models = await run_db(routing.model_list_with_virtual, api_key=key)
        if "anthropic-version" in request.headers:
            data = [turns.model_entry_anthropic(a) for a in models]
            return json_response({
                "data": data, "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            })
        return json_response({"object": "list", "data": [turns.model_entry(a) for a in models]})


class ModelDetailApi(ModelListApi):
    async def get(self, request: HttpRequest, model_id: str) -> HttpResponse:
        if routing.is_virtual(model_id):
            key, _ = await self.authorize(request)
            agent = await run_db(routing.virtual_model_get, api_key=key, model=model_id)
        else:
            key, agent = await self.authorize(request, agent_slug=model_id)
        if "anthropic-version" in request.headers:
            return json_response(turns.model_entry_anthropic(agent))
        return json_response(turns.model_entry(agent))


class ChatCompletionCreateApi(V1View):
    http_method_names = ["post", "options"]

    async def post(self, request: HttpRequest) -> HttpResponse:
        data, key, agent = await parse_and_authorize(self, request)
        req, canonical = chat.parse_request(data)
        canonical.user = canonical.user or user_from_headers(request.headers)
        thread_id, session_key = session_from_headers(request.headers)
        response_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        agent, route, team = await resolve_agent(
            agent, key, canonical.messages, thread_id=thread_id, session_key=session_key,
            response_id=response_id)
        turn = turn_create(TurnSpec(
            agent=agent, api_key=key, request=canonical, dialect="chat",
            response_id=response_id, thread_id=thread_id, session_key=session_key,
            user=canonical.user,
            workspace_root=extract_workspace_root(canonical.messages, canonical.system),
            title=thread_title(canonical.messages), route=route,
        ), team)
        request.gaia_turn = turn  # for the request's log line (ApiEdgeMiddleware)
        await turn.open()
        keepalive = settings.GAIA_KEEPALIVE_SECONDS
        if not req.stream:
            first = await turn.first(wait=3600)
            result = await turn.collect(first)
            return json_response(
                chat.render_completion(
                    response_id=response_id, model=turn.model, created=int(time.time()),
                    text=result.text, reasoning=result.reasoning, tool_calls=result.tool_calls,
                    finish_reason=result.finish_reason, usage=turn.usage,
                ),
                headers=turn.reply_headers(),
            )
        chunks = chat.ChunkStream(
            response_id=response_id, model=turn.model,
            include_usage=bool(req.stream_options and req.stream_options.include_usage),
        )
        response, start = sse_response(), chunks.start()
        first = await turn.first(wait=keepalive)
        return sse_stream(response, turn, turn_sse(
            turn, first, keepalive, start=start, render=chunks.event,
            finish=lambda: chunks.usage(turn.usage),
            fail=lambda exc: sse_data(openai_error_body(exc)), done=SSE_DONE))


def sse_response() -> StreamingHttpResponse:
    """An event-stream response without its body yet: built while the provider works on
    the first token rather than after it (setting up its headers is most of a response's
    cost), and discarded if the turn fails before any output."""
    return StreamingHttpResponse((), content_type="text/event-stream", headers=SSE_HEADERS)


def sse_stream(response: StreamingHttpResponse, turn: Turn, body: Any) -> StreamingHttpResponse:
    response.streaming_content = body
    for name, value in turn.reply_headers().items():
        response[name] = value
    return response


async def turn_sse(
    turn: Turn,
    first: Any,
    keepalive: float,
    *,
    start: bytes,
    render: Callable[[Any], bytes],
    finish: Callable[[], bytes],
    fail: Callable[[GaiaError], bytes],
    keepalive_frame: bytes = SSE_KEEPALIVE,
    done: bytes = b"",
) -> Any:
    """A turn's events as one dialect's SSE body.

    ``start`` opens the stream, ``render`` turns each canonical event into frames (or ``b""``),
    ``keepalive_frame`` fills the backend's silences, ``finish`` closes a complete reply; after
    the first byte an error becomes ``fail``'s in-band frame. A client that goes away cancels
    the turn (``turn.events`` records it) and gets nothing more.
    """
    head = start  # sent with the first frame: one write less before the first token
    try:
        async with contextlib.aclosing(turn.events(first, keepalive)) as events:
            async for event in events:
                frame = keepalive_frame if event is KEEPALIVE else render(event)
                if frame:
                    yield head + frame
                    head = b""
        tail = finish()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # after the first byte errors go in-band
        tail = fail(as_gaia_error(exc))
    if head + tail + done:
        yield head + tail + done


class NotFoundApi(V1View):
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def error_dialect(self, request: HttpRequest) -> str:
        return "anthropic" if "anthropic-version" in request.headers else "openai"

    async def _missing(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        raise NotFound(f"Unknown route {request.method} {request.path}.", code="unknown_route")

    get = post = put = patch = delete = head = _missing



# ---------------------------------------------------------------------------------------------
# Shared by the model routes of every dialect


async def parse_and_authorize(view: V1View, request: HttpRequest
                               ) -> tuple[dict[str, Any], Any, Any]:
    """``(body, key, agent)`` for a model route. The order of checks is part of the contract:
    401 (and 429) before a malformed body's 400, then 404/403 for the model."""
    body_error: GaiaError | None = None
    data: dict[str, Any] = {}
    try:
        data = parse_json(request_body(request))
    except GaiaError as exc:
        body_error = exc
    model = data.get("model")
    virtual = isinstance(model, str) and routing.is_virtual(model)
    key, agent = await view.authorize(
        request, model if isinstance(model, str) and not virtual else None)
    if body_error is not None:
        raise body_error
    if virtual:
        return data, key, model
    if agent is None:
        raise InvalidRequest("'model' is required.", param="model")
    return data, key, agent


async def resolve_agent(target: Any, key: Any, messages: list[llm.Message], *,
                        thread_id: str | None, session_key: str | None, response_id: str
                        ) -> tuple[Any, dict[str, Any] | None, teams.LoadedTeam | None]:
    """``(agent, route, team)``: ``auto`` is routed to an agent here, ``team/<slug>`` is its
    team (and its leader); a real agent is itself."""
    if target == routing.AUTO:
        route = await routing.route_choose(api_key=key, messages=messages, thread_id=thread_id,
                                           session_key=session_key, response_id=response_id)
        return route.agent, route.as_dict(), None
    if isinstance(target, str):
        team = await run_db(teams.team_get, api_key=key, model=target)
        return team.leader, None, team
    return target, None, None


def turn_create(spec: TurnSpec, team: teams.LoadedTeam | None) -> Any:
    """The turn for ``spec``: one agent's, or a team's (same interface)."""
    return teams.TeamTurn(spec, team) if team is not None else Turn(spec)


async def _open_turn(turn: Turn, *, images_param: str,
                     params: dict[str, str] | None = None) -> None:
    """``turn.open()``, its errors naming the request's fields as this dialect spells them."""
    try:
        await turn.open()
    except InvalidRequest as exc:
        if exc.code == "images_not_supported":
            exc.param = images_param
        elif exc.code == "unsupported_parameter" and exc.param in (params or {}):
            exc.message = exc.message.replace(f"'{exc.param}'", f"'{params[exc.param]}'")
            exc.param = params[exc.param]
        raise


# ---------------------------------------------------------------------------------------------
# /v1/responses (OpenAI Responses API)


class ResponseCreateApi(V1View):
    http_method_names = ["post", "options"]

    async def post(self, request: HttpRequest) -> HttpResponse:
        data, key, agent = await parse_and_authorize(self, request)
        req, canonical = responses.parse_request(data)
        canonical.user = canonical.user or user_from_headers(request.headers)
        thread_id, session_key = session_from_headers(request.headers)
        if req.previous_response_id:
            # Gaia is stateful: the stored thread continues, the input holds only new items.
            thread_id, session, history = await run_db(
                selectors.thread_branch_for_response,
                response_id=req.previous_response_id, api_key=key)
            if history is not None:  # an older reply: branch off there
                canonical.messages = history + canonical.messages
                thread_id, session_key = None, session
        response_id = f"resp_{uuid.uuid4().hex}"
        agent, route, team = await resolve_agent(
            agent, key, canonical.messages, thread_id=thread_id, session_key=session_key,
            response_id=response_id)
        turn = turn_create(TurnSpec(
            agent=agent, api_key=key, request=canonical, dialect="responses",
            response_id=response_id, thread_id=thread_id, session_key=session_key,
            user=canonical.user,
            workspace_root=extract_workspace_root(canonical.messages, canonical.system),
            title=thread_title(canonical.messages), route=route,
        ), team)
        request.gaia_turn = turn  # for the request's log line (ApiEdgeMiddleware)
        await _open_turn(turn, images_param="input",
                         params={"response_format": "text.format"})
        keepalive = settings.GAIA_KEEPALIVE_SECONDS
        echo = responses.echo_fields(req)
        tools = responses.client_tools(data, canonical.tools)
        if not req.stream:
            first = await turn.first(wait=3600)
            result = await turn.collect(first)
            return json_response(
                responses.render_response(
                    response_id=response_id, model=turn.model, created_at=int(time.time()),
                    status=responses.STATUS.get(result.finish_reason, "completed"),
                    output=responses.output_items(
                        response_id=response_id, text=result.text, reasoning=result.reasoning,
                        tool_calls=result.tool_calls,
                        tools=tools),
                    usage=turn.usage, echo=echo,
                ),
                headers=turn.reply_headers(),
            )
        stream = responses.ResponseEventStream(response_id=response_id, model=turn.model,
                                               echo=echo,
                                               tools=tools)
        response, start = sse_response(), stream.start()
        first = await turn.first(wait=keepalive)
        return sse_stream(response, turn, turn_sse(
            turn, first, keepalive, start=start, render=stream.event,
            finish=lambda: stream.finish(turn.usage, turn.result.finish_reason),
            fail=lambda exc: stream.failed(exc, turn.usage), done=SSE_DONE))


class ResponseDetailApi(V1View):
    http_method_names = ["get", "options"]

    async def get(self, request: HttpRequest, response_id: str) -> HttpResponse:
        key, _ = await self.authorize(request)
        row = await run_db(selectors.stored_reply_get, response_id=response_id,
                           api_key=key)
        if row is None:
            raise NotFound(f"No response found with id '{response_id}'.",
                           param="response_id", code="response_not_found")
        calls = [llm.ToolCall(c["id"], c["name"], c["arguments"]) for c in row.tool_calls or []]
        usage = llm.Usage(row.input_tokens or 0, row.output_tokens or 0)
        # This reply's own outcome, not the thread's latest (a later turn may have failed).
        error = GaiaError(row.error or "The reply failed.", code="upstream_error") \
            if responses.STATUS.get(row.finish_reason) == "failed" else None
        return json_response(responses.render_response(
            response_id=response_id, model=routing.reply_model(row),
            created_at=int(row.created_at.timestamp()),
            status=responses.STATUS.get(row.finish_reason, "completed"),
            output=responses.output_items(response_id=response_id, text=row.content,
                                          reasoning=row.reasoning, tool_calls=calls),
            usage=usage, echo={}, error=error,
        ), headers={"X-Gaia-Thread-Id": str(row.thread_id)})


# ---------------------------------------------------------------------------------------------
# /v1/messages (Anthropic Messages API)


class MessageCreateApi(V1View):
    http_method_names = ["post", "options"]
    dialect = "anthropic"

    async def post(self, request: HttpRequest) -> HttpResponse:
        data, key, agent = await parse_and_authorize(self, request)
        req, canonical = messages.parse_request(data)
        canonical.user = canonical.user or user_from_headers(request.headers)
        thread_id, session_key = session_from_headers(request.headers)
        message_id = f"msg_{uuid.uuid4().hex[:24]}"
        agent, route, team = await resolve_agent(
            agent, key, canonical.messages, thread_id=thread_id, session_key=session_key,
            response_id=message_id)
        turn = turn_create(TurnSpec(
            agent=agent, api_key=key, request=canonical, dialect="messages",
            response_id=message_id, thread_id=thread_id, session_key=session_key,
            user=canonical.user,
            workspace_root=extract_workspace_root(canonical.messages, canonical.system),
            title=thread_title(canonical.messages), route=route,
        ), team)
        request.gaia_turn = turn  # for the request's log line (ApiEdgeMiddleware)
        await _open_turn(turn, images_param="messages")
        keepalive = settings.GAIA_KEEPALIVE_SECONDS
        if not req.stream:
            first = await turn.first(wait=3600)
            result = await turn.collect(first)
            return json_response(
                messages.render_message(
                    message_id=message_id, model=turn.model, text=result.text,
                    reasoning=result.reasoning, tool_calls=result.tool_calls,
                    finish_reason=result.finish_reason, usage=turn.usage,
                ),
                headers=turn.reply_headers(),
            )
        assert turn.request is not None
        input_tokens = turn.input_tokens
        if input_tokens is None:
            input_tokens = await count_tokens(backend_for(agent.provider), turn.request)
        stream = messages.MessageEventStream(message_id=message_id, model=turn.model)
        response, start = sse_response(), stream.start(input_tokens)
        first = await turn.first(wait=keepalive)
        return sse_stream(response, turn, turn_sse(
            turn, first, keepalive, start=start, render=stream.event,
            keepalive_frame=messages.ping(),
            finish=lambda: stream.finish(turn.usage, turn.result.finish_reason),
            fail=messages.error_event))


class MessageCountTokensApi(V1View):
    http_method_names = ["post", "options"]
    dialect = "anthropic"

    async def post(self, request: HttpRequest) -> HttpResponse:
        data, key, agent = await parse_and_authorize(self, request)
        _, canonical = messages.parse_request(data, require_max_tokens=False)
        agent, _, _ = await resolve_agent(agent, key, canonical.messages, thread_id=None,
                                          session_key=None, response_id="")
        # What the backend would get: the agent's instructions join the client's system text.
        turn = Turn(TurnSpec(agent=agent, api_key=key, request=canonical, dialect="messages",
                             response_id=""))
        built = turn.build_request(canonical.messages,
                                    extract_workspace_root(canonical.messages,
                                                           canonical.system))
        count = await count_tokens(backend_for(agent.provider), built)
        return json_response({"input_tokens": count})
