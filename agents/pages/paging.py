"""The console's paged tables: the page of rows a request asks for, and its pager's query."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from agents.http.paging import SeekPaginator

PER_PAGE = 50


def page_of(request: HttpRequest, rows: Any, *, per_page: int = PER_PAGE,
            count: int | None = None) -> tuple[Any, str]:
    """The page of ``rows`` that ``?page=`` asks for (``count``: how many rows there are, when
    known without counting them), and the request's query without ``page`` for the pager's
    links (``ui/_pager.html``)."""
    page = SeekPaginator(rows, per_page, count=count).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return page, query.urlencode()
