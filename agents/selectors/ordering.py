"""Sorting a list by a column the client picks (``?sort=name`` ascending, ``?sort=-name``
descending), one rule for every list: the API's ``sort`` parameter and the console's column
headers both come here.

A list names the columns it may be sorted by (public names, as its API spells the field,
mapped to a model field that is never NULL) and its default order. A picked column is
followed by the id in the same direction, so rows that tie keep one order: offset pages do
not shift, and the keyset cursor (:class:`agents.http.rest.Pagination`) reads the sort from the
queryset's order and carries it, so a ``next`` link stays on the same sort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from agents.kernel.exceptions import InvalidRequest


@dataclass(frozen=True)
class Ordering:
    columns: dict[str, str]  # public name -> model field (never NULL)
    default: str  # the public sort the list has when none is asked for, e.g. "-created_at"
    default_order: tuple[str, ...] = ()  # its order_by terms, if not just column and id
    python: dict[str, Callable[[Any], Any]] = field(default_factory=dict)

    @property
    def choices(self) -> list[str]:
        return [c for name in self.columns for c in (name, f"-{name}")]

    def check(self, sort: str | None) -> str:
        """``sort`` (or the default) checked: :class:`InvalidRequest` naming ``sort``."""
        if not sort:
            return self.default
        if sort.removeprefix("-") not in self.columns:
            raise InvalidRequest(
                f"sort must be one of {', '.join(self.choices)} (a leading - for "
                "descending).", param="sort", code="invalid_sort")
        return sort

    def order_by(self, sort: str | None) -> list[str]:
        sort = self.check(sort)
        if sort == self.default and self.default_order:
            return list(self.default_order)
        descending = sort.startswith("-")
        column = self.columns[sort.removeprefix("-")]
        sign = "-" if descending else ""
        return [f"{sign}{column}"] + ([] if column == "pk" else [f"{sign}pk"])

    def apply(self, rows: QuerySet[Any], sort: str | None) -> QuerySet[Any]:
        return rows.order_by(*self.order_by(sort))

    def sort_dicts(self, rows: list[dict[str, Any]], sort: str | None) -> list[dict[str, Any]]:
        """Rows already read (a list that is no queryset), sorted by a column of theirs;
        ``None`` values last whichever the direction."""
        sort = self.check(sort)
        name = sort.removeprefix("-")
        column = self.columns[name]
        value = self.python.get(name, lambda r: r.get(column))
        present = [r for r in rows if value(r) is not None]
        absent = [r for r in rows if value(r) is None]
        return sorted(present, key=value, reverse=sort.startswith("-")) + absent
