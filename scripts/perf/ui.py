#!/usr/bin/env python3
"""How fast the operator pages render and how soon a browser shows what happens.

Starts a real Gaia server (uvicorn) on a throwaway SQLite data dir (or the database in
DATABASE_URL), seeds threads (``--threads`` of ``--messages`` messages each) and a staff user,
then prints:

* server render time of the dashboard, the thread list and a thread page (p50/p99 over
  ``--requests`` requests with the staff session);
* in Debian's Chromium (Playwright), on an open thread page:
  - stored -> shown: from the /v1 JSON reply reaching the client to the stored reply appearing
    in the page (feed ``message`` event, DOM patched);
  - first token -> first delta shown: from the client's first SSE token to the page's growing
    reply showing text (the runtime coalesces deltas to one per 100 ms per turn).

  .venv/bin/python -m scripts.perf.ui [--threads 300] [--messages 20] [--requests 30]
      [--turns 20]

The browser shares the machine's CPU with the server; figures on 2 cores are pessimistic.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from scripts.perf.harness import ROOT, free_port, percentile

PASSWORD = "perf-operator-pw"
STREAM_REPLY = " ".join(f"w{i}" for i in range(30))

# Records when a stored message (data-message-id) or the first streamed text appears.
OBSERVER = """() => {
  window.__shown = {};
  window.__firstDelta = null;
  new MutationObserver(() => {
    document.querySelectorAll('article[data-message-id]').forEach(a => {
      const id = a.dataset.messageId;
      if (!(id in window.__shown)) window.__shown[id] = Date.now();
    });
    const s = document.querySelector('article.streaming .body');
    if (s && s.textContent && window.__firstDelta === null) window.__firstDelta = Date.now();
  }).observe(document.getElementById('messages'),
             {childList: true, subtree: true, characterData: true});
}"""


def setup(data_dir: Path, args: argparse.Namespace) -> tuple[str, str]:
    env = {**os.environ, "GAIA_DATA_DIR": str(data_dir)}
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, cwd=ROOT)
    script = f"""
import hashlib, uuid
from django.contrib.auth import get_user_model
from agents.models import Agent, Message, Provider, Thread
from agents.services import api_key_create
p, _ = Provider.objects.update_or_create(name='perf', defaults=dict(kind='fake',
    max_concurrency=1000, options={{}}))
Agent.objects.update_or_create(slug='perf', defaults=dict(display_name='Perf', provider=p))
s, _ = Provider.objects.update_or_create(name='perf-stream', defaults=dict(kind='fake',
    max_concurrency=1000, options={{'reply': {STREAM_REPLY!r}, 'delay_ms': 20}}))
Agent.objects.update_or_create(slug='perf-stream', defaults=dict(display_name='S', provider=s))
get_user_model().objects.create_user('perf', password={PASSWORD!r}, is_staff=True)
agent = Agent.objects.get(slug='perf')
for t in range({args.threads}):
    th = Thread.objects.create(agent=agent, session_key=f'seed-{{t}}', title=f'seeded {{t}}',
        history_digest=uuid.uuid4().hex, message_count={args.messages}, status='completed')
    Message.objects.bulk_create([Message(thread=th, seq=i,
        role='user' if i % 2 == 0 else 'assistant',
        content=f'message {{i}} of thread {{t}} ' * 8) for i in range({args.messages})])
