"""Evaluating agents on real conversations, in a real browser (Debian's Chromium through
Playwright) against live Gaia processes whose replay runs really execute (a Celery worker with
Redis, the embedded worker without): a suite made from the thread list, a replay started from
the page and watched to its end, its cases read side by side with their diffs, a second run,
the suite's trend and the compare page; cancel and resume. At 1440 px, as operators use it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pages.conftest import no_raw_times, screenshot
from tests.pages.conversations import support_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDE = {"width": 1440, "height": 900}
NARROW = {"width": 390, "height": 844}
RUN_WAIT = 90_000  # ms: a replay of a few cases with fake providers ends well within this
VERDICT = '{"score": 0.75, "verdict": "same", "reason": "Says what the reference says."}'


def expect() -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect


@pytest.fixture
def stored(make_agent: Any) -> list[Any]:
    return support_threads(make_agent)


@pytest.fixture
def targets(make_agent: Any) -> dict[str, Any]:
    """What a replay compares: ``parrot`` echoes the question (slowly, so a page sees the run
    at work), ``adder`` runs its calculator and answers with its result (right for case 0
    only), ``judge`` always answers the same verdict."""
    return {
        "parrot": make_agent(slug="parrot", provider__name="parrot",
                             provider__options={"ttft_ms": 700}),
        "adder": make_agent(slug="adder", provider__name="adder", tools=["calculator"],
                            provider__options={"script": [
                                {"tool_calls": [{"name": "calculator",
                                                 "arguments": {"expression": "2 + 0"}}]},
                                {"reply": "The answer is {results}."}]}),
        "judge": make_agent(slug="judge", provider__name="judge",
                            provider__options={"reply": VERDICT}),
    }


def api(server: Any, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/api/v1/benchmarks", timeout=15,
                        headers={"Authorization": f"Bearer {key}"})


def deltas(page: Any, agent: str) -> list[float]:
    """The deltas shown for ``agent``'s replies, case after case, as numbers."""
    texts = page.locator(f'#cases .cand[data-agent="{agent}"] .delta').all_text_contents()
    return [float(t.replace("\u2212", "-").replace("\u00b1", "")) for t in texts]


