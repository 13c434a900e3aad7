"""``GET /metrics``: Prometheus' text format, for a key with the ``metrics`` scope (Prometheus
sends it as a bearer token) or, without a key, for an address in ``GAIA_METRICS_ALLOWED_IPS``
(addresses or networks, compared parsed). Everyone else: 401 without a key, 403 with a key
that lacks the scope, in the OpenAI error envelope as ``/health``.

The counters come from every process of this machine (``agents.infra.metrics``); the gauges
that are facts of the database (approvals waiting, the benchmark queue, live workers) are read
when Prometheus scrapes, in one thread hop, so they are the same whichever process answers.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from agents import selectors, services
from agents.http.authentication import raw_api_key
from agents.infra import metrics
from agents.infra.database import run_db
from agents.kernel.exceptions import AuthenticationFailed
from agents.models import ApiKey, Approval
from benchmarks.models import BenchmarkRun
from benchmarks.selectors import queue_state
from openai_api.apis import V1View


@lru_cache(maxsize=8)
def _networks(listed: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(ipaddress.ip_network(item.strip(), strict=False) for item in listed
                 if item.strip())


def address_allowed(address: str | None) -> bool:
    """Whether ``address`` (the peer's, as the server saw it) is in
    ``GAIA_METRICS_ALLOWED_IPS``; parsed, so ``10.0.0.10`` is not ``10.0.0.1`` and
    ``::ffff:127.0.0.1`` is ``127.0.0.1``."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in _networks(tuple(settings.GAIA_METRICS_ALLOWED_IPS)))


def _database_facts() -> dict[str, Any]:
    """The gauges that are the database's: three counts on indexed columns, and the budgets
    (a few rows)."""
    return {
        "approvals": Approval.objects.filter(status=Approval.Status.PENDING).count(),
        "queued": BenchmarkRun.objects.filter(status=BenchmarkRun.Status.QUEUED).count(),
        "running": BenchmarkRun.objects.filter(status=BenchmarkRun.Status.RUNNING).count(),
        "workers": queue_state()["workers"],
        "budgets": [selectors.budget_public(b) for b in selectors.budget_list()],
    }


class _DatabaseGauges:
    def __init__(self, facts: dict[str, Any]) -> None:
        self.facts = facts

    def collect(self) -> Any:
        facts = self.facts
        yield GaugeMetricFamily("gaia_approvals_waiting",
                                "Tool calls waiting for an operator's decision.",
                                value=facts["approvals"])
        queue = GaugeMetricFamily("gaia_benchmark_runs",
                                  "Benchmark and replay runs queued or running.",
                                  labels=["status"])
        queue.add_metric(["queued"], facts["queued"])
        queue.add_metric(["running"], facts["running"])
        yield queue
        yield GaugeMetricFamily("gaia_benchmark_workers_live",
                                "Workers (Celery or embedded) whose heartbeat is fresh.",
                                value=facts["workers"])
        families = {name: GaugeMetricFamily(f"gaia_budget_{name}", text,
                                            labels=["budget", "scope", "unit"])
                    for name, text in (("limit", "A budget's limit (USD or tokens)."),
                                       ("spent", "What a budget's period has spent."),
                                       ("remaining", "What is left of a budget's period, "
                                        "less what running turns hold."))}
        for b in facts.get("budgets", []):
            for name, family in families.items():
                family.add_metric([b["name"], b["scope"], b["unit"]], float(b[name]))
        yield from families.values()


class _ThisProcess:
    """The default registry (one process: every value is here)."""

    def collect(self) -> Any:
        return REGISTRY.collect()


def exposition(facts: dict[str, Any] | None = None, accept: str = "") -> tuple[bytes, str]:
    """Every family, in the format ``accept`` asks for (Prometheus' text format, or
    OpenMetrics), with its content type: this machine's processes' values (or this
    process's) and, when given, the database's gauges."""
    registry = CollectorRegistry(auto_describe=False)
    if metrics.MULTIPROCESS:
        from prometheus_client import multiprocess

        metrics.forget_dead_processes()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())  # type: ignore[arg-type]
    if facts is not None:
        registry.register(_DatabaseGauges(facts))  # type: ignore[arg-type]
    encode, content_type = choose_encoder(accept)
    return encode(registry), content_type


class MetricsApi(V1View):
    http_method_names = ["get", "options"]

    async def get(self, request: HttpRequest) -> HttpResponse:
        raw = raw_api_key(request)
        if raw is not None:
            await run_db(services.api_key_authenticate, raw=raw, scope=ApiKey.Scope.METRICS)
        elif not address_allowed(request.META.get("REMOTE_ADDR")):
            raise AuthenticationFailed(
                "This needs an API key with the 'metrics' scope (as a bearer token), or a "
                "request from an address in GAIA_METRICS_ALLOWED_IPS.")
        # Reading every process's files too: off the event loop, in the one thread hop.
        body, content_type = await run_db(_scrape, accept=request.headers.get("accept", ""))
        return HttpResponse(body, content_type=content_type)


def _scrape(*, accept: str) -> tuple[bytes, str]:
    return exposition(_database_facts(), accept)
