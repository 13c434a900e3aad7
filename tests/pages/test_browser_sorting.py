"""Sorting a console list by clicking its column header, in Chromium: the rows change order,
``aria-sort`` says which way, and the sort is in the address (a reload keeps it). A list the
server draws (keys) and one the page draws from the API (runs)."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def expect() -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect


def column(page: Any, rows: str, index: int) -> list[str]:
    cells = page.locator(f"{rows} > tr > td:nth-child({index})")
    return [t.strip() for t in cells.all_inner_texts()]


def test_a_header_click_sorts_the_keys_and_a_reload_keeps_it(page: Any, make_key: Any) -> None:
    for name in ("mango", "apple", "kiwi", "banana"):
        make_key(name, scopes=["chat"])
    page.goto("/keys/")
    newest_first = ["banana", "kiwi", "apple", "mango"]
    expect()(page.locator("#key-rows > tr")).to_have_count(4)
    assert column(page, "#key-rows", 1) == newest_first
    header = page.locator('th[data-sort="name"]')
    expect()(header).to_have_attribute("aria-sort", "none")
    expect()(page.locator('th[data-sort="created_at"]')).to_have_attribute("aria-sort",
                                                                           "descending")
    header.locator("a").click()
    page.wait_for_url(re.compile(r"[?&]sort=name\b"))
    expect()(header).to_have_attribute("aria-sort", "ascending")
    assert column(page, "#key-rows", 1) == sorted(newest_first)
    header.locator("a").click()
    page.wait_for_url(re.compile(r"[?&]sort=-name\b"))
    expect()(header).to_have_attribute("aria-sort", "descending")
    assert column(page, "#key-rows", 1) == sorted(newest_first, reverse=True)
    page.reload()
    expect()(page.locator('th[data-sort="name"]')).to_have_attribute("aria-sort", "descending")
    assert column(page, "#key-rows", 1) == sorted(newest_first, reverse=True)
    # A filter keeps the sort.
    page.locator("form.filters input[name=q]").fill("an")
    page.locator("form.filters button[type=submit]").click()
    page.wait_for_url(re.compile(r"q=an"))
    assert "sort=-name" in page.url
    assert column(page, "#key-rows", 1) == ["mango", "banana"]


def test_a_header_click_sorts_the_runs_the_page_reads_from_the_api(page: Any,
                                                                   bench_suite: Any) -> None:
    from benchmarks.models import BenchmarkRun

    runs = [BenchmarkRun.objects.create(
        suite=bench_suite, protocol=protocol, tools={"retriever": "deterministic"},
        question_indexes=[0], status=status, questions_total=1, questions_done=1)
        for protocol, status in (("json", "succeeded"), ("msgpack", "failed"),
                                 ("json", "cancelled"))]
    page.goto("/runs/")
    rows = page.locator("#run-rows > tr")
    expect()(rows).to_have_count(3)

    def ids() -> list[str]:
        return [r.get_attribute("data-run") for r in rows.all()]

    assert ids() == [str(r.pk) for r in runs[::-1]]  # newest first
    page.locator('th[data-sort="status"] a').click()
    page.wait_for_url(re.compile(r"sort=status"))
    expect()(page.locator('th[data-sort="status"]')).to_have_attribute("aria-sort", "ascending")
    expect()(rows).to_have_count(3)
    by_status = [str(r.pk) for r in sorted(runs, key=lambda r: r.status)]
    expect()(rows.first).to_have_attribute("data-run", by_status[0])
    assert ids() == by_status
    page.locator('th[data-sort="status"] a').click()
    page.wait_for_url(re.compile(r"sort=-status"))
    expect()(rows.first).to_have_attribute("data-run", by_status[-1])
    assert ids() == by_status[::-1]
