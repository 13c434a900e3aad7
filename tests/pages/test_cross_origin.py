"""A GUI on another origin (reference 003: "GUIs are just consumers"): a page served on another
port, in Chromium, reads ``/api/v1/organism`` (with an API key, and with a staff session's
cookie) and opens the ``/ws`` feed when its origin is in ``GAIA_OPERATOR_ALLOWED_ORIGINS``, and
is refused all three when it is not (the default: same-origin only)."""

from __future__ import annotations

import functools
import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import free_port
from tests.pages.conftest import STAFF_PASSWORD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAGE = """<!doctype html><meta charset="utf-8"><title>A GUI elsewhere</title>
<script>
const params = new URLSearchParams(location.search);
const gaia = params.get("gaia"), key = params.get("key");
async function attempt(options) {
  try {
    const r = await fetch(gaia + "/api/v1/organism", options);
    return {status: r.status, body: await r.json()};
  } catch (e) {
    return {error: String(e)};
  }
}
window.result = (async () => ({
  key: await attempt({headers: {"Authorization": "Bearer " + key}}),
  session: await attempt({credentials: "include"}),
  ws: await new Promise((resolve) => {
    const ws = new WebSocket(gaia.replace("http://", "ws://") + "/ws");
    ws.onopen = () => ws.send(JSON.stringify({cmd: "auth", api_key: key}));
    ws.onmessage = (m) => { ws.close(); resolve({event: JSON.parse(m.data).event}); };
    ws.onerror = () => resolve({error: "refused"});
    ws.onclose = (c) => resolve({closed: c.code});
  }),
}))();
</script>
"""


@pytest.fixture
def gui_origin(tmp_path: Path) -> Iterator[str]:
    """A static page on its own port: another origin than any Gaia server here."""
    (tmp_path / "index.html").write_text(PAGE)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def visit(browser: Any, gaia: Any, origin: str, key: str) -> dict[str, Any]:
    """What the page on ``origin`` got from ``gaia``, in a browser logged in to Gaia as
    staff (through its login form, so the session cookie is a real one)."""
    context = browser.new_context()
    try:
        login = context.new_page()
        login.goto(gaia.url + "/login/")
        login.fill("input[name=username]", "operator")
        login.fill("input[name=password]", STAFF_PASSWORD)
        login.click("button[type=submit]")
        login.wait_for_url(re.compile(r"/$"))
        page = context.new_page()
        page.goto(f"{origin}/index.html?gaia={quote(gaia.url)}&key={quote(key)}")
        return page.evaluate("window.result")
    finally:
        context.close()


def test_a_listed_origin_reads_the_api_and_opens_the_feed(browser, gaia_server_factory,
                                                          gui_origin, staff_user, make_key):
    gaia = gaia_server_factory(GAIA_OPERATOR_ALLOWED_ORIGINS=gui_origin)
    _, key = make_key("gui", scopes=["operator"])
    got = visit(browser, gaia, gui_origin, key)
    assert got["key"]["status"] == 200, got
    assert {"status", "agent_count", "mode"} <= set(got["key"]["body"]), got
    assert got["session"]["status"] == 200, got  # the staff cookie went along
    assert "agent_count" in got["session"]["body"], got
    assert got["ws"] == {"event": "connected"}, got
    # The preflight and the answer name the origin and allow credentials, for it alone.
    r = httpx.options(gaia.url + "/api/v1/organism", headers={
        "Origin": gui_origin, "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization"})
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == gui_origin
    assert r.headers["access-control-allow-credentials"] == "true"
    other = httpx.get(gaia.url + "/api/v1/organism", headers={
        "Origin": "http://127.0.0.1:1", "Authorization": f"Bearer {key}"})
    assert "access-control-allow-origin" not in other.headers


def test_an_unlisted_origin_is_refused_everything(browser, gaia_server, gui_origin, staff_user,
                                                  make_key):
    _, key = make_key("gui", scopes=["operator"])
    got = visit(browser, gaia_server, gui_origin, key)
    assert "error" in got["key"], got  # the browser withholds the answer (no CORS headers)
    assert "error" in got["session"], got
    assert "event" not in got["ws"], got  # refused at the handshake: no socket
    # The same key and the same feed work from Gaia's own origin and without one.
    assert httpx.get(gaia_server.url + "/api/v1/organism",
                     headers={"Authorization": f"Bearer {key}"}).status_code == 200
