"""Pages of long lists: sort keys, keyset conditions, and deep offsets read narrow.

An ``OFFSET`` makes the database produce every row it skips. A page's query carries its
joins (a thread's agent and key) and every column, so page 2,000 of the thread list built
99,950 joined rows to throw them away (62 ms on PostgreSQL at 100,000 threads, issue 27).
:func:`seek_slice` first reads only the ids of the page, through the list's index, then the
page's rows by id: the same rows in the same order.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import Q, QuerySet

# Below this offset the page is read directly (one query beats two).
SEEK_FROM = 500


def order_keys(queryset: Any) -> list[tuple[str, bool]] | None:
    """The list's sort keys, (field name, descending), or ``None`` where it has none a cursor
    can use (not a queryset, an expression, a related field): it then pages by offset."""
    if not isinstance(queryset, QuerySet):
        return None
    keys = []
    for term in queryset.query.order_by or queryset.model._meta.ordering:
        if not isinstance(term, str) or "__" in term or term.lstrip("-") == "?":
            return None
        name = term.lstrip("-")
        try:
            field = sort_field_of(queryset.model, name)
        except Exception:  # an annotation or an unknown name
            return None
        if field.is_relation:
            return None
        keys.append((name, term.startswith("-")))
    # The last key must tell every row apart, or rows that tie with a page's last one would
    # be skipped (a thread's messages by ``seq``: offsets are stable there, rows only append).
    if not keys or not (keys[-1][0] == "pk" or sort_field_of(queryset.model, keys[-1][0]).unique):
        return None
    return keys


def sort_field_of(model: Any, name: str) -> Any:
    return model._meta.pk if name == "pk" else model._meta.get_field(name)


def rows_after(keys: list[tuple[str, bool]], values: list[Any]) -> Q:
    """The rows after ``values`` in the order of ``keys``: (a > x) or (a = x and b > y)..."""
    q = Q()
    for i, (name, descending) in enumerate(keys):
        before = {keys[j][0]: values[j] for j in range(i)}
        q |= Q(**before, **{f"{name}__{'lt' if descending else 'gt'}": values[i]})
    return q


def seek_slice(rows: Any, start: int, stop: int, count: int | None = None) -> list[Any]:
    """``list(rows[start:stop])``, with a deep ``start`` read narrow: the page's primary keys
    first (no joins, no wide columns), then its rows by key, in the list's order.

    Given the list's ``count``, a page past the middle is read from the other end (the list
    in reverse, skipping ``count - stop`` rows), where the list's order tells every row apart
    (:func:`order_keys`): the last of 100,000 threads' pages then skips no rows instead of
    99,950 (on PostgreSQL the page list's last page took 35-40 ms against 23-26 for its
    first, issue 27)."""
    if not isinstance(rows, QuerySet) or start < SEEK_FROM or stop <= start:
        return list(rows[start:stop])
    if count is not None and start > count // 2 and order_keys(rows) is not None:
        skip = max(0, count - stop)
        pks = list(rows.reverse().values_list("pk", flat=True)[skip:count - start])
        pks.reverse()
    else:
        pks = list(rows.values_list("pk", flat=True)[start:stop])
    if not pks:
        return []
    by_pk = {row.pk: row for row in rows.order_by().filter(pk__in=pks)}
    return [by_pk[pk] for pk in pks if pk in by_pk]


class SeekPaginator(Paginator):
    """Django's paginator, reading a deep page through :func:`seek_slice`; given ``count``
    (the list's size, where it is known without counting), it does not count."""

    def __init__(self, *args: Any, count: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if count is not None:
            self.__dict__["count"] = count  # Paginator.count is a cached_property

    def page(self, number: Any) -> Any:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        return self._get_page(seek_slice(self.object_list, bottom, top, self.count),
                              number, self)
