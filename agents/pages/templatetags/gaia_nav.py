"""``{% approvals_count %}``: the navigation's badge of waiting approvals, rendered with the
page (``ui/_approvals_count.html``); ``static/gaia/nav.js`` keeps it current from the feed."""

from __future__ import annotations

from django import template

from agents import selectors

register = template.Library()


@register.inclusion_tag("ui/_approvals_count.html")
def approvals_count() -> dict[str, int]:
    return {"approvals_pending": selectors.approval_pending_count()}
