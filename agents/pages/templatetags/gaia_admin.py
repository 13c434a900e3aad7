"""The admin's changelist rows, the same markup as Django's ``{% result_list %}``, rendered in
a few string operations a row.

Django renders each cell through ``items_for_result``: the field looked up by name, its
display chosen, ``format_html`` and a link reversed for every row; then the template engine
renders every cell again. At 50 rows of the thread list that was about 0.3 ms a row, half
the page's time at a million messages (issue 27: 31.7 ms with all columns, 16.0 with one
row). Here what does not change from row to row (each column's kind, classes and empty
display, the change link's form) is worked out once per page, and a row is one string.

Columns of kinds this does not render (an admin method other than the row checkbox, a
property, an editable list) leave the whole list to Django's own tag. Tested against it:
``tests/agents/test_admin_rows.py`` compares the markup cell by cell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import template
from django.contrib.admin.templatetags.admin_list import (
    ResultList,
    _boolean_icon,
    result_headers,
    result_hidden_fields,
    result_list,
)
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.templatetags.base import InclusionAdminNode
from django.contrib.admin.utils import display_for_field, quote
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.urls import NoReverseMatch
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

register = template.Library()

PK_MARK = "gaia-pk-mark"  # stands for a row's key in its change link, once per page


def _cell(cl: Any, index: int, name: str) -> Callable[[Any], str] | None:
    """A function of a row giving this column's cell (``<td>...</td>``), or ``None`` when
    the column is of a kind only Django's own rendering knows."""
    admin = cl.model_admin
    empty = admin.get_empty_value_display()
    if name == "action_checkbox":
        render = admin.action_checkbox
        return lambda row: f'<td class="action-checkbox">{render(row)}</td>'
    try:
        field = cl.lookup_opts.get_field(name)
    except FieldDoesNotExist:
        return None
    if field.auto_created or field.many_to_many or field.one_to_many:
        return None
    classes = [f"field-{name}"]
    if isinstance(field, models.DateField | models.TimeField | models.ForeignKey):
        classes.append("nowrap")
    head = f'<td class="{" ".join(classes)}">'
    if isinstance(field, models.ForeignKey):
        def related(row: Any) -> str:
            value = getattr(row, name)
            return head + conditional_escape(empty if value is None else value) + "</td>"
        return related
    if isinstance(field, models.BooleanField) and not getattr(field, "flatchoices", None):
        icons = {value: _boolean_icon(value) for value in (True, False, None)}
        return lambda row: head + icons[getattr(row, field.attname)] + "</td>"
    attname = field.attname

    def value(row: Any) -> str:
        shown = getattr(row, attname)
        if isinstance(shown, str) and not shown.strip():
            shown = ""
        return head + conditional_escape(display_for_field(shown, field, empty)) + "</td>"
    return value


def _rows(cl: Any) -> list[ResultList] | None:
    """The page's rows as Django's ``results(cl)`` gives them (one string a row), or
    ``None`` when a column is not one :func:`_cell` renders or the list is editable."""
    if getattr(cl, "formset", None) or cl.list_display_links is None or cl.is_popup or cl.to_field:
        return None
    names = list(cl.list_display)
    links = set(cl.list_display_links or ())
    cells = [_cell(cl, i, name) for i, name in enumerate(names)]
    if None in cells:
        return None
    # The first column that is not the checkbox links to the row (Django's default), unless
    # ``list_display_links`` names the columns.
    link_at = ({i for i, name in enumerate(names) if name in links} if links else
               {next(i for i, name in enumerate(names) if name != "action_checkbox")})
    try:
        url = add_preserved_filters(
            {"preserved_filters": cl.preserved_filters, "opts": cl.opts},
            cl.url_for_result(_Marked(cl.lookup_opts.pk.attname)))
    except NoReverseMatch:
        return None
    out = []
    for row in cl.result_list:
        html = []
        first = True
        for i, cell in enumerate(cells):
            td = cell(row)
            if i in link_at:
                tag = "th" if first else "td"
                first = False
                head, _, rest = td.partition(">")
                inner = rest[:-len("</td>")]
                href = conditional_escape(url.replace(PK_MARK, str(quote(row.pk))))
                td = f'<{tag}{head[3:]}><a href="{href}">{inner}</a></{tag}>'
            html.append(td)
        out.append(ResultList(None, [mark_safe("".join(html))]))  # noqa: S308 - escaped above
    return out


class _Marked:
    """A row whose key is :data:`PK_MARK`: the change link's form, reversed once a page."""

    def __init__(self, attname: str) -> None:
        setattr(self, attname, PK_MARK)


def fast_result_list(cl: Any) -> dict[str, Any]:
    rows = _rows(cl)
    if rows is None:
        return result_list(cl)
    headers = list(result_headers(cl))
    return {
        "cl": cl,
        "result_hidden_fields": list(result_hidden_fields(cl)),
        "result_headers": headers,
        "num_sorted_fields": sum(1 for h in headers if h["sortable"] and h["sorted"]),
        "results": rows,
    }


@register.tag(name="fast_result_list")
def fast_result_list_tag(parser: Any, token: Any) -> InclusionAdminNode:
    return InclusionAdminNode(parser, token, func=fast_result_list,
                              template_name="change_list_results.html", takes_context=False)
