"""Issue 35 item 3 and its class: every URL allow-list compares parsed URLs (scheme, host, port
exactly; a ``*`` is a path prefix on a segment boundary; userinfo, backslashes and what two
parsers could read differently refused): :mod:`agents.selectors.urls`, and the places that use
it (a Responses client's ``mcp`` tool, the operator origins, an MCP server's configured URL)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agents.kernel.exceptions import InvalidRequest
from agents.selectors.origins import operator_origin_allowed, origin_normalized
from agents.selectors.urls import (
    UrlRefused,
    url_matches,
    url_parsed,
    url_rule_parsed,
    url_rules_check,
)
from agents.services.tools import mcp_servers_import
from agents.tools.client import client_mcp_server
from tests.conftest import ROOT, free_port

RULE = "http://localhost:18493*"

# (url, rule, allowed): the attacks first, then what a rule must still let through.
CASES = [
    # userinfo: the text starts with the rule, the host is 127.0.0.1
    ("http://localhost:18493@127.0.0.1:18494/any/path?q", RULE, False),
    ("http://localhost:18493:x@127.0.0.1:18494/", RULE, False),
    ("http://localhost:18493\\@127.0.0.1:18494/any/path?q", RULE, False),
    ("http://localhost:18493%40127.0.0.1:18494/", RULE, False),
    ("http://localhost:18493/@127.0.0.1:18494", RULE, True),  # '@' in the path: same server
    ("http://localhost:18493\\.evil.com/", RULE, False),
    ("http://localhost:18493/\\..\\admin", RULE, False),
    # another host that begins with the listed one
    ("http://localhost.evil.com/", "http://localhost*", False),
    ("http://localhost:80.evil.com/", "http://localhost:80*", False),
    ("http://localhostx:18493/", RULE, False),
    # port confusion
    ("http://localhost:184930/", RULE, False),
    ("http://localhost:18494/", "http://localhost:1849*", False),
    ("http://localhost:18493:18494/", RULE, False),
    ("http://localhost/", RULE, False),
    ("http://localhost:80/mcp", "http://localhost/mcp", True),  # default ports spelled out
    ("https://localhost:443/mcp", "https://localhost/mcp", True),
    ("https://localhost:18493/mcp", RULE, False),  # the scheme is compared
    ("http://localhost:443/mcp", "https://localhost/mcp", False),
    # IPv6 literals: compared compressed, never mistaken for a name
    ("http://[::1]:18493/mcp", "http://[0:0:0:0:0:0:0:1]:18493/*", True),
    ("http://[::1]:18494/mcp", "http://[::1]:18493/*", False),
    ("http://[::ffff:127.0.0.1]:18493/", "http://127.0.0.1:18493*", False),
    ("http://[::1%25eth0]:18493/", "http://[::1]:18493*", False),
    # numeric host spellings: refused, not resolved
    ("http://127.1:18493/", "http://127.0.0.1:18493*", False),
    ("http://2130706433:18493/", "http://127.0.0.1:18493*", False),
    ("http://0x7f.0.0.1:18493/", "http://127.0.0.1:18493*", False),
    ("http://127.0.0.1:18493/", "http://127.0.0.1:18493*", True),
    # path: a prefix ends on a segment boundary; no way out of it
    ("http://localhost:18493/mcp", "http://localhost:18493/mcp*", True),
    ("http://localhost:18493/mcp/", "http://localhost:18493/mcp*", True),
    ("http://localhost:18493/mcp/tools?x=1", "http://localhost:18493/mcp*", True),
    ("http://localhost:18493/mcpx", "http://localhost:18493/mcp*", False),
    ("http://localhost:18493/mcp", "http://localhost:18493/mcp/*", True),
    ("http://localhost:18493/mcp/../admin", "http://localhost:18493/mcp/*", False),
    ("http://localhost:18493/mcp/%2e%2e/admin", "http://localhost:18493/mcp/*", False),
    ("http://localhost:18493/mcp/.%2E/admin", "http://localhost:18493/mcp/*", False),
    ("http://localhost:18493/mcp/..;/admin", "http://localhost:18493/mcp/*", False),
    ("http://localhost:18493/mcp%2f..%2fadmin", "http://localhost:18493/mcp*", False),
    ("http://localhost:18493/mcp/%252e%252e/admin", "http://localhost:18493/mcp/*", False),
    ("http://localhost:18493/%6Dcp", "http://localhost:18493/mcp", True),  # %6D is "m"
    # exact rules: the same path and no query
    ("http://localhost:18493/mcp", "http://localhost:18493/mcp", True),
    ("http://localhost:18493/mcp?x=1", "http://localhost:18493/mcp", False),
    ("http://localhost:18493/mcp/x", "http://localhost:18493/mcp", False),
    ("http://localhost:18493", "http://localhost:18493/", True),
    # case: scheme and host are not case-sensitive, the path is
    ("HTTP://LocalHost:18493/mcp", "http://localhost:18493/mcp", True),
    ("http://localhost:18493/MCP", "http://localhost:18493/mcp*", False),
    # what is not a plain http(s) URL matches nothing
    ("http://localhost:18493/mcp#x", "http://localhost:18493/mcp*", False),
    ("http://localhost:18493/m cp", RULE, False),
    ("http://localhost:18493/mcp\r\nX: y", RULE, False),
    ("http://localhost:18493\t/mcp", RULE, False),
    (" http://localhost:18493/mcp", RULE, False),
    ("http://l\u043ecalhost:18493/", "http://l\u043ecalhost:18493*", False),  # Cyrillic o
    ("file://localhost:18493/etc/passwd", "file://localhost:18493*", False),
    ("ftp://localhost:18493/", RULE, False),
    ("http:/localhost:18493/", RULE, False),
    ("//localhost:18493/", RULE, False),
    ("http://localhost:18493/mcp", "http://*.localhost:18493/mcp", False),
    ("http://localhost:18493/mcp", "http://localhost:18493/mcp?x=*", False),
]


@pytest.mark.parametrize(("url", "rule", "allowed"), CASES)
def test_url_matches_compares_parsed_urls(url: str, rule: str, allowed: bool) -> None:
    assert url_matches(url, rule) is allowed


@pytest.mark.parametrize("url", [
    "http://a@localhost/", "http://:@localhost/", "http://localhost\\x/", "http://local%68ost/",
    "http://localhost:0/", "http://localhost:65536/", "http://localhost:/", "http://[::1/",
    "http://localhost/%zz", "http://localhost/%", "http://localhost/%00", "http:///x",
    "javascript:alert(1)", "http://a_b..c/", "http://localhost/" + "a" * 2100, "",
])
def test_url_parsed_refuses_what_parsers_read_differently(url: str) -> None:
    with pytest.raises(UrlRefused):
        url_parsed(url)


def test_url_parsed_spells_out_what_is_called() -> None:
    url = url_parsed("HTTPS://Example.COM/%7euser/x%3a?q=%2f")
    assert (url.scheme, url.host, url.port, url.path, url.query) == (
        "https", "example.com", 443, "/~user/x%3A", "q=%2F")
    assert url.text == "https://example.com/~user/x%3A?q=%2F"
    assert url.origin == "https://example.com:443"
    assert url_parsed("http://[0::1]:8080").text == "http://[::1]:8080/"


def test_a_rule_is_checked_when_the_server_starts() -> None:
    url_rules_check(["http://localhost:18493*", "https://mcp.example.com/mcp"],
                    setting="GAIA_MCP_ALLOWED_URLS")
    for bad in ("http://user@localhost:18493*", "https://*.example.com/*", "localhost:1"):
        with pytest.raises(UrlRefused, match="GAIA_MCP_ALLOWED_URLS"):
            url_rules_check(["http://ok/", bad], setting="GAIA_MCP_ALLOWED_URLS")
    assert url_rule_parsed("http://h:1/mcp/*").path == "/mcp/"


@pytest.mark.parametrize(("setting", "value"), [
    ("GAIA_MCP_ALLOWED_URLS", "http://localhost:1*,http://user@localhost:18493*"),
    ("GAIA_MCP_ALLOWED_URLS", "https://*.example.com/*"),
    ("GAIA_OPERATOR_ALLOWED_ORIGINS", "https://gui.example.com/app"),
    ("GAIA_OPERATOR_ALLOWED_ORIGINS", "https://admin@gui.example.com"),
])
def test_a_setting_that_is_not_a_url_rule_stops_the_server(setting: str, value: str) -> None:
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, text=True,
                          env={**os.environ, setting: value}, capture_output=True, timeout=120,
                          check=False)
    assert done.returncode != 0
    assert f"ImproperlyConfigured: {setting}: " in done.stderr


def test_a_clients_mcp_tool_is_refused_before_anything_is_reached(settings: Any) -> None:
    settings.GAIA_MCP_ALLOWED_URLS = [RULE]
    tool = {"type": "mcp", "server_label": "ev"}
    for url in ("http://localhost:18493@127.0.0.1:18494/any/path?q",
                "http://localhost:18493\\@127.0.0.1:18494/any/path?q",
                "http://localhost.evil.com:18493/"):
        with pytest.raises(InvalidRequest) as caught:
            client_mcp_server({**tool, "server_url": url}, "tools[0]")
        assert (caught.value.param, caught.value.code) == ("tools[0].server_url",
                                                           "mcp_server_not_allowed")
    # what is called is what was compared
    server = client_mcp_server({**tool, "server_url": "http://LOCALHOST:18493/mcp"}, "tools[0]")
    assert server.url == "http://localhost:18493/mcp"


def test_operator_origins_are_parsed_urls(settings: Any) -> None:
    settings.GAIA_OPERATOR_ALLOWED_ORIGINS = ["https://gui.example.com"]
    assert origin_normalized("HTTPS://GUI.example.com") == "https://gui.example.com:443"
    assert origin_normalized("https://gui.example.com:443/") == "https://gui.example.com:443"
    for bad in ("https://evil@gui.example.com", "https://gui.example.com\\@evil.com",
                "https://gui.example.com/path", "null", "file://", "https://gui.example.com?x"):
        assert origin_normalized(bad) is None, bad
        assert not operator_origin_allowed(bad, host="gui.example.com"), bad
    assert operator_origin_allowed("https://gui.example.com", host="other:8000")
    assert operator_origin_allowed("http://127.0.0.1:8000", host="127.0.0.1:8000")
    assert operator_origin_allowed("http://[::1]:8000", host="[0::1]:8000")
    assert operator_origin_allowed("http://localhost", host="localhost")
    assert not operator_origin_allowed("http://localhost:8000", host="localhost")
    assert not operator_origin_allowed("http://127.0.0.1:8000", host="x@127.0.0.1:8000")


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["http://user:secret@mcp.example.com/mcp",
                                 "http://token@mcp.example.com/mcp"])
def test_an_mcp_server_url_with_userinfo_is_refused_at_config_load(url: str) -> None:
    with pytest.raises(InvalidRequest, match=r"mcp_servers\[0\] \(remote\): url: the URL"):
        mcp_servers_import([{"name": "remote", "url": url}], create_only=False)


@pytest.mark.django_db
def test_the_admin_refuses_an_mcp_server_url_with_userinfo() -> None:
    from agents.admin import McpServerForm

    base = {"name": "remote", "command": "", "args": "[]", "env": "{}", "headers": "{}",
            "headers_env": "{}", "allowed_tools": "[]", "require_approval": '"never"',
            "timeout_seconds": "60", "enabled": "on"}
    form = McpServerForm(data={**base, "url": "http://token@mcp.example.com/mcp"})
    assert not form.is_valid()
    assert form.errors["url"] == ["Not a URL Gaia calls: the URL holds userinfo ('user@' "
                                  "before the host)."]
    assert McpServerForm(data={**base, "url": "http://mcp.example.com/mcp"}).is_valid()


# -- end to end: a live Gaia, a client's Responses request -----------------------------------


@pytest.fixture
def trap() -> Iterator[dict[str, Any]]:
    """A listening socket on a free port that records every connection made to it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    seen: dict[str, Any] = {"port": sock.getsockname()[1], "hits": 0}
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            seen["hits"] += 1
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield seen
    done.set()
    thread.join(5)
    sock.close()


