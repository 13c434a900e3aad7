"""The API docs (Redoc, Swagger UI) load nothing from another host, in a real browser: Redoc's
bundle draws a Redocly logo from cdn.redoc.ly, which the page's Content-Security-Policy
keeps from being fetched (issue 26 item 8)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import pytest


@pytest.mark.parametrize("path", ["/api/redoc", "/api/docs"])
def test_the_api_docs_fetch_nothing_from_another_host(browser: Any, gaia_server: Any,
                                                      path: str) -> None:
    context = browser.new_context(base_url=gaia_server.url)
    page = context.new_page()
    here = urlsplit(gaia_server.url).netloc
    elsewhere: list[str] = []  # asked of another host and not refused by the page's policy

    def foreign(request: Any) -> bool:
        url = urlsplit(request.url)
        return url.scheme in ("http", "https") and url.netloc != here

    page.on("requestfinished", lambda r: elsewhere.append(r.url) if foreign(r) else None)
    page.on("requestfailed", lambda r: elsewhere.append(f"{r.url} ({r.failure})")
            if foreign(r) and r.failure not in ("csp", "net::ERR_BLOCKED_BY_CSP") else None)
    page.goto(path)
    # drawn from the schema: the operations are on the page (Redoc: and its footer's logo)
    page.get_by_text("Send a message to an agent").first.wait_for(state="attached",
                                                                    timeout=30_000)
    time.sleep(1)  # what the drawn page fetches next (the logo) has been asked for by now
    context.close()
    assert elsewhere == []
