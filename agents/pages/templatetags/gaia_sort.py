"""``{% sort_th "name" "Name" %}``: a column header that sorts its list. A link to the same
page with ``sort`` set (the other direction when the list is already sorted by it; the page
number dropped), and ``aria-sort`` saying how the list is sorted now. The page puts its
:class:`agents.selectors.ordering.Ordering` in the context as ``ordering``; without one (the same
table on another page) the header is plain."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html

register = template.Library()


@register.simple_tag(takes_context=True)
def sort_th(context: Any, column: str, label: str, css: str = "") -> str:
    request, ordering = context.get("request"), context.get("ordering")
    if request is None or ordering is None or column not in ordering.columns:
        # the same table where its list is not sortable (the dashboard's, a key's trail)
        return format_html('<th scope="col"{}>{}</th>',
                           format_html(' class="{}"', css) if css else "", label)
    current = request.GET.get("sort") or ordering.default
    if current.removeprefix("-") not in ordering.columns:
        current = ordering.default
    if current == column:
        state, target, arrow = "ascending", f"-{column}", "▲"
    elif current == f"-{column}":
        state, target, arrow = "descending", column, "▼"
    else:
        state, target, arrow = "none", column, ""
    query = request.GET.copy()
    query.pop("page", None)
    query["sort"] = target
    return format_html(
        '<th scope="col" aria-sort="{}" data-sort="{}"{}><a href="?{}">{}<span class="sort-arrow" '
        'aria-hidden="true">{}</span></a></th>', state, column,
        format_html(' class="{}"', css) if css else "", query.urlencode(), label, arrow)
