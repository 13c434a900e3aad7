"""The ``/api/v1`` OpenAPI schema is complete: generated without a warning, valid, every
operation named once, with its success and error bodies declared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from drf_spectacular.generators import SchemaGenerator

from tests.conftest import ROOT


def test_spectacular_validates_without_a_warning(tmp_path: Path) -> None:
    out = tmp_path / "schema.yaml"
    result = subprocess.run(
        [sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn",
         "--file", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert "Error" not in result.stderr, result.stderr
    document = yaml.safe_load(out.read_text())
    assert "/api/v1/benchmarks/runs" in document["paths"]


def operations() -> list[tuple[str, str, dict]]:
    document = SchemaGenerator().get_schema(request=None, public=True)
    return [(method, path, op) for path, item in document["paths"].items()
            for method, op in item.items() if method in ("get", "post", "put", "patch", "delete")]


def test_every_operation_has_a_unique_id_and_a_typed_success() -> None:
    ops = operations()
    ids = [op["operationId"] for _, _, op in ops]
    assert len(ids) == len(set(ids)), sorted(ids)
    for method, path, op in ops:
        successes = [code for code in op["responses"] if code.startswith("2")]
        assert successes, (method, path)
        for code in successes:
            if code == "204":  # No Content (a deletion): nothing to type
                assert "content" not in op["responses"][code], (method, path)
                continue
            content = op["responses"][code]["content"]
            for media in content.values():
                assert media["schema"], (method, path, code)


def test_every_operation_declares_its_errors_in_the_envelope() -> None:
    for method, path, op in operations():
        responses = op["responses"]
        assert {"401", "403"} <= set(responses), (method, path)
        if "{" in path:
            assert "404" in responses, (method, path)
        if op.get("parameters") and any(p["in"] == "query" for p in op["parameters"]):
            assert "400" in responses, (method, path)
        for code, response in responses.items():
            if code.startswith(("4", "5")):
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, code)


def test_the_error_component_is_the_envelope() -> None:
    document = SchemaGenerator().get_schema(request=None, public=True)
    error = document["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"detail", "code"}
    assert error["properties"]["param"]["nullable"] is True


def test_a_text_field_that_refuses_white_space_says_so() -> None:
    """DRF trims text and refuses it blank ("\\t" is a 400): the schema's pattern says so, so a
    client reading "string" is not promised that white space passes (the fuzz found it)."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    params = {p["name"]: p for p in document["paths"]["/api/v1/audit"]["get"]["parameters"]}
    assert params["actor"]["schema"]["pattern"] == r"\S"
    assert "pattern" not in params["since"]["schema"]  # a date-time has its own format


def test_every_paginated_list_declares_the_same_envelope() -> None:
    """One rule (agents.http.rest.paginated_schema) for the operator's and the benchmarks'
    lists: count, next, previous, then the page's results."""
    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    pages = {name: s for name, s in schemas.items() if name.startswith("Paginated")}
    assert {"PaginatedThreads", "PaginatedKeys", "PaginatedApprovals", "PaginatedBenchmarkRuns",
            "PaginatedBenchmarkSuiteCases", "PaginatedBenchmarkReplayCases"} <= set(pages)
    for name, schema in pages.items():
        assert list(schema["properties"]) == ["count", "next", "previous", "results"], name
        assert schema["properties"]["results"]["type"] == "array", name
        assert schema["properties"]["next"]["nullable"] is True, name
    assert pages["PaginatedBenchmarkRuns"]["properties"]["results"]["items"] == {
        "$ref": "#/components/schemas/BenchmarkRun"}
    assert pages["PaginatedBenchmarkReplayCases"]["properties"]["results"]["items"]["type"] == (
        "object")
