"""The /v1 HTTP interface: parse input, call the core, render the dialect.

These are plain async Django views rather than DRF views: DRF cannot run ``async def``
handlers, and anything here waits on an LLM, which must never hold a worker thread
(STYLE.md, "Async"). Each view parses, calls the turn core (:mod:`agents.turns`, the one door)
and renders. The three create routes are one view, :class:`ModelCreateApi`, configured with
their dialect (:mod:`openai_api.dialects`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from agents import selectors, services, turns
from agents.http.authentication import note, raw_api_key
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import (
    GaiaError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
)
from agents.models import ApiKey
from openai_api import background
from openai_api.dialects import embeddings, messages, responses
from openai_api.dialects.base import Dialect
from openai_api.dialects.common import parse_json
from openai_api.errors import error_response
from openai_api.sessions import client_identity, session_from_headers, user_from_headers
from openai_api.sse import sse_response, sse_stream, turn_headers

log = logging.getLogger("gaia.api")


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
    """Async view base: every error leaves in the envelope ``errors`` (``openai`` or
    ``anthropic``), never a traceback.

    CSRF does not apply: these routes authenticate with API keys in headers, not cookies.
    """

    errors = "openai"

    def error_dialect(self, request: HttpRequest) -> str:
        return self.errors

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
        if raw is None:  # and whether it takes turns (an operator's stop)
            return json_response({"status": report["status"],
                                  "organism": report["organism"]["state"]}, status=status)
        return json_response(report, status=status)

    head = get


class RootApi(V1View):
    """``/``: Claude Code probes ``HEAD /`` on every run; a 200 says the server is there."""

    http_method_names = ["get", "head", "options"]

    async def get(self, request: HttpRequest) -> HttpResponse:
        return json_response({"name": "gaia", "api": "/v1", "health": "/health"})

    head = get


def _anthropic(request: HttpRequest) -> bool:
    return "anthropic-version" in request.headers


class ModelListApi(V1View):
    http_method_names = ["get", "options"]

    def error_dialect(self, request: HttpRequest) -> str:
        return "anthropic" if _anthropic(request) else "openai"

    async def get(self, request: HttpRequest) -> HttpResponse:
        key, _ = await turns.authorize(raw_key=raw_api_key(request))
        models = await turns.model_list(api_key=key)
        if _anthropic(request):
            data = [turns.model_entry_anthropic(a) for a in models]
            return json_response({
                "data": data, "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            })
        return json_response({"object": "list", "data": [turns.model_entry(a) for a in models]})


class ModelDetailApi(ModelListApi):
    async def get(self, request: HttpRequest, model_id: str) -> HttpResponse:
        model = await turns.model_get(raw_key=raw_api_key(request), model=model_id)
        if _anthropic(request):
            return json_response(turns.model_entry_anthropic(model))
        return json_response(turns.model_entry(model))


async def parse_and_authorize(request: HttpRequest) -> tuple[dict[str, Any], Any, Any]:
    """``(body, key, target)`` for a model route, ``target`` being the agent or a virtual
    model's id. The order of checks is part of the contract: 401 (and 429) before a malformed
    body's 400, then 404/403/503 for the model."""
    body_error: GaiaError | None = None
    data: dict[str, Any] = {}
    try:
        data = parse_json(request_body(request))
    except GaiaError as exc:
        body_error = exc
    model = data.get("model")
    if isinstance(model, str):  # the request's log line names what the client asked for
        note(request, model="".join(model[:200].split()) or None)
    key, target = await turns.authorize(raw_key=raw_api_key(request),
                                        model=model if isinstance(model, str) else None)
    if body_error is not None:
        raise body_error
    if target is None:
        raise InvalidRequest("'model' is required.", param="model")
    return data, key, target