print(api_key_create(name='perf')[1], Thread.objects.get(title='seeded 0').pk)
"""
    out = subprocess.run([*manage, "shell", "-c", script], env=env, check=True, cwd=ROOT,
                         capture_output=True, text=True)
    key, seeded = out.stdout.strip().splitlines()[-1].split()
    return key, seeded


def start(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    from gaia_site.server_cli import server_command

    port = free_port()
    env = {**os.environ, "GAIA_DATA_DIR": str(data_dir)}
    log = open(data_dir / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(server_command("127.0.0.1", port), env=env, cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(base + "/health", timeout=1)
            return proc, base
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def login(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30, headers={"Accept": "text/html"})  # a browser
    page = client.get("/login/")
    token = page.text.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
    r = client.post("/login/", data={"username": "perf", "password": PASSWORD,
                                     "csrfmiddlewaretoken": token})
    assert r.status_code == 302, r.text
    return client


def render_times(client: httpx.Client, path: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.get(path)
        out.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, (path, r.status_code)
        assert "<html" in r.text, path
    return out


def row(name: str, values: list[float]) -> None:
    print(f"  {name:<44} p50 {percentile(values, 50):7.1f} ms   p99 {percentile(values, 99):7.1f}"
          f" ms   (n={len(values)})")


def browser_figures(base: str, key: str, args: argparse.Namespace) -> None:
    from playwright.sync_api import sync_playwright

    auth = {"Authorization": f"Bearer {key}"}
    first = httpx.post(base + "/v1/chat/completions", headers={**auth, "X-Session-Id": "perf"},
                       json={"model": "perf", "messages": [{"role": "user", "content": "t0"}]},
                       timeout=30)
    thread = first.headers["x-gaia-thread-id"]
    history: list[dict[str, Any]] = [{"role": "user", "content": "t0"},
                                     {"role": "assistant", "content": "t0"}]
    stored, answered, deltas = [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(base_url=base)
        page.goto("/login/")
        page.fill("input[name=username]", "perf")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/")
        page.goto(f"/threads/{thread}/")
        page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")
        page.evaluate(OBSERVER)
        for i in range(args.turns):
            text = f"t{i + 1}"
            sent = time.time() * 1000
            r = httpx.post(base + "/v1/chat/completions",
                           headers={**auth, "X-Session-Id": "perf"}, timeout=30,
                           json={"model": "perf", "messages": [*history,
                                                               {"role": "user", "content": text}]})
            answered.append(time.time() * 1000 - sent)
            assert r.status_code == 200, r.text
            history += [{"role": "user", "content": text}, {"role": "assistant", "content": text}]
            page.wait_for_function(f"document.querySelectorAll('article[data-message-id]')"
                                   f".length >= {len(history)}")
            shown = page.evaluate("Math.max(...Object.values(window.__shown))")
            stored.append(shown - sent)
        for i in range(max(3, args.turns // 4)):
            session = {**auth, "X-Session-Id": f"perf-stream-{i}"}
            opening = [{"role": "user", "content": "go"}]
            r = httpx.post(base + "/v1/chat/completions", headers=session, timeout=30,
                           json={"model": "perf-stream", "messages": opening})
            page.goto(f"/threads/{r.headers['x-gaia-thread-id']}/")
            page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")
            page.evaluate(OBSERVER)
            body = {"model": "perf-stream", "stream": True, "messages": [
                *opening, {"role": "assistant", "content": STREAM_REPLY},
                {"role": "user", "content": "again"}]}
            with httpx.stream("POST", base + "/v1/chat/completions", timeout=30,
                              headers=session, json=body) as resp:
                first_token = None
                for line in resp.iter_lines():
                    if first_token is None and line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                            first_token = time.time() * 1000
                            page.wait_for_function("window.__firstDelta !== null")
                            deltas.append(max(0.0, page.evaluate("window.__firstDelta")
                                              - first_token))
        browser.close()
    print("Browser (Chromium, one page):")
    row("/v1 request -> reply at the client (JSON)", answered)
    row("/v1 request -> reply shown in the thread page", stored)
    row("first streamed token -> growing reply shows it", deltas)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=300)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gaia-perf-ui-") as tmp:
        data_dir = Path(tmp)
        key, seeded = setup(data_dir, args)
        proc, base = start(data_dir)
        try:
            client = login(base)
            print(f"Server render ({args.threads} threads of {args.messages} messages, "
                  f"{os.environ.get('DATABASE_URL', 'SQLite')}):")
            for name, path in (("dashboard /", "/"), ("thread list /threads/", "/threads/"),
                               ("thread search /threads/?q=...", "/threads/?q=message+3+of"),
                               (f"thread page ({args.messages} messages)",
                                f"/threads/{seeded}/")):
                render_times(client, path, 3)  # warm up
                row(name, render_times(client, path, args.requests))
            browser_figures(base, key, args)
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
