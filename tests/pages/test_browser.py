"""The operator pages in a real browser (Debian's Chromium through Playwright) against a live
Gaia process: what an operator sees and does, live."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest

from tests.pages.conftest import no_raw_times, screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def expect():
    from playwright.sync_api import expect as pw_expect

    return pw_expect


def chat(server, key, model, text, *, stream=False, session="ui-test", history=(), timeout=30):
    messages = [*history, {"role": "user", "content": text}]
    return httpx.post(server.v1 + "/chat/completions", timeout=timeout,
                      json={"model": model, "stream": stream, "messages": messages},
                      headers={"Authorization": f"Bearer {key}", "X-Session-Id": session})


def test_login_page_then_dashboard(browser, gaia_server, staff_user, echo_agent):
    context = browser.new_context(base_url=gaia_server.url)
    page = context.new_page()
    page.goto("/threads/")
    assert "/login/" in page.url
    screenshot(page, "login")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    expect()(page.locator(".error")).to_contain_text(
        "Please enter the username and password of a staff account")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", "pw-operator-123")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/threads/$"))
    page.click("text=Log out")
    page.wait_for_url(re.compile(r"/login/$"))
    context.close()


def test_dashboard_shows_agents_with_state_lights(page, make_agent):
    make_agent(slug="calm")
    make_agent(slug="resting", paused=True)
    page.goto("/")
    expect()(page.locator('tr[data-agent="resting"] .light')).to_have_class(
        re.compile("state-paused"))
    expect()(page.locator('tr[data-agent="calm"] .light')).to_have_class(
        re.compile("state-idle"))
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    screenshot(page, "dashboard")
    # the uptime reads as a duration and ticks between reads of the organism
    uptime = page.locator('[data-stat="uptime_seconds"]')
    expect()(uptime).to_have_text(re.compile(r"^\d+ (s|min \d+ s|h \d+ min)$"))
    first = uptime.text_content()
    expect()(uptime).not_to_have_text(first, timeout=5000)


def test_streaming_reply_grows_on_the_thread_page(page, gaia_server, make_agent, api_key):
    words = " ".join(f"word{i}" for i in range(60))
    agent = make_agent(slug="slowpoke", provider__options={"reply": words, "delay_ms": 50})
    first = chat(gaia_server, api_key, agent.slug, "hello")
    thread_id = first.headers["x-gaia-thread-id"]
    page.goto(f"/threads/{thread_id}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    screenshot(page, "thread")
    tokens_before = int(page.locator("#thread-tokens-out").text_content())
    assert tokens_before > 0

    done = threading.Event()

    def stream():
        with httpx.stream("POST", gaia_server.v1 + "/chat/completions", timeout=30, json={
                "model": agent.slug, "stream": True, "messages": [
                    {"role": "user", "content": "hello"},
                    {"role": "assistant", "content": words},
                    {"role": "user", "content": "again"}]},
                headers={"Authorization": f"Bearer {api_key}",
                         "X-Session-Id": "ui-test"}) as r:
            for _ in r.iter_lines():
                pass
        done.set()

    worker = threading.Thread(target=stream)
    worker.start()
    growing = page.locator("article.streaming .body")
    expect()(growing).to_contain_text("word5", timeout=10_000)
    partial = growing.text_content()
    assert not done.is_set(), "the reply finished before the page showed it growing"
    assert "word59" not in partial
    expect()(growing).to_contain_text("word20", timeout=10_000)
    screenshot(page, "thread-streaming")
    worker.join(30)
    final = page.locator("article.role-assistant[data-message-id]").last
    expect()(final).to_contain_text("word59", timeout=10_000)
    expect()(final.locator('[data-meta="finish"]')).to_have_text("stop")
    expect()(page.locator("#thread-status")).to_have_text("completed")
    expect()(page.locator("#kill-form")).to_be_hidden()
    # the header's token totals follow, without a reload
    from agents.models import Thread

    stored = Thread.objects.get(pk=thread_id)
    assert stored.output_tokens > tokens_before
    expect()(page.locator("#thread-tokens-out")).to_have_text(str(stored.output_tokens))
    expect()(page.locator("#thread-tokens-in")).to_have_text(str(stored.input_tokens))


def test_inject_from_the_page_shows_the_reply(page, gaia_server, echo_agent, api_key):
    first = chat(gaia_server, api_key, echo_agent.slug, "start")
    page.goto(f"/threads/{first.headers['x-gaia-thread-id']}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    page.fill("#inject-text", "operator says hi")
    page.click("#inject")
    expect()(page.locator("article.role-user").last).to_contain_text("operator says hi")
    reply = page.locator("article.role-assistant[data-message-id]").last
    expect()(reply).to_contain_text("operator says hi", timeout=10_000)
    expect()(page.locator("article[data-message-id]")).to_have_count(4)


def test_kill_a_slow_turn_from_the_page(page, gaia_server, make_agent, api_key):
    words = " ".join(f"w{i}" for i in range(400))
    agent = make_agent(slug="endless", provider__options={"reply": words, "delay_ms": 100})
    quick = make_agent(slug="endless-first", provider__options={"reply": "ok"})
    del quick
    result: dict[str, object] = {}

    def stream():
        with httpx.stream("POST", gaia_server.v1 + "/chat/completions", timeout=60, json={
                "model": agent.slug, "stream": True,
                "messages": [{"role": "user", "content": "go on forever"}]},
                headers={"Authorization": f"Bearer {api_key}",
                         "X-Session-Id": "ui-kill"}) as r:
            result["thread"] = r.headers.get("x-gaia-thread-id")
            result["body"] = "".join(r.iter_text())

    worker = threading.Thread(target=stream)
    worker.start()
    page.goto("/threads/")
    row = page.locator("tr", has_text="go on forever").first  # rendered, or live, or resynced
    expect()(row).to_be_visible(timeout=10_000)
    row.locator("a").click()
    expect()(page.locator("article.streaming .body")).to_contain_text("w3", timeout=10_000)
    expect()(page.locator("#kill")).to_be_visible()
    page.click("#kill")
    page.click("#confirm-yes")  # it asks first
    expect()(page.locator("#thread-status")).to_have_text("killed", timeout=10_000)
    expect()(page.locator("#kill-form")).to_be_hidden()
    final = page.locator("article.role-assistant[data-message-id]").last
    expect()(final.locator('[data-meta="finish"]')).to_have_text("killed", timeout=10_000)
    # the partial reply replaced the one that grew: nothing is left half-shown
    expect()(page.locator("article.role-assistant")).to_have_count(1)
    screenshot(page, "thread-killed")
    worker.join(30)
    assert "w399" not in str(result.get("body"))


def test_script_in_a_reply_shows_as_text(page, gaia_server, make_agent, api_key):
    evil = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    agent = make_agent(slug="mischief", provider__options={"reply": evil, "delay_ms": 30})
    first = chat(gaia_server, api_key, agent.slug, "hi", session="evil")
    page.goto(f"/threads/{first.headers['x-gaia-thread-id']}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    # a second reply arrives live, through the feed (deltas, then the stored message)
    chat(gaia_server, api_key, agent.slug, "again", session="evil", history=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": evil}])
    replies = page.locator("article.role-assistant[data-message-id] .body")
    expect()(replies).to_have_count(2, timeout=10_000)
    for i in range(2):
        expect()(replies.nth(i)).to_have_text(evil)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("article script, article img").count() == 0


def test_agent_page_pause_and_resume(page, make_agent):
    make_agent(slug="pausable")
    page.goto("/agents/pausable/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    expect()(page.locator("#resume")).to_be_hidden()
    screenshot(page, "agent")
    page.click("#pause")
    page.click("#confirm-yes")  # it asks first
    expect()(page.locator("#agent-light")).to_have_class(re.compile("state-paused"))
    expect()(page.locator("#resume")).to_be_visible()
    expect()(page.locator("#pause")).to_be_hidden()
    page.click("#resume")
    expect()(page.locator("#agent-light")).to_have_class(re.compile("state-idle"))
    expect()(page.locator("#pause")).to_be_visible()
    expect()(page.locator("#resume")).to_be_hidden()


def test_threads_list_page(page, gaia_server, echo_agent, api_key):
    chat(gaia_server, api_key, echo_agent.slug, "find the walrus", session="s1")
    chat(gaia_server, api_key, echo_agent.slug, "something else", session="s2")
    page.goto("/threads/")
    page.fill("input[name=q]", "walrus")
    page.click("text=Filter")
    expect()(page.locator("#thread-rows tr")).to_have_count(1)
    # times as people read them, the exact one on hover
    when = page.locator("#thread-rows tr .last-activity time")
    expect()(when).to_have_text("just now")
    assert when.get_attribute("title")
    assert re.match(r"^\d{4}-\d\d-\d\dT", when.get_attribute("datetime"))
    screenshot(page, "threads")
    page.goto("/agents/")
    screenshot(page, "agents")


def wait_run(server, key, run_id, timeout=90):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = httpx.get(f"{server.url}/api/v1/benchmarks/runs/{run_id}", timeout=10,
                        headers={"Authorization": f"Bearer {key}"}).json()
        if run["status"] in ("succeeded", "failed", "cancelled"):
            return run
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} did not finish: {run}")


def test_submit_a_run_from_the_form_and_watch_it_finish(page, run_server, bench_suite):
    page.goto(run_server.url + "/runs/new/")
    page.select_option("#run-suite", "ui-hotpotqa")
    page.check("input[name=selection][value=first]")
    page.fill("input[name=limit]", "4")
    # the API's refusal sits by the field it names
    page.fill("#run-protocol", "carrier-pigeon")
    page.click("#run-submit")
    slot = page.locator('#run-form .field-error[data-for="protocol"]')
    expect()(slot).to_contain_text("protocol")
    expect()(page.locator("#run-protocol")).to_have_attribute("aria-invalid", "true")
    page.fill("#run-protocol", "json")
    screenshot(page, "run-new")
    page.click("#run-submit")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    bar = page.locator("#run-progress")
    expect()(bar).to_have_attribute("aria-valuenow", "100", timeout=90_000)
    expect()(page.locator("#run-status")).to_have_text("succeeded", timeout=30_000)
    expect()(page.locator("#result-rows tr")).to_have_count(4)
    expect()(page.locator("#run-done")).to_have_text("4")
    assert int(page.locator("#run-packets").text_content()) > 0
    assert int(page.locator("#run-bytes").text_content()) > 0
    expect()(page.locator("#timeline svg rect.segment").first).to_be_visible()
    expect()(page.locator("#timeline svg text", has_text="reason")).to_have_count(1)
    lanes = page.locator("#timeline svg text").all_text_contents()
    assert {"search", "extract", "triple", "reason"} <= set(lanes)
    expect()(page.locator("#artifacts a", has_text="summary.json")).to_be_visible()
    expect()(page.locator("#cancel-form")).to_be_hidden()
    screenshot(page, "run")
    with page.expect_download() as download:
        page.click("#artifacts a:has-text('summary.json')")
    assert download.value.suggested_filename == "summary.json"
    page.goto(run_server.url + "/runs/")
    expect()(page.locator("#run-rows tr .progress").first).to_have_attribute(
        "aria-valuenow", "100")
    screenshot(page, "runs")


def test_run_list_bars_fill_live(page, run_server, bench_suite, make_key):
    _, key = make_key("bench", scopes=["benchmarks"])
    page.goto(run_server.url + "/runs/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")
    run = httpx.post(f"{run_server.url}/api/v1/benchmarks/runs", timeout=10,
                     json={"suite": "ui-hotpotqa", "limit": 3},
                     headers={"Authorization": f"Bearer {key}"}).json()
    row = page.locator(f'#run-rows tr[data-run="{run["id"]}"]')
    expect()(row).to_be_visible(timeout=10_000)  # arrived by the feed, not a reload
    expect()(row.locator(".progress")).to_have_attribute("aria-valuenow", "100",
                                                         timeout=90_000)
    expect()(row.locator(".run-status")).to_have_text("succeeded", timeout=30_000)
    no_raw_times(page)  # "Queued": "just now", not the API's ISO time
    page.goto(run_server.url + "/")  # the dashboard's recent runs
    expect()(page.locator(f'#recent-runs tr[data-run="{run["id"]}"] .progress')
             ).to_have_attribute("aria-valuenow", "100")


def test_cancel_a_running_run_from_its_page(page, run_server, bench_suite, make_agent,
                                            make_key):
    make_agent(slug="slow-reason", provider__options={"reply": "x", "ttft_ms": 1500})
    _, key = make_key("bench", scopes=["benchmarks"])
    run = httpx.post(f"{run_server.url}/api/v1/benchmarks/runs", timeout=10,
                     json={"suite": "ui-hotpotqa", "tools": {"reason": "slow-reason"}},
                     headers={"Authorization": f"Bearer {key}"}).json()
    page.goto(f"{run_server.url}/runs/{run['id']}/")
    expect()(page.locator("#run-status")).to_have_text("running", timeout=30_000)
    expect()(page.locator("#cancel")).to_be_visible()
    page.click("#cancel")
    # it asks first, and its two answers cannot be read as one another ("Cancel" beside
    # "Cancel the run" could)
    expect()(page.locator("#confirm-yes")).to_have_text("Cancel the run")
    expect()(page.locator("#confirm-no")).to_have_text("Keep it running")
    page.click("#confirm-no")
    expect()(page.locator("#confirm-dialog")).not_to_be_visible()
    expect()(page.locator("#run-status")).to_have_text("running")
    page.click("#cancel")
    page.click("#confirm-yes")
    expect()(page.locator("#run-status")).to_have_text("cancelled", timeout=30_000)
    expect()(page.locator("#cancel-form")).to_be_hidden()
    expect()(page.locator("#run-progress")).to_have_attribute("data-status", "cancelled")
    expect()(page.locator("#run-config time").first).to_be_visible()  # its times read as times
    no_raw_times(page)
    assert int(page.locator("#run-done").text_content()) < 6
    assert wait_run(run_server, key, run["id"])["status"] == "cancelled"
    # the turn the cancel stopped was no failure of the agent's: its light is not red
    from agents.models import Thread
    stopped = Thread.objects.filter(agent__slug="slow-reason").order_by("-updated_at")
    for _ in range(300):  # the worker records the turn it stopped as it stops
        if stopped.first().status not in (Thread.Status.ACTIVE, Thread.Status.WAITING):
            break
        time.sleep(0.1)
    assert stopped.first().status != Thread.Status.ACTIVE  # ended: "error", its client gone
    page.goto(f"{run_server.url}/agents/slow-reason/")
    expect()(page.locator("#agent-state")).not_to_have_text("error")
    expect()(page.locator("#agent-error")).to_be_hidden()


def _run_ids_from(first: int) -> None:
    """The next benchmark run is number ``first`` (a label's width grows with its "#id")."""
    from django.db import connection

    from benchmarks.models import BenchmarkRun, BenchmarkSuite

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)",
                           [BenchmarkRun._meta.db_table, first - 1])
    else:  # AUTOINCREMENT: a number once taken is not given again
        suite = BenchmarkSuite.objects.create(name="numbering", questions=[])
        BenchmarkRun.objects.create(id=first - 1, suite=suite).delete()
        suite.delete()


