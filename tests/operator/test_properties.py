"""Property-based tests (hypothesis) of the operator and benchmark API input parsers: filters,
path ids, inject and run/suite submission. Whatever a client sends, the answer is a success
of the documented shape or a 4xx in the ``{"detail", "code"}`` envelope naming the field;
never a 5xx.

In-process (DRF's test client) so that hundreds of examples stay fast; the live-server fuzz
(test_schema_fuzz.py) covers the same routes over sockets. Example counts are bounded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from agents.http.jsonbody import printable
from agents.models import Agent, Message

pytestmark = pytest.mark.django_db

EXAMPLES = 80
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
NASTY = st.sampled_from(["", " ", "\x00", "\n", "-1", "0", "1", "2.5", "1e309", "null", "true",
                         "9" * 30, "-" + "9" * 30, "x" * 600, "2026-01-01", "2026-13-45T99:00",
                         "2026-01-01T00:00:00Z", "00000000-0000-0000-0000-000000000000",
                         "queued", "completed", "user", "%", "' OR 1=1 --", "\u202e", "🙂"])
query_value = NASTY | text
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | text | NASTY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


UNSTORABLE = re.compile(r"\\u(?:0000|d[89a-f])")


def field_of(param: str | None) -> str | None:
    """The top-level field a 400's ``param`` path starts with (``limit[0]``, ``a.b``)."""
    return re.split(r"[.\[]", param, maxsplit=1)[0] if param else param


def assert_envelope(response: Any, allowed: set[int]) -> dict[str, Any]:
    assert response.status_code in allowed, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    if response.status_code >= 400:
        for field in ("detail", "code"):
            assert isinstance(body.get(field), str), body
            assert body[field], body
        if response.status_code == 400:
            # a field named, or the body as a whole: not JSON, or itself a bad value (a bare
            # string holding a NUL: nothing inside it to name)
            assert body["code"] in ("invalid", "parse_error", "invalid_value") or body.get(
                "param"), body
    return body