def test_make_a_suite_from_the_thread_list(page: Any, stored: list[Any],
                                           tmp_path: Path) -> None:
    page.set_viewport_size(WIDE)
    page.goto("/threads/?agent=support")
    expect()(page.locator("#thread-rows tr")).to_have_count(4)
    page.click("#make-suite summary")
    expect()(page.locator("#suite-form")).to_contain_text("(4: agent support)")
    page.fill("#suite-name", "support-replies")
    page.click("#suite-submit")
    made = page.locator("#suite-made")
    expect()(made).to_contain_text("support-replies v1: 4 cases")
    screenshot(page, "replay-suite-from-threads")

    # a date window that holds no thread: the API's refusal shows, nothing is made
    page.goto("/threads/?agent=support&since=2999-01-01")
    expect()(page.locator("#thread-rows tr.empty")).to_have_count(1)
    page.click("#make-suite summary")
    page.fill("#suite-name", "nothing")
    page.click("#suite-submit")
    expect()(page.locator("#suite-error")).to_have_text("No thread matches the filter.")
    expect()(made).to_be_hidden()

    # the threads ticked, of two agents, every answered question of each
    page.goto("/threads/")
    expect()(page.locator("#thread-rows tr")).to_have_count(6)
    page.check(f'.thread-pick[value="{stored[3].pk}"]')
    page.check(f'.thread-pick[value="{stored[4].pk}"]')
    expect()(page.locator("#picked-count")).to_have_text("2")
    page.click("#make-suite summary")
    expect()(page.locator("#suite-from-selected")).to_be_checked()
    page.fill("#suite-name", "picked")
    page.select_option("#suite-turns", "all")
    page.click("#suite-submit")
    expect()(made).to_contain_text("picked v1: 3 cases")  # the greeting, its sum, the boats

    page.click("#suite-link")
    cases = page.locator("#suite-cases article.case")
    expect()(cases).to_have_count(3)
    expect()(cases.nth(1).locator("pre.question")).to_have_text("What is 2 plus 3?")
    expect()(cases.nth(1).locator("pre.reference")).to_have_text("The answer is 5.")
    whole = cases.nth(1).locator("details.conversation")
    expect()(whole.locator(".turn")).to_have_count(3)
    expect()(whole.locator(".turn").first).to_be_hidden()
    whole.locator("summary").click()
    expect()(whole.locator(".turn").first).to_contain_text("Hello")

    # the list of suites, then the first one: export it, upload an edited copy as v2
    page.click("header.top nav >> text=Suites")
    rows = page.locator("#suite-list tbody tr")
    # the two made here (the built-in HotpotQA suite is listed too when the server made it)
    expect()(rows.filter(has_text="conversations (replay)")).to_have_count(2)
    page.click("#suite-list >> text=support-replies")
    expect()(page.locator("#suite-count")).to_have_text("4")
    with page.expect_download() as download:
        page.click("#export")
    lines = Path(download.value.path()).read_text().splitlines()
    assert len(lines) == 4
    assert json.loads(lines[0])["ideal"] == "The answer is 2."
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines[:3]) + "\n")
    page.set_input_files("#jsonl-version input[type=file]", str(edited))
    page.click("#jsonl-version button[type=submit]")
    expect()(page.locator("h1 .badge")).to_have_text("v2")
    expect()(page.locator("#suite-count")).to_have_text("3")
    expect()(page.locator("dd.versions a")).to_have_text("v1")
    screenshot(page, "replay-suite")