def test_compare_page_draws_the_charts(page, run_server, bench_suite, make_key):
    _, key = make_key("bench", scopes=["benchmarks"])
    _run_ids_from(201)  # as in a long-lived deployment (a whole suite's run made it so)
    ids = []
    # different protocols and overlapping questions: 0 and 4 were asked of one run only
    for body in ({"protocol": "json", "indexes": [0, 1, 2, 3]},
                 {"protocol": "msgpack", "indexes": [1, 2, 3, 4]}):
        r = httpx.post(f"{run_server.url}/api/v1/benchmarks/runs", timeout=10,
                       json={"suite": "ui-hotpotqa", **body},
                       headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    for run_id in ids:
        assert wait_run(run_server, key, run_id)["status"] == "succeeded"
    page.goto(run_server.url + "/runs/")
    for run_id in ids:
        page.check(f'.run-pick[value="{run_id}"]')
    page.click("#compare")
    page.wait_for_url(re.compile(r"/runs/compare/\?runs="))
    charts = page.locator("#charts svg.bar-chart")
    expect()(charts).to_have_count(7)
    for metric in ("exact_match", "f1", "rouge_l", "bytes", "packets", "header_overhead",
                   "elapsed_ms"):
        chart = page.locator(f'#charts svg[data-metric="{metric}"]')
        expect()(chart.locator("rect.bar")).to_have_count(2)
    # different protocols put different bytes on the wire: the bars differ
    widths = page.locator('#charts svg[data-metric="bytes"] rect.bar').evaluate_all(
        "rs => rs.map(r => Number(r.getAttribute('width')))")
    assert widths[0] != widths[1]
    expect()(page.locator("#compare-rows tr")).to_have_count(2)
    # each bar's label fits its column, its run's "#id" first: none runs off the chart (three-
    # digit ids ran off it by a character)
    fits = ("() => [...document.querySelectorAll('#charts text.bar-label')]"
            ".every(t => t.getBBox().x >= 0)")
    try:
        page.wait_for_function(fits, timeout=5_000)
    except Exception:  # noqa: BLE001 - the assertion below says what is wrong
        pass
    labels = page.locator("#charts text.bar-label").evaluate_all(
        "ts => ts.map(t => [t.firstChild.nodeValue, t.getBBox().x])")
    assert len(labels) == 14, labels
    assert all(text.startswith("#") and x >= 0 for text, x in labels), labels
    differs = page.locator("#differences tbody tr")
    expect()(differs).to_have_count(2)
    assert differs.locator("td:first-child").all_text_contents() == ["0", "4"]
    expect()(differs.first).to_contain_text("not run")
    screenshot(page, "compare")

    # a failed run: labelled so, its figures a dash, never a bar of zeros
    from benchmarks.models import BenchmarkRun

    BenchmarkRun.objects.filter(pk=ids[1]).update(status="failed", error="worker lost")
    page.reload()
    label = f"#{ids[1]} msgpack"
    row = page.locator(f'#compare-rows tr[data-run="{ids[1]}"]')
    expect()(row).to_contain_text("(failed)")
    expect()(row.locator("td.num").first).to_have_text("–")
    bars = page.locator('#charts svg[data-metric="exact_match"] rect.bar')
    expect()(bars).to_have_count(2)
    assert bars.nth(1).get_attribute("width") == "0"
    expect()(page.locator('#charts svg[data-metric="exact_match"]')).to_contain_text(label)


def stream_in_background(server, key, model, text, session):
    def run():
        with httpx.stream("POST", server.v1 + "/chat/completions", timeout=60, json={
                "model": model, "stream": True,
                "messages": [{"role": "user", "content": text}]},
                headers={"Authorization": f"Bearer {key}", "X-Session-Id": session}) as r:
            for _ in r.iter_lines():
                pass

    worker = threading.Thread(target=run)
    worker.start()
    return worker


def test_dashboard_follows_an_agent_at_work(page, gaia_server, make_agent, api_key):
    words = " ".join(f"t{i}" for i in range(40))
    make_agent(slug="worker-bee", provider__options={"reply": words, "delay_ms": 50})
    page.goto("/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    light = page.locator('tr[data-agent="worker-bee"] .light')
    expect()(light).to_have_class(re.compile("state-idle"))
    worker = stream_in_background(gaia_server, api_key, "worker-bee", "buzz", "bee")
    expect()(light).to_have_class(re.compile("state-processing"), timeout=10_000)
    active = page.locator("#thread-rows tr", has_text="buzz")
    expect()(active).to_be_visible()  # thread_created, live
    expect()(page.locator('[data-stat="active_threads"]')).to_have_text("1")
    screenshot(page, "dashboard-busy")
    worker.join(30)
    expect()(light).to_have_class(re.compile("state-idle"), timeout=10_000)
    expect()(active).to_have_count(0, timeout=10_000)  # no longer active
    expect()(page.locator('[data-stat="active_threads"]')).to_have_text("0")


def test_feed_goes_offline_then_reconnects_and_resyncs(page, gaia_server, gaia_server_factory,
                                                       echo_agent, api_key, monkeypatch):
    import tests.conftest as root_conftest

    # the session cookie is the host's, whatever the port; with the same secret key the other
    # server accepts it
    secret = (gaia_server.log_path.parent / "secret_key").read_text().strip()
    other = gaia_server_factory(SECRET_KEY=secret)
    first = chat(gaia_server, api_key, "echo", "before the outage", session="outage")
    thread = first.headers["x-gaia-thread-id"]
    page.goto(f"{other.url}/threads/{thread}/")
    status = page.locator("#feed-status")
    expect()(status).to_have_attribute("data-state", "live")
    other.stop()
    expect()(status).to_have_attribute("data-state", "offline", timeout=10_000)
    expect()(status).to_have_text(re.compile("offline"))
    # stored while the page is offline: no event will ever tell it
    chat(gaia_server, api_key, "echo", "during the outage", session="outage", history=[
        {"role": "user", "content": "before the outage"},
        {"role": "assistant", "content": "before the outage"}])
    port = int(other.url.rsplit(":", 1)[1])
    monkeypatch.setattr(root_conftest, "free_port", lambda: port)
    gaia_server_factory(SECRET_KEY=secret)  # the same address again
    expect()(status).to_have_attribute("data-state", "live", timeout=20_000)
    expect()(page.locator("article[data-message-id]")).to_have_count(4, timeout=10_000)
    expect()(page.locator("article.role-assistant[data-message-id] .body").last).to_have_text(
        "during the outage")
    assert page.evaluate("window.gaiaFeed.lastResync") == "reconnect"


def test_a_lost_event_makes_the_page_resync(page, gaia_server, echo_agent, api_key):
    first = chat(gaia_server, api_key, "echo", "one", session="gap")
    dropped: list[str] = []

    def lose_one_user_message(ws):
        server = ws.connect_to_server()

        def lost(event):
            if dropped or event.get("event") != "message":
                return False
            if event["message"]["role"] != "user":
                return False
            dropped.append(event)  # lost on the way: the next event's seq skips one
            return True

        def from_server(message):
            data = json.loads(message)
            if isinstance(data, list):  # ?batch=1: several events in one message
                kept = [e for e in data if not lost(e)]
                if kept:
                    ws.send(json.dumps(kept))
            elif not lost(data):
                ws.send(message)

        server.on_message(from_server)

    page.route_web_socket(re.compile(r"/ws(\?.*)?$"), lose_one_user_message)
    page.goto(f"/threads/{first.headers['x-gaia-thread-id']}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")  # the first one is done
    chat(gaia_server, api_key, "echo", "two", session="gap", history=[
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "one"}])
    expect()(page.locator("article[data-message-id]")).to_have_count(4, timeout=10_000)
    assert len(dropped) == 1
    assert dropped[0]["message"]["payload"]["content"] == "two"
    expect()(page.locator("article.role-user .body").last).to_have_text("two")
    # the reply's message redraws the messages from the server too: the gap's resync may
    # come after the page already shows the lost one
    page.wait_for_function("window.gaiaFeed.lastResync === 'gap'", timeout=10_000)


def test_a_lagged_feed_makes_the_page_resync(page, gaia_server, gaia_server_factory,
                                             echo_agent, api_key):
    # A socket may queue one event: a turn's burst (user message, reply, thread and agent
    # state) overflows it, and the server says "lagged" instead of the events it dropped.
    secret = (gaia_server.log_path.parent / "secret_key").read_text().strip()
    tight = gaia_server_factory(SECRET_KEY=secret, GAIA_FEED_QUEUE_MAX="1")
    first = chat(tight, api_key, "echo", "one", session="lag")
    page.goto(f"{tight.url}/threads/{first.headers['x-gaia-thread-id']}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")
    page.evaluate("""() => { window.__lagged = 0;
                             window.gaiaFeed.on('lagged', () => { window.__lagged += 1; }); }""")
    chat(tight, api_key, "echo", "two", session="lag", history=[
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "one"}])
    expect()(page.locator("article[data-message-id]")).to_have_count(4, timeout=10_000)
    expect()(page.locator("article.role-assistant .body").last).to_have_text("two")
    page.wait_for_function("window.__lagged >= 1", timeout=10_000)
    page.wait_for_function("window.gaiaFeed.lastResync === 'lagged'", timeout=10_000)