@pytest.fixture
def client(make_key: Callable[..., tuple[Any, str]]) -> APIClient:
    _, secret = make_key("props", scopes=["operator", "benchmarks"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


@pytest.fixture
def paused_agent(make_agent: Callable[..., Any]) -> Agent:
    """Valid injects stop at the pause check (503) after every parse and lookup: no turn."""
    return make_agent(slug="echo", provider__options={}, paused=True)


@pytest.fixture
def builtin_suite(db: Any) -> Any:
    from benchmarks.models import BenchmarkSuite

    suite, _ = BenchmarkSuite.objects.get_or_create(name="hotpotqa-dev-30", defaults={
        "questions": [{"_id": "q0", "question": "Who?", "answer": "Ann",
                       "context": [["Ann", ["Ann did it."]]]}], "question_count": 1})
    return suite


# -- filters and path ids -------------------------------------------------------------------

FILTERS = {
    "/api/v1/threads": ["status", "agent", "since", "q", "limit", "offset"],
    "/api/v1/messages": ["thread", "agent", "since", "role", "limit", "offset"],
    "/api/v1/benchmarks/runs": ["status", "suite", "protocol", "agent", "since", "limit",
                                "offset"],
}


@pytest.mark.parametrize("path", sorted(FILTERS))
def test_list_filters_answer_200_or_a_named_400(client: APIClient, path: str,
                                                 paused_agent: Agent) -> None:
    names = st.sampled_from(FILTERS[path]) | text

    @SETTINGS
    @given(query=st.dictionaries(names, query_value, max_size=4))
    def check(query: dict[str, str]) -> None:
        response = client.get(path, query)
        body = assert_envelope(response, {200, 400})
        if response.status_code == 200:
            assert set(body) == {"count", "next", "previous", "results"}, body
        else:
            assert body["param"] in query, (query, body)

    check()


@pytest.mark.parametrize("template", [
    "/api/v1/threads/{}", "/api/v1/threads/{}/messages", "/api/v1/agents/{}",
    "/api/v1/agents/{}/config", "/api/v1/benchmarks/runs/{}", "/api/v1/benchmarks/runs/{}/results",
    "/api/v1/benchmarks/runs/{}/artifacts/summary.json"])
def test_unknown_ids_in_paths_are_404(client: APIClient, template: str) -> None:
    ids = (st.integers(min_value=0, max_value=2**80).map(str) | query_value
           ).filter(lambda s: s.strip(" /") and "/" not in s and s not in (".", ".."))

    @SETTINGS
    @given(ident=ids)
    def check(ident: str) -> None:
        assert_envelope(client.get(template.format(ident)), {404})

    check()


@pytest.mark.parametrize("path", [
    "/api/v1/agents/a\x00b", "/api/v1/agents/a\x00b/config", "/api/v1/agents/a\nb/config",
    "/api/v1/threads/a\nb/messages", "/api/v1/benchmarks/runs/1\n", "/api/v1/x\ny"])
def test_what_the_fuzzers_found_is_a_json_404(client: APIClient, path: str) -> None:
    """NUL reached PostgreSQL (a 500); a newline slipped past the catch-all routes (Django's
    HTML 404)."""
    assert_envelope(client.get(path), {404})


def test_compare_answers_a_named_400_or_404(client: APIClient) -> None:
    @SETTINGS
    @given(runs=st.lists(st.integers(min_value=-(2**70), max_value=2**70).map(str)
                         | query_value, max_size=22).map(",".join) | query_value)
    def check(runs: str) -> None:
        body = assert_envelope(client.get("/api/v1/benchmarks/compare", {"runs": runs}),
                               {400, 404})
        assert body["param"] == "runs" or body["code"] == "run_not_found", body

    check()


# -- inject ---------------------------------------------------------------------------------

INJECT_FIELDS = ["to", "payload", "thread_id"]


def inject_bodies() -> st.SearchStrategy[Any]:
    valid = st.fixed_dictionaries({"to": st.just("echo"), "payload": st.just("hello")})
    fields = st.sampled_from(INJECT_FIELDS) | text
    mutated = st.builds(lambda base, changes: {**base, **changes}, valid,
                        st.dictionaries(fields, json_values, max_size=3))
    return mutated | json_values


def test_inject_never_starts_a_turn_on_bad_input(client: APIClient,
                                                 paused_agent: Agent) -> None:
    statuses: set[int] = set()

    @SETTINGS
    @given(body=inject_bodies())
    def check(body: Any) -> None:
        response = client.post("/api/v1/inject", json.dumps(body),
                               content_type="application/json")
        out = assert_envelope(response, {400, 404, 503})
        statuses.add(response.status_code)
        if response.status_code == 400 and out["code"] == "invalid_value":
            assert UNSTORABLE.search(json.dumps(body)), out  # a NUL or a lone surrogate
        elif response.status_code == 400:
            unknown = set(body) - set(INJECT_FIELDS) if isinstance(body, dict) else set()
            named = (*INJECT_FIELDS, *map(printable, unknown), "non_field_errors", None)
            # the field itself (a key may hold a dot), or the path into it ("payload[0]")
            assert out["param"] in named or field_of(out["param"]) in named, out
        if response.status_code == 503:  # got past every check: only the pause stopped it
            assert out["code"] == "agent_paused"

    check()
    assert {400, 503} <= statuses, statuses  # bad input refused, valid input reached the end
    assert not Message.objects.exists()


# -- benchmark run and suite submission -----------------------------------------------------

RUN_FIELDS = ["suite", "protocol", "limit", "indexes", "tools", "question_timeout_s",
              "time_limit_s"]
RUN_VALUES = {
    "suite": st.just("hotpotqa-dev-30") | text,
    "protocol": st.sampled_from(["json", "msgpack+crc", "a2a+signed", "anp", "json+",
                                 "+crc", "JSON", "xml"]) | text,
    "limit": st.integers(min_value=-5, max_value=2**70) | json_values,
    "indexes": st.lists(st.integers(min_value=-3, max_value=40), max_size=5) | json_values,
    "tools": st.sampled_from(["deterministic", "agents", {"retriever": "echo"},
                              {"retriever": "deterministic"}, {"nobody": "x"}]) | json_values,
    "question_timeout_s": st.floats(allow_nan=False) | json_values,
    "time_limit_s": st.floats(allow_nan=False) | json_values,
}


def test_run_submission_is_201_or_a_named_400(client: APIClient, builtin_suite: Any,
                                              paused_agent: Agent) -> None:
    from benchmarks.models import BenchmarkRun

    runs_before = BenchmarkRun.objects.count()
    created: list[int] = []
    body_strategy = st.fixed_dictionaries({}, optional=RUN_VALUES) | st.builds(
        lambda base, extra: {**base, **extra}, st.fixed_dictionaries({}, optional=RUN_VALUES),
        st.dictionaries(text, json_values, max_size=2)) | json_values

    @SETTINGS
    @given(body=body_strategy)
    @example(body={".": None})  # found by hypothesis: an unknown field whose name is a dot
    def check(body: Any) -> None:
        response = client.post("/api/v1/benchmarks/runs", json.dumps(body),
                               content_type="application/json")
        out = assert_envelope(response, {201, 400})
        if response.status_code == 201:
            created.append(out["id"])
            assert out["status"] == "queued"
            assert out["suite"] == body.get("suite", "hotpotqa-dev-30")
        elif out["code"] == "invalid_value":
            assert UNSTORABLE.search(json.dumps(body)), out  # a NUL or a lone surrogate
        elif isinstance(body, dict) and out["param"] is not None:
            # The field itself, or its path ("questions.3"); a key may hold a dot itself.
            assert out["param"] in body or field_of(out["param"]) in (
                *map(printable, body), "non_field_errors"), (body, out)

    check()
    assert created, "no generated submission was valid"
    assert BenchmarkRun.objects.count() == runs_before + len(created)


def test_suite_upload_is_201_409_or_a_named_400(client: APIClient) -> None:
    question = st.fixed_dictionaries({"_id": text, "question": text, "answer": text,
                                      "context": st.just([["T", ["A sentence."]]])
                                      | json_values})
    questions = st.lists(question, max_size=3) | json_values
    names = st.sampled_from(["s1", "s-2", "bad name", "", "x" * 101]) | text

    @SETTINGS
    @given(body=st.fixed_dictionaries({"name": names, "questions": questions},
                                      optional={"description": text, "licence": json_values,
                                                "extra": json_values}) | json_values)
    def check(body: Any) -> None:
        response = client.post("/api/v1/benchmarks/suites", json.dumps(body),
                               content_type="application/json")
        out = assert_envelope(response, {201, 400, 409})
        if response.status_code == 201:
            assert out["name"] == body["name"]
            assert out["question_count"] == len(body["questions"])

    check()


@pytest.mark.parametrize("name", ["0 ", " s1", "s1\n"])
def test_a_suite_name_with_spaces_around_it_is_refused_not_trimmed(client: APIClient,
                                                                   name: str) -> None:
    """Found by the property above: the slug field trimmed '0 ' to '0' and made a suite of
    another name than the one asked for."""
    body = {"name": name, "questions": [{"_id": "q", "question": "Who?", "answer": "Ann",
                                         "context": [["T", ["A sentence."]]]}]}
    response = client.post("/api/v1/benchmarks/suites", json.dumps(body),
                           content_type="application/json")
    out = assert_envelope(response, {400})
    assert out["param"] == "name", out
    jsonl = client.post(f"/api/v1/benchmarks/suites?name={quote(name)}", b'{"input": "x"}\n',
                        content_type="application/jsonl")
    assert jsonl.status_code == 400, jsonl.content