class ModelCreateApi(V1View):
    """A turn in one dialect (``dialect``: Chat Completions, Responses or Messages), as JSON
    or as a stream: parse, authorize, open the turn (:func:`agents.turns.turn_open`), render."""

    http_method_names = ["post", "options"]
    dialect = Dialect()  # each route sets its own (as_view(dialect=...), openai_api.urls)

    def error_dialect(self, request: HttpRequest) -> str:
        return self.dialect.errors

    async def post(self, request: HttpRequest) -> HttpResponse:
        data, key, target = await parse_and_authorize(request)
        dialect = self.dialect
        parsed = dialect.parse(data)
        canonical = parsed.request
        thread_id, session_key = session_from_headers(request.headers)
        # a client's packed metadata (Claude Code's user_id) named as the client, its session
        canonical.user, session_key = client_identity(
            user=canonical.user or user_from_headers(request.headers),
            headers=request.headers, session_key=session_key)
        if getattr(parsed.body, "background", None):  # the Responses API's: a worker runs it
            return await background.response_create(
                data=data, parsed=parsed, key=key, target=target,
                hints={"thread_id": thread_id, "session_key": session_key,
                       "user": canonical.user})
        try:
            turn = await turns.turn_open(
                target=target, api_key=key, request=canonical, dialect=dialect.name,
                response_id=dialect.new_id(), thread_id=thread_id, session_key=session_key,
                previous_response_id=parsed.previous_response_id,
                conversation_id=parsed.conversation_id,
                # the request's log line names the turn (ApiEdgeMiddleware)
                observe=lambda turn: setattr(request, "gaia_turn", turn))
        except InvalidRequest as exc:
            dialect.rename(exc)
            raise
        if not parsed.stream:
            result = await turn.collect(await turn.first(wait=3600))
            return json_response(dialect.render(parsed, turn, result),
                                 headers=turn_headers(turn))
        frames = await dialect.frames(parsed, turn)
        response = sse_response()
        keepalive = settings.GAIA_KEEPALIVE_SECONDS
        first = await turn.first(wait=keepalive)
        return sse_stream(response, turn, first, keepalive, frames)


class EmbeddingCreateApi(V1View):
    """``POST /v1/embeddings``: parse, authorize as a turn is, embed
    (:func:`agents.turns.embeddings_create`: bounded, counted, on the feed), render."""

    http_method_names = ["post", "options"]

    async def post(self, request: HttpRequest) -> HttpResponse:
        data, key, target = await parse_and_authorize(request)
        parsed = embeddings.parse_request(data)
        embedded = await turns.embeddings_create(target=target, api_key=key,
                                                 inputs=parsed.inputs,
                                                 dimensions=parsed.dimensions)
        return json_response(embeddings.render(parsed, embedded, model=target.slug),
                             headers={"X-Gaia-Provider": embedded.provider})


class ResponseDetailApi(V1View):
    http_method_names = ["get", "options"]

    async def get(self, request: HttpRequest, response_id: str) -> HttpResponse:
        key, _ = await turns.authorize(raw_key=raw_api_key(request))
        polled = await background.response_retrieve(request, response_id=response_id, key=key)
        if polled is not None:
            return polled
        if request.GET.get("stream") in ("true", "1", "True"):
            raise InvalidRequest("Only a background response created with 'stream': true can "
                                 "be streamed again.", param="stream", code="invalid_value")
        found = await turns.stored_reply(response_id=response_id, api_key=key)
        if found is None:
            raise NotFound(f"No response found with id '{response_id}'.",
                           param="response_id", code="response_not_found")
        row, model = found
        calls = [llm.ToolCall(c["id"], c["name"], c["arguments"]) for c in row.tool_calls or []]
        usage = llm.Usage(row.input_tokens or 0, row.output_tokens or 0)
        # This reply's own outcome, not the thread's latest (a later turn may have failed).
        error = GaiaError(row.error or "The reply failed.", code="upstream_error") \
            if responses.STATUS.get(row.finish_reason) == "failed" else None
        return json_response(responses.render_response(
            response_id=response_id, model=model,
            created_at=int(row.created_at.timestamp()),
            status=responses.STATUS.get(row.finish_reason, "completed"),
            output=responses.output_items(response_id=response_id, text=row.content,
                                          reasoning=row.reasoning, tool_calls=calls),
            usage=usage, echo={}, error=error,
        ), headers={"X-Gaia-Thread-Id": str(row.thread_id)})


class ResponseCancelApi(V1View):
    """``POST /v1/responses/{id}/cancel``: a background response of this key."""

    http_method_names = ["post", "options"]

    async def post(self, request: HttpRequest, response_id: str) -> HttpResponse:
        key, _ = await turns.authorize(raw_key=raw_api_key(request))
        return await background.response_cancel(response_id=response_id, key=key)


class MessageCountTokensApi(V1View):
    http_method_names = ["post", "options"]
    errors = "anthropic"

    async def post(self, request: HttpRequest) -> HttpResponse:
        data, key, target = await parse_and_authorize(request)
        _, canonical = messages.parse_request(data, require_max_tokens=False)
        count = await turns.input_tokens_count(target=target, api_key=key, request=canonical)
        return json_response({"input_tokens": count})


class NotFoundApi(V1View):
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def error_dialect(self, request: HttpRequest) -> str:
        return "anthropic" if "anthropic-version" in request.headers else "openai"

    async def _missing(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        raise NotFound(f"Unknown route {request.method} {request.path}.", code="unknown_route")

    get = post = put = patch = delete = head = _missing