def test_feed_commands_are_answered_by_their_id(page, make_agent):
    make_agent(slug="commanded")
    page.goto("/agents/commanded/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    ack = page.evaluate("window.gaiaFeed.command('pause', {agent: 'commanded'})")
    assert ack["event"] == "ack"
    assert ack["id"].startswith("c")
    expect()(page.locator("#agent-light")).to_have_class(re.compile("state-paused"))
    expect()(page.locator("#resume")).to_be_visible()
    refused = page.evaluate("""window.gaiaFeed.command('pause', {agent: 'nobody-here'})
                               .then(() => 'acked', e => e.message)""")
    assert "nobody-here" in refused
    page.evaluate("window.gaiaFeed.command('resume', {agent: 'commanded'})")
    expect()(page.locator("#agent-light")).to_have_class(re.compile("state-idle"))


def test_the_runs_list_filters_and_pages(page, bench_suite):
    from benchmarks.models import BenchmarkRun

    for i in range(57):  # finished runs as the history a team builds up
        BenchmarkRun.objects.create(
            suite=bench_suite, protocol="json" if i % 3 else "msgpack",
            tools={"retriever": "deterministic"}, question_indexes=[0],
            status="failed" if i % 10 == 0 else "succeeded", questions_total=1,
            questions_done=1, summary={"mean_exact_match": 1.0, "mean_f1": 1.0})
    page.goto("/runs/")
    rows = page.locator("#run-rows tr")
    expect()(rows).to_have_count(50)
    expect()(page.locator("#runs-page")).to_have_text("page 1 of 2 (57 runs)")
    expect()(page.locator("#runs-previous")).to_be_hidden()
    page.click("#runs-next")
    expect()(rows).to_have_count(7)
    expect()(page.locator("#runs-page")).to_have_text("page 2 of 2 (57 runs)")
    page.locator("#run-filters select[name=status]").select_option("failed")
    page.click("#run-filters button")
    expect()(rows).to_have_count(6)
    expect()(page.locator("#runs-page")).to_have_text("page 1 of 1 (6 runs)")
    for status in page.locator("#run-rows .run-status").all_text_contents():
        assert status == "failed"
    page.goto("/runs/?suite=no-such-suite")
    expect()(page.locator("#run-list")).to_contain_text("No run matches.")


def test_a_thread_opened_mid_stream_shows_the_reply_from_its_first_word(page, gaia_server,
                                                                        make_agent, api_key):
    words = " ".join(f"word{i}" for i in range(80))
    agent = make_agent(slug="slowpoke", provider__options={"reply": words, "delay_ms": 60})
    seen: dict[str, str] = {}
    done = threading.Event()
    ready = threading.Event()

    def stream():
        with httpx.stream("POST", gaia_server.v1 + "/chat/completions", timeout=60, json={
                "model": agent.slug, "stream": True,
                "messages": [{"role": "user", "content": "tell me"}]},
                headers={"Authorization": f"Bearer {api_key}"}) as r:
            seen["thread"] = r.headers["x-gaia-thread-id"]
            text = ""
            for line in r.iter_lines():
                if '"content"' in line:
                    text += line
                if "word12" in text:
                    ready.set()
        done.set()

    worker = threading.Thread(target=stream)
    worker.start()
    assert ready.wait(30), "the reply did not start"
    page.goto(f"/threads/{seen['thread']}/")  # a dozen words were sent before it subscribed
    growing = page.locator("article.streaming .body")
    expect()(growing).to_contain_text("word30", timeout=15_000)
    assert not done.is_set(), "the reply ended before the page could show it growing"
    shown = growing.text_content()
    assert shown.startswith("word0 word1 word2"), shown[:60]
    whole = shown.split()[:-1]  # the last word may be cut mid-way
    assert whole == [f"word{i}" for i in range(len(whole))]  # each once, in order
    worker.join(60)
    final = page.locator("article.role-assistant[data-message-id]").last
    expect()(final.locator(".body")).to_have_text(words, timeout=15_000)
