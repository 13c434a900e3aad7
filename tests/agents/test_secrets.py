"""Write-only values, one rule on every path: a provider's ``extra_headers`` and an MCP
server's ``env`` and ``headers`` are shown as ``[hidden]``, and ``[hidden]`` sent back keeps the
stored value. The rule is ``agents.models.secrets_masked`` / ``secrets_unmasked``; each test
below drives one caller of it (the console's REST API, the admin's forms, the config document,
the operator's config view)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from django.urls import reverse
from rest_framework.test import APIClient

from agents.models import SECRET_MASK, McpServer, Provider
from agents.models.agents import secrets_masked, secrets_unmasked
from agents.services import agents_export, agents_import

pytestmark = pytest.mark.django_db

API = "/api/v1"
HEADERS = {"X-Token": "tok-s3cret", "X-Org": "env:GAIA_ORG"}


@pytest.fixture
def staff(django_user_model: Any) -> APIClient:
    """A logged-in staff member: the console's session, and the admin's."""
    user = django_user_model.objects.create_superuser("ann", password="pw-12345678")
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def provider() -> Provider:
    return Provider.objects.create(name="hdr", kind="openai", base_url="https://x.example/v1",
                                   default_model="m", options={"extra_headers": HEADERS})


@pytest.fixture
def server() -> McpServer:
    return McpServer.objects.create(name="docs", url="https://mcp.example/mcp",
                                    headers={"Authorization": "Bearer s3cret"})


def test_secrets_masked_hides_every_value_or_all_but_env_names() -> None:
    assert secrets_masked(HEADERS) == {"X-Token": SECRET_MASK, "X-Org": SECRET_MASK}
    assert secrets_masked(HEADERS, env_names_shown=True) == {
        "X-Token": SECRET_MASK, "X-Org": "env:GAIA_ORG"}
    assert secrets_masked(None) == {}


def test_secrets_unmasked_keeps_the_stored_value_of_a_mask() -> None:
    sent = {"X-Token": SECRET_MASK, "X-New": "v", "X-Gone": SECRET_MASK}
    assert secrets_unmasked(sent, HEADERS) == {"X-Token": "tok-s3cret", "X-New": "v"}
    assert secrets_unmasked(sent, HEADERS, missing="") == {
        "X-Token": "tok-s3cret", "X-New": "v", "X-Gone": ""}
    assert secrets_unmasked(None, HEADERS) == {}


def test_provider_headers_over_the_console_api(staff: APIClient, provider: Provider) -> None:
    shown = staff.get(f"{API}/providers/hdr")
    assert shown.status_code == 200
    assert "tok-s3cret" not in shown.content.decode()
    r = staff.patch(f"{API}/providers/hdr", {"options": {"extra_headers": {
        "X-Token": SECRET_MASK, "X-New": "v", "X-Gone": SECRET_MASK}}}, format="json")
    assert r.status_code == 200, r.content
    assert "tok-s3cret" not in r.content.decode()
    provider.refresh_from_db()
    assert provider.options["extra_headers"] == {"X-Token": "tok-s3cret", "X-New": "v"}


def test_provider_headers_in_the_admin_form(staff: APIClient, provider: Provider) -> None:
    url = reverse("admin:agents_provider_change", args=[provider.pk])
    page = staff.get(url).content.decode()
    assert "tok-s3cret" not in page
    assert "[hidden]" in page
    assert "env:GAIA_ORG" in page  # a variable's name is no secret
    options = {"extra_headers": {"X-Token": SECRET_MASK, "X-Org": "env:GAIA_ORG",
                                 "X-Gone": SECRET_MASK, "X-New": "v"}}
    staff.post(url, {"name": "hdr", "kind": "openai", "base_url": "https://x.example/v1",
                     "api_key_env": "", "api_key_secret": "", "default_model": "m",
                     "timeout_seconds": "30", "max_concurrency": "4",
                     "options": json.dumps(options)})
    provider.refresh_from_db()
    assert provider.options["extra_headers"] == {**HEADERS, "X-New": "v"}


def test_provider_headers_in_the_config_document(provider: Provider) -> None:
    doc = agents_export()
    assert "tok-s3cret" not in yaml.safe_dump(doc)
    shown = next(p for p in doc["providers"] if p["name"] == "hdr")
    assert shown["options"]["extra_headers"] == {"X-Token": SECRET_MASK, "X-Org": "env:GAIA_ORG"}
    shown["options"]["extra_headers"].update({"X-Gone": SECRET_MASK, "X-New": "v"})
    agents_import(data=doc)
    provider.refresh_from_db()
    assert provider.options["extra_headers"] == {**HEADERS, "X-New": "v"}


def test_mcp_server_secrets_in_the_admin_form(staff: APIClient, server: McpServer) -> None:
    url = reverse("admin:agents_mcpserver_change", args=[server.pk])
    page = staff.get(url).content.decode()
    assert "s3cret" not in page
    assert "[hidden]" in page
    staff.post(url, {
        "name": "docs", "command": "", "args": "[]", "env": "{}",
        "url": "https://mcp.example/mcp", "headers_env": "{}", "allowed_tools": "[]",
        "headers": json.dumps({"Authorization": SECRET_MASK, "X-Gone": SECRET_MASK}),
        "require_approval": '"never"', "timeout_seconds": "60", "enabled": "on"})
    server.refresh_from_db()
    assert server.headers == {"Authorization": "Bearer s3cret", "X-Gone": ""}


def test_mcp_server_secrets_in_the_config_document(server: McpServer) -> None:
    doc = agents_export()
    assert "s3cret" not in yaml.safe_dump(doc)
    assert doc["mcp_servers"][0]["headers"] == {"Authorization": SECRET_MASK}
    doc["mcp_servers"][0]["headers"]["X-Gone"] = SECRET_MASK
    agents_import(data=doc)
    server.refresh_from_db()
    assert server.headers == {"Authorization": "Bearer s3cret", "X-Gone": ""}


def test_mcp_server_secrets_in_the_operator_config_view(make_key: Any,
                                                        server: McpServer) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_key('ops', scopes=['operator'])[1]}")
    r = client.get(f"{API}/organism/config")
    assert r.status_code == 200
    assert "s3cret" not in r.content.decode()
    shown = next(s for s in r.json()["mcp_servers"] if s["name"] == "docs")
    assert shown["headers"] == {"Authorization": SECRET_MASK}
