"""MkDocs hook: the manual's API reference page, generated from the operator API's OpenAPI
schema (drf-spectacular, the same document ``/api/schema`` serves) each time the site builds,
so the reference cannot drift from the code."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
PAGE = "reference/api.md"
METHODS = ("get", "post", "put", "patch", "delete")


def schema() -> dict[str, Any]:
    """The operator API's OpenAPI document, generated without a database or a request."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
    import django

    django.setup()
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def _cell(text: object) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _ref(schema_: dict[str, Any] | None) -> str:
    if not schema_:
        return ""
    if "$ref" in schema_:
        return "`" + schema_["$ref"].rsplit("/", 1)[-1] + "`"
    if schema_.get("type") == "array":
        return "list of " + (_ref(schema_.get("items")) or "items")
    return "`" + str(schema_.get("type", "object")) + "`"


def _body(content: dict[str, Any] | None) -> str:
    for media in (content or {}).values():
        return _ref(media.get("schema"))
    return ""


def render(document: dict[str, Any]) -> str:
    """The reference as Markdown: one section per path, one entry per operation with its
    parameters, request body and responses."""
    info = document.get("info", {})
    lines = [f"# API reference: {info.get('title', 'operator API')}", "",
             _cell(info.get("description")), "",
             "Generated from the OpenAPI schema when this manual is built. A running server "
             "serves the same document at `/api/schema`, Swagger UI at `/api/docs` and Redoc "
             "at `/api/redoc` (staff or an `operator` key).", ""]
    for path, item in document.get("paths", {}).items():
        lines += [f"## `{path}`", ""]
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            lines += [f"### {method.upper()} `{path}`", ""]
            summary = op.get("summary") or op.get("description")
            if summary:
                lines += [_cell(summary), ""]
            params = op.get("parameters") or []
            if params:
                lines += ["| parameter | in | required | type | description |",
                          "| --- | --- | --- | --- | --- |"]
                lines += [f"| `{p['name']}` | {p.get('in', '')} | "
                          f"{'yes' if p.get('required') else 'no'} | {_ref(p.get('schema'))} | "
                          f"{_cell(p.get('description'))} |" for p in params]
                lines.append("")
            body = _body((op.get("requestBody") or {}).get("content"))
            if body:
                lines += [f"Request body: {body}", ""]
            lines += ["| status | body | meaning |", "| --- | --- | --- |"]
            lines += [f"| {code} | {_body(r.get('content'))} | {_cell(r.get('description'))} |"
                      for code, r in op.get("responses", {}).items()]
            lines.append("")
    return "\n".join(lines)


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, PAGE, content=render(schema())))
    return files
