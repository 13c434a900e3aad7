"""A turn's trace on the operator pages: ``/threads/<id>/turns/<n>/`` draws the tree of
:func:`agents.selectors.turn_trace` (the same as ``GET /api/v1/threads/{id}/turns/{n}``), each
node with a bar on the turn's time axis (SVG, drawn by the server). With ``?partial=1`` it is
only the tree, which the thread page's "Trace" toggle swaps in (``static/gaia/thread.js``):
one markup for both."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from agents import selectors
from agents.http.pages import staff_required
from agents.kernel.exceptions import NotFound

BAR_WIDTH = 1000  # the SVG's own units across the turn's time axis


def _at(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _bars(node: dict[str, Any], t0: datetime, total_ms: float) -> None:
    """Place ``node`` and its children on the axis from ``t0`` lasting ``total_ms``: ``bar``
    (x and width in :data:`BAR_WIDTH` units), or ``None`` where a time is not stored."""
    start, end = _at(node.get("started_at")), _at(node.get("ended_at"))
    if start is not None and end is not None:
        x = (start - t0).total_seconds() * 1000 / total_ms * BAR_WIDTH
        w = (end - start).total_seconds() * 1000 / total_ms * BAR_WIDTH
        x = min(max(x, 0.0), BAR_WIDTH - 2.0)
        node["bar"] = {"x": round(x, 1), "w": round(max(min(w, BAR_WIDTH - x), 2.0), 1)}
    else:
        node["bar"] = None
    for child in node.get("children") or ():
        _bars(child, t0, total_ms)


def trace_context(thread_id: str, n: str) -> dict[str, Any]:
    try:
        thread = selectors.thread_get(thread_id=thread_id)
        if not n.isdecimal() or len(n) > 9:
            raise NotFound(f"No turn {n!r}.", code="turn_not_found")
        trace = selectors.turn_trace(thread=thread, index=int(n))
    except NotFound as exc:
        raise Http404(exc.message) from exc
    t0 = _at(trace["started_at"])
    if t0 is not None:
        _bars(trace, t0, float(max(trace["duration_ms"] or 0, 1)))
    return {"page": "thread", "thread": selectors.thread_public_row(thread), "trace": trace,
            "parent": selectors.thread_parent(thread=thread), "bar_width": BAR_WIDTH}


@staff_required
def turn_trace(request: HttpRequest, thread_id: str, n: str) -> HttpResponse:
    context = trace_context(thread_id, n)
    if request.GET.get("partial"):
        return render(request, "ui/_trace.html", context)
    return render(request, "ui/trace.html", context)
