"""Gaia's error hierarchy. Every edge (the /v1 dialects, consumers, tasks, commands) translates
these once into its own format; nothing below an edge formats an error for a client."""

from __future__ import annotations


class GaiaError(Exception):
    """Base of every error Gaia reports to a client.

    ``status`` is the HTTP status an HTTP edge uses; ``kind`` is the error family that each
    dialect maps to its own ``type`` field; ``code`` and ``param`` follow the OpenAI envelope.
    """

    status = 500
    kind = "server_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.param = param
        self.retry_after = retry_after


class InvalidRequest(GaiaError):
    status = 400
    kind = "invalid_request"


class ContextTooLong(InvalidRequest):
    default_code = "context_length_exceeded"


class AuthenticationFailed(GaiaError):
    status = 401
    kind = "authentication"
    default_code = "invalid_api_key"


class PermissionDenied(GaiaError):
    status = 403
    kind = "permission"
    default_code = "model_not_allowed"


class NotFound(GaiaError):
    status = 404
    kind = "not_found"


class AgentNotFound(NotFound):
    default_code = "model_not_found"


class MethodNotAllowed(GaiaError):
    status = 405
    kind = "invalid_request"
    default_code = "method_not_allowed"


class Conflict(GaiaError):
    status = 409
    kind = "conflict"


class PayloadTooLarge(GaiaError):
    status = 413
    kind = "request_too_large"
    default_code = "request_too_large"


class RateLimited(GaiaError):
    status = 429
    kind = "rate_limit"
    default_code = "rate_limit_exceeded"


class QuotaExceeded(GaiaError):
    """A budget would be exceeded (agents.services.budgets): 429 ``insufficient_quota``, as
    OpenAI answers a spent quota; ``Retry-After`` until the budget's period resets."""

    status = 429
    kind = "insufficient_quota"
    default_code = "insufficient_quota"
    # What to tell the feed once the refusing transaction has ended (set by the service)
    announce: object = None


class BackendError(GaiaError):
    """The provider failed (unreachable, 5xx, bad credentials, malformed reply)."""

    status = 502
    kind = "upstream"
    default_code = "upstream_error"


class BackendTimeout(BackendError):
    status = 504
    kind = "timeout"
    default_code = "upstream_timeout"


class BackendRateLimited(BackendError):
    status = 429
    kind = "rate_limit"
    default_code = "upstream_rate_limited"


class BackendOverloaded(BackendError):
    status = 503
    kind = "overloaded"
    default_code = "provider_busy"


class TurnKilled(GaiaError):
    """An operator stopped the turn (``POST /api/v1/threads/{id}/kill``). A JSON reply gets
    403: the official SDKs retry 408, 409, 429 and 5xx, and a retry would run the stopped turn
    again. A stream gets it in-band."""

    status = 403
    kind = "permission"
    default_code = "turn_killed"


class AgentPaused(GaiaError):
    """An operator paused the agent; it answers again once resumed."""

    status = 503
    kind = "overloaded"
    default_code = "agent_paused"


class OrganismStopped(GaiaError):
    """An operator stopped the organism (``POST /api/v1/organism/stop``): no new turn until
    it is started again; the operator API, the feed and ``/health`` still answer."""

    status = 503
    kind = "overloaded"
    default_code = "organism_stopped"


class TurnInterrupted(GaiaError):
    """The server stopped (a restart, ``gaia api stop``) before the turn finished. 503: the
    client may send the request again once the server is back."""

    status = 503
    kind = "overloaded"
    default_code = "turn_interrupted"


class ServerOverloaded(GaiaError):
    """This process runs as many turns as it may (``GAIA_MAX_TURNS_IN_FLIGHT``): refused at
    once, before any work, with a ``Retry-After`` (agents.turns.admission). 503 in every
    dialect (Anthropic's own API says 529 with the same ``overloaded_error`` body; the SDKs
    retry both, and proxies and load balancers know 503)."""

    status = 503
    kind = "overloaded"
    default_code = "server_overloaded"


class ServiceUnavailable(GaiaError):
    """A component the request needs (Redis for a shared rate limit) is down."""

    status = 503
    kind = "overloaded"
    default_code = "service_unavailable"