ATTACKS = ["http://localhost:{allowed}@127.0.0.1:{trap}/any/path?q",
           "http://localhost:{allowed}\\@127.0.0.1:{trap}/any/path?q",
           "http://localhost:{allowed}:x@127.0.0.1:{trap}/mcp"]


@pytest.mark.django_db(transaction=True)
def test_an_unlisted_server_behind_a_listed_prefix_is_never_contacted(
        gaia_server_factory: Any, api_key: str, make_agent: Any, trap: dict[str, Any]) -> None:
    allowed = free_port()
    listed = f"http://127.0.0.1:{trap['port']}/listed"
    server = gaia_server_factory(GAIA_MCP_ALLOWED_URLS=f"http://localhost:{allowed}*,{listed}")
    # an agent whose model calls the client's server's tool: the listing would reach it
    make_agent(slug="plain", provider__options={"script": [
        {"tool_calls": [{"name": "mcp__ev__echo", "arguments": {"message": "x"}}]},
        {"reply": "Results: {results}"}]})
    client = openai.OpenAI(base_url=server.v1, api_key=api_key, max_retries=0)

    def ask(url: str) -> Any:
        return client.responses.create(model="plain", input="hi", tools=[
            {"type": "mcp", "server_label": "ev", "server_url": url,
             "require_approval": "never"}])

    for attack in ATTACKS:
        url = attack.format(allowed=allowed, trap=trap["port"])
        with pytest.raises(openai.BadRequestError) as caught:
            ask(url)
        error = caught.value.body
        assert (error["param"], error["code"], error["type"]) == (
            "tools[0].server_url", "mcp_server_not_allowed", "invalid_request_error"), url
    assert trap["hits"] == 0
    # the instrument sees a contact: the trap's own listed URL is reached (and fails to list)
    ask(listed)
    assert trap["hits"] > 0
