"""The DRF parser of the operator and benchmarks APIs (``REST_FRAMEWORK``'s
``DEFAULT_PARSER_CLASSES``; apart from :mod:`agents.http.rest`, which DRF's settings cannot import
while DRF itself loads)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from agents.http.jsonbody import json_parse
from agents.kernel.exceptions import InvalidRequest


class JsonParser(JSONParser):
    """DRF's JSON parser with the rule every JSON input of Gaia follows
    (:func:`agents.http.jsonbody.json_parse`): a body nested too deeply, holding a NUL or a lone
    surrogate (escaped or as CESU-8 bytes) is a 400 before any view reads it, not a 500 from
    the database, the encoder or the error page's own rendering."""

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        try:
            return json_parse(stream.read() if stream is not None else b"")
        except InvalidRequest as exc:
            if exc.code == "invalid_json":  # what these APIs always called it
                raise ParseError(exc.message) from None
            raise