def test_replay_from_the_page_watched_diffed_trended_and_compared(
        page: Any, run_server: Any, stored: list[Any], targets: dict[str, Any],
        make_key: Any) -> None:
    _, key = make_key("bench", scopes=["benchmarks"])
    with api(run_server, key) as http:
        suite = http.post("/suites", json={"name": "support-replies",
                                           "from_threads": {"agent": "support"}}).json()
    page.set_viewport_size(WIDE)
    page.goto(f"{run_server.url}/runs/suites/{suite['id']}/")
    expect()(page.locator("#trend")).to_contain_text("No finished replay")
    page.click("#replay-suite")
    expect()(page.locator("#run-suite")).to_have_value("support-replies@1")
    expect()(page.locator('.run-kind[data-for="mesh"]')).to_be_hidden()
    page.check('#replay-targets input[value="parrot"]')
    page.check('#replay-targets input[value="adder"]')
    page.fill("input[name=concurrency]", "1")
    screenshot(page, "replay-new")
    page.click("#run-submit")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    first = int(page.url.rstrip("/").rsplit("/", 1)[1])

    # watch it: replies arrive by the feed while it runs, then the bar fills
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    expect()(page.locator("#latest-rows tr[data-agent]").first).to_be_visible(timeout=RUN_WAIT)
    expect()(page.locator("#run-progress")).to_have_attribute("aria-valuenow", "100",
                                                              timeout=RUN_WAIT)
    expect()(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_WAIT)
    expect()(page.locator("#run-done")).to_have_text("8")
    expect()(page.locator("#run-finished time")).to_be_visible()  # "just now", not ISO
    no_raw_times(page)
    expect()(page.locator("#cancel-form")).to_be_hidden()
    expect()(page.locator("#resume-form")).to_be_hidden()
    adder = page.locator('#summary-rows tr[data-agent="adder"]')
    expect()(adder.locator("td").nth(1)).to_have_text("4/4")
    expect()(adder.locator("td").nth(11)).to_have_text("4")  # its calculator, once a case
    expect()(adder.locator('td[data-metric="exact_match"]')).to_have_text("0.25")
    expect()(page.locator("#primary-head")).to_have_text("Primary (similarity)")
    pair = page.locator('#pair-rows tr[data-pair="adder vs parrot"] td')
    assert pair.all_text_contents() == ["adder vs parrot", "4", "0", "0"]

    # read the diff: against the adder, the parrot's largest regression comes first
    cases = page.locator("#cases article.case")
    expect()(cases).to_have_count(4)
    page.select_option("#cases-baseline", "adder")
    expect()(page).to_have_url(re.compile(r"\?baseline=adder$"))
    expect()(page.locator("#cases")).to_have_attribute("data-loaded", re.compile("baseline=adder"))
    shown = deltas(page, "parrot")
    assert len(shown) == 4
    assert all(d < 0 for d in shown)
    assert shown == sorted(shown)
    case0 = page.locator('#cases article.case[data-case="0"]')
    expect()(case0.locator('.cand[data-agent="adder"] pre.diff')).to_have_text("The answer is 2.")
    expect()(case0.locator('.cand[data-agent="adder"] pre.diff del')).to_have_count(0)
    parrot0 = case0.locator('.cand[data-agent="parrot"] pre.diff')
    assert parrot0.locator("del").all_text_contents() == ["The answer", "2."]
    assert parrot0.locator("ins").all_text_contents() == ["What", "2 plus 0?"]
    expect()(case0.locator(".cand.reference pre")).to_have_text("The answer is 2.")
    greeting = page.locator('#cases article.case[data-case="3"]')
    expect()(greeting.locator("pre.question")).to_have_text("What is 2 plus 3?")
    greeting.locator("details.conversation summary").click()
    expect()(greeting.locator(".turn").first).to_contain_text("Hello")
    expect()(case0.locator('.cand[data-agent="adder"] .cost')).to_contain_text("1 tool call")
    screenshot(page, "replay-diff")
    case0.locator('.cand[data-agent="adder"] a.thread-link').click()
    page.wait_for_url(re.compile(r"/threads/[0-9a-f-]+/$"))
    expect()(page.locator("article.role-assistant .body").last).to_have_text("The answer is 2.")
    page.go_back()

    # the parrot is switched to another model that answers better; a second replay (API)
    parrot = targets["parrot"].provider
    parrot.options = {"reply": "The answer is 4."}
    parrot.save()
    with api(run_server, key) as http:
        second = http.post("/runs", json={"suite": suite["id"], "agents": ["parrot", "adder"],
                                          "indexes": [0, 1, 2]}).json()["id"]
    page.goto(f"{run_server.url}/runs/{second}/")
    expect()(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_WAIT)
    expect()(page.locator("#cases article.case")).to_have_count(3, timeout=30_000)
    expect()(page.locator(f'#cases-against option[value="{first}"]')).to_have_count(1)
    page.select_option("#cases-against", str(first))
    expect()(page).to_have_url(re.compile(rf"\?against={first}$"))
    expect()(page.locator("#cases")).to_have_attribute("data-loaded",
                                                       re.compile(f"against={first}"))
    expect()(page.locator("#cases-baseline")).to_be_disabled()
    assert all(d > 0 for d in deltas(page, "parrot"))  # better than itself last time
    assert deltas(page, "adder") == [0.0, 0.0, 0.0]  # the adder did not change
    screenshot(page, "replay-diff-against")

    # the trend of the suite: two points per target, the similarity first (no judge)
    page.goto(f"{run_server.url}/runs/suites/{suite['id']}/")
    trend = page.locator("#trend")
    expect()(trend.locator("tr[data-run]")).to_have_count(2)
    charts = trend.locator("svg.line-chart")
    expect()(charts.first).to_have_attribute("data-metric", "similarity")
    assert charts.evaluate_all("cs => cs.map(c => c.dataset.metric)") == [
        "similarity", "f1", "rouge_l", "exact_match"]
    points = trend.locator('svg[data-metric="similarity"] g[data-series="parrot"] circle')
    expect()(points).to_have_count(2)
    ys = points.evaluate_all("ps => ps.map(p => Number(p.getAttribute('cy')))")
    assert ys[1] < ys[0]  # higher on the chart: the parrot got better
    expect()(page.locator("#suite-runs tbody tr")).to_have_count(2)
    no_raw_times(page)
    screenshot(page, "replay-trend")

    # the runs list says what each run is; the compare page has a column per target
    page.goto(f"{run_server.url}/runs/")
    row = page.locator(f'#run-rows tr[data-run="{first}"]')
    expect()(row.locator(".run-kind")).to_have_text("replay")
    expect()(row.locator(".run-suite")).to_have_text("support-replies v1")
    page.check(f'.run-pick[value="{first}"]')
    page.check(f'.run-pick[value="{second}"]')
    page.click("#compare")
    page.wait_for_url(re.compile(r"/runs/compare/\?runs="))
    expect()(page.locator("#compare-rows tr")).to_have_count(4)
    expect()(page.locator("#compare-warnings")).to_contain_text(
        "The runs asked different questions of the suite.")
    expect()(page.locator(f'#compare-rows tr[data-column="{first}:parrot"]')).to_contain_text(
        "support-replies@1 · replay of adder, parrot · no judge")  # the form's order
    expect()(page.locator('#charts svg[data-metric="similarity"] rect.bar')).to_have_count(4)
    expect()(page.locator('#charts svg[data-metric="bytes"]')).to_have_count(0)
    screenshot(page, "replay-compare")


