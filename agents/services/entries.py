"""The rule every entry of a config document (``gaia agents import``, ``./run``'s defaults)
follows, whatever it describes: a mapping that names its row, with no field the import does
not know. :mod:`agents.services.config` (providers, knowledge bases, agents, teams) and
:mod:`agents.services.tools` (MCP servers) check each entry with it, so a mistake reads the
same in every section."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents.kernel.exceptions import InvalidRequest


def entry_name(entry: Any, where: str, *, key: str = "slug") -> str:
    """The value of ``entry[key]`` (its slug or name). Raises :class:`InvalidRequest`
    ``"<where> needs a <key>."`` (``where``: ``agents[3]``) unless ``entry`` is a mapping
    whose ``key`` is set."""
    if not isinstance(entry, dict) or not entry.get(key):
        raise InvalidRequest(f"{where} needs a {key}.")
    return entry[key]


def entry_fields_known(entry: dict[str, Any], what: str, known: Iterable[str]) -> None:
    """Raises :class:`InvalidRequest` ``"<what>: unknown fields [...]"`` (``what``:
    ``agents[3] (support)``) for fields of ``entry`` outside ``known``, sorted."""
    unknown = set(entry) - set(known)
    if unknown:
        raise InvalidRequest(f"{what}: unknown fields {sorted(unknown)}.")
