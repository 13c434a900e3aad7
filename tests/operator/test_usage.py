"""``/api/v1/usage`` against a real server: turns served through ``/v1`` (the fake provider,
succeeding and failing) are counted as their stored replies say (requests, tokens, errors by
kind, time-to-first-token and duration percentiles to within a histogram bin), the filters
narrow them, bad filters get a JSON 400 (unknown agent or key: 404), and the roll-up built
again from the stored messages says the same as the one kept turn by turn."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from agents import services
from agents.models import ApiKey, Message
from agents.models.usage import usage_bin
from tests.operator.test_live import chat

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fleet(make_agent: Any, make_key: Any) -> dict[str, Any]:
    fast = make_agent(slug="fast", provider__name="fast-provider",
                      provider__options={"reply": "one two three", "ttft_ms": 5})
    slow = make_agent(slug="slowish", upstream_model="fake-large",
                      provider__name="slowish-provider",
                      provider__options={"reply": "a b c d e f", "ttft_ms": 120,
                                         "delay_ms": 15})
    broken = make_agent(slug="broken", provider__name="broken-provider",
                        provider__options={"fail": "before"})
    return {
        "agents": (fast, slow, broken),
        "operator": make_key("ops", scopes=["operator"])[1],
        "alice": make_key("alice", scopes=["chat"]),
        "bob": make_key("bob", scopes=["chat"]),
    }


def serve_turns(server: Any, fleet: dict[str, Any]) -> None:
    alice, bob = fleet["alice"][1], fleet["bob"][1]
    for i in range(4):
        assert chat(server, alice, "fast", f"hello {i}").status_code == 200
    for i in range(3):
        assert chat(server, bob, "slowish", f"tell me {i}").status_code == 200
    assert chat(server, bob, "fast", "and you").status_code == 200
    for i in range(2):
        assert chat(server, alice, "broken", f"fail {i}").status_code >= 500


def usage(server: Any, secret: str, params: dict[str, str]) -> httpx.Response:
    return httpx.get(f"{server.url}/api/v1/usage", params=params, timeout=30,
                     headers={"Authorization": f"Bearer {secret}"})


def replies(**filters: Any) -> list[Message]:
    return list(Message.objects.filter(role="assistant", internal=False, **filters)
                .select_related("thread"))


def true_percentile(values: list[int], p: int) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * p / 100) - 1)]


def assert_matches(figures: dict[str, Any], rows: list[Message]) -> None:
    assert figures["requests"] == len(rows)
    assert figures["input_tokens"] == sum(r.input_tokens or 0 for r in rows)
    assert figures["output_tokens"] == sum(r.output_tokens or 0 for r in rows)
    errors: dict[str, int] = {}
    for r in rows:
        kind = services.usage_error_kind(finish_reason=r.finish_reason, error=r.error)
        if kind:
            errors[kind] = errors.get(kind, 0) + 1
    assert figures["errors"] == errors
    for name, attr in (("ttft_ms", "ttft_ms"), ("duration_ms", "latency_ms")):
        values = [getattr(r, attr) for r in rows if getattr(r, attr) is not None]
        for p in (50, 95):
            got = figures[name][f"p{p}"]
            if not values:
                assert got is None
                continue
            # Exact to within one bin: the estimate lies in the true percentile's bin.
            assert usage_bin(got) == usage_bin(true_percentile(values, p)), (name, p, got)


def test_usage_counts_what_the_turns_stored(gaia_server: Any, fleet: dict[str, Any]) -> None:
    serve_turns(gaia_server, fleet)
    everything = replies()
    assert len(everything) == 10
    assert any(r.error for r in everything)
    body = usage(gaia_server, fleet["operator"], {"range": "1h"}).json()
    assert body["bucket_seconds"] == 60
    assert len(body["series"]) in (60, 61)  # whole minutes: a partial one at each end
    assert_matches(body["totals"], everything)
    assert body["totals"]["errors"] == {"error": 2}
    assert sum(p["requests"] for p in body["series"]) == 10
    assert sum(p["output_tokens"] for p in body["series"]) == body["totals"]["output_tokens"]

    agents = {row["agent"]: row for row in body["by_agent"]}
    assert set(agents) == {"fast", "slowish", "broken"}
    for slug, row in agents.items():
        assert_matches(row, replies(thread__agent__slug=slug))
    keys = {row["name"]: row for row in body["by_key"]}
    for name in ("alice", "bob"):
        key = ApiKey.objects.get(name=name)
        assert keys[name]["key"] == key.prefix
        assert_matches(keys[name], replies(thread__api_key=key))
    models = {row["model"]: row for row in body["by_model"]}
    assert models["fake-large"]["requests"] == 3
    assert models["fake-model"]["requests"] == 7

    # Filters narrow every figure, the series too.
    bob = fleet["bob"][0]
    for params, rows in (
        ({"agent": "slowish"}, replies(thread__agent__slug="slowish")),
        ({"key": bob.prefix}, replies(thread__api_key=bob)),
        ({"key": str(bob.pk), "agent": "fast"},
         replies(thread__api_key=bob, thread__agent__slug="fast")),
        ({"model": "fake-large"}, replies(thread__agent__slug="slowish")),
        ({"model": "no-such-model"}, []),
    ):
        narrowed = usage(gaia_server, fleet["operator"], {"range": "1d", **params}).json()
        assert_matches(narrowed["totals"], rows)
        assert sum(p["requests"] for p in narrowed["series"]) == len(rows), params
        for row in narrowed["by_key"]:  # the per-key table is narrowed too
            key = ApiKey.objects.get(prefix=row["key"])
            assert_matches(row, [r for r in rows if r.thread.api_key_id == key.pk])
        assert sum(r["requests"] for r in narrowed["by_key"]) == len(rows)

    # Larger buckets, a custom window and the hourly table say the same.
    for params in ({"range": "7d"}, {"range": "1d", "bucket": "1h"},
                   {"since": everything[0].created_at.replace(minute=0, second=0).isoformat()},
                   {"range": "30d", "bucket": "1d"}):
        again = usage(gaia_server, fleet["operator"], params).json()
        assert again["totals"]["requests"] == 10, params
        assert again["totals"]["output_tokens"] == body["totals"]["output_tokens"]

    # The roll-up built again from the stored messages agrees with the one kept per turn
    # (the model aside: an old reply's is its agent's current one, as it is here).
    services.usage_rebuild()
    rebuilt = usage(gaia_server, fleet["operator"], {"range": "1h"}).json()
    assert rebuilt["totals"] == body["totals"]
    assert rebuilt["by_agent"] == body["by_agent"]
    assert rebuilt["series"] == body["series"]


@pytest.mark.parametrize(("params", "param", "code"), [
    ({"range": "2h"}, "range", "invalid"),
    ({"bucket": "2m"}, "bucket", "invalid"),
    ({"range": "30d", "bucket": "1m"}, "bucket", "too_many_buckets"),
    ({"since": "yesterday"}, "since", "invalid"),
    ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until",
     "invalid_range"),
    ({"until": "2026-01-01T00:00:00Z"}, "since", "invalid_range"),
    ({"range": "1d", "since": "2026-01-01T00:00:00Z"}, "range", "invalid_range"),
    ({"agnet": "fast"}, "agnet", None),
])
def test_bad_filters_are_a_json_400(gaia_server: Any, fleet: dict[str, Any],
                                    params: dict[str, str], param: str, code: str | None
                                    ) -> None:
    r = usage(gaia_server, fleet["operator"], params)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["param"] == param, body
    if code:
        assert body["code"] == code, body


def test_unknown_agent_or_key_is_404_and_the_api_needs_an_operator(
        gaia_server: Any, fleet: dict[str, Any]) -> None:
    for params, param in (({"agent": "nobody"}, "agent"), ({"key": "gaia-nope"}, "key")):
        r = usage(gaia_server, fleet["operator"], params)
        assert r.status_code == 404
        assert r.json()["param"] == param
    assert httpx.get(f"{gaia_server.url}/api/v1/usage", timeout=30).status_code == 401
    assert usage(gaia_server, fleet["alice"][1], {}).status_code == 403


def test_digits_that_are_no_number_are_an_unknown_id_not_a_500(make_key: Any, client: Any
                                                                 ) -> None:
    """'²' is a digit to ``str.isdigit`` but no number to ``int`` (the schema fuzzer found it
    in the usage's ``key`` filter): every id a route reads as a number is checked as one."""
    _, admin = make_key("fuzz-admin", scopes=[ApiKey.Scope.ADMIN])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {admin}"}
    for path in ("/api/v1/usage?key=%C2%B2%C2%B2&range=1d", "/api/v1/webhooks/%C2%B2",
                 "/api/v1/schedules/%C2%B2"):
        response = client.get(path, **auth)
        assert response.status_code in (400, 404), (path, response.content)
        assert response.json()["code"].endswith("not_found"), response.content