def test_cancel_and_resume_a_judged_replay_from_its_page(
        page: Any, run_server: Any, stored: list[Any], targets: dict[str, Any],
        make_agent: Any, make_key: Any) -> None:
    make_agent(slug="slowpoke", provider__name="slowpoke",
               provider__options={"reply": "Slowly.", "ttft_ms": 800})
    _, key = make_key("bench", scopes=["benchmarks"])
    with api(run_server, key) as http:
        suite = http.post("/suites", json={"name": "everything", "from_threads": {}}).json()
        run = http.post("/runs", json={"suite": suite["id"], "agents": ["slowpoke"],
                                       "judge": "judge", "concurrency": 1}).json()
    page.set_viewport_size(WIDE)
    page.goto(f"{run_server.url}/runs/{run['id']}/")
    expect()(page.locator("#run-status")).to_have_text("running", timeout=RUN_WAIT)
    expect()(page.locator("#latest-rows tr[data-agent]").first).to_be_visible(timeout=RUN_WAIT)
    page.click("#cancel")
    page.click("#confirm-yes")  # it asks first
    expect()(page.locator("#run-status")).to_have_text("cancelled", timeout=RUN_WAIT)
    expect()(page.locator("#resume")).to_be_visible()
    expect()(page.locator("#cancel-form")).to_be_hidden()
    assert int(page.locator("#run-done").text_content()) < 6
    page.click("#resume")
    expect()(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_WAIT)
    expect()(page.locator("#resume-form")).to_be_hidden()
    expect()(page.locator("#run-progress")).to_have_attribute("aria-valuenow", "100")
    row = page.locator('#summary-rows tr[data-agent="slowpoke"]')
    expect()(row.locator("td").nth(1)).to_have_text("6/6")
    expect()(row.locator('td.primary[data-metric="judge_score"]')).to_have_text("0.75")
    expect()(row.locator(".vs-reference")).to_have_text("0 / 6 / 0")
    expect()(page.locator("#primary-head")).to_have_text("Primary (judge)")
    expect()(page.locator("#cases .judge-reason").first).to_have_text(
        "Judge: Says what the reference says.")
    screenshot(page, "replay-run")
    page.set_viewport_size(NARROW)
    screenshot(page, "replay-run-390")
