"""``/a2a``: every listed agent as an A2A agent (issue 39), on the official ``a2a-sdk``."""

from agents.infra import tracing

if not tracing.ENABLED:
    # The SDK wraps each of its methods in an OpenTelemetry span; with Gaia's tracing off
    # they go nowhere, and cost 2-3 % of an A2A task's server CPU (py-spy,
    # scripts/perf/interop). Read when the SDK is first imported, which this precedes.
    import os

    os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")
