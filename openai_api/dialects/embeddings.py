"""OpenAI's Embeddings API (``POST /v1/embeddings``): request parsing and the reply.
https://platform.openai.com/docs/api-reference/embeddings

``input`` is a string or a list of strings (token-id inputs are refused with a 400: send
text); ``encoding_format`` ``float`` or ``base64`` (little-endian float32, what the official
SDKs ask for by default); ``dimensions`` when the model can shorten its vectors. The bounds
(how many inputs, how long each) are the core's (:func:`agents.turns.embeddings_create`).
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any

from agents import turns
from agents.kernel.exceptions import InvalidRequest


@dataclass
class EmbeddingRequest:
    inputs: list[str]
    encoding_format: str
    dimensions: int | None


def parse_request(data: dict[str, Any]) -> EmbeddingRequest:
    value = data.get("input")
    if isinstance(value, str):
        inputs = [value]
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        inputs = list(value)
    elif isinstance(value, list) and value and all(
            isinstance(x, int | list) and not isinstance(x, bool) for x in value):
        raise InvalidRequest("Token-id inputs are not supported: send the input as text.",
                             param="input", code="unsupported_value")
    elif value is None:
        raise InvalidRequest("'input' is required.", param="input")
    else:
        raise InvalidRequest("'input' must be a string or a list of strings.", param="input")
    fmt = data.get("encoding_format", "float")
    if fmt is None:
        fmt = "float"
    if fmt not in ("float", "base64"):
        raise InvalidRequest("'encoding_format' must be 'float' or 'base64'.",
                             param="encoding_format")
    dimensions = data.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or isinstance(
            dimensions, bool) or dimensions < 1):
        raise InvalidRequest("'dimensions' must be a positive integer.", param="dimensions")
    return EmbeddingRequest(inputs, fmt, dimensions)


def _encoded(vector: list[float], fmt: str) -> Any:
    if fmt == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


def render(request: EmbeddingRequest, embedded: turns.Embedded, *, model: str
           ) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i,
                  "embedding": _encoded(v, request.encoding_format)}
                 for i, v in enumerate(embedded.vectors)],
        "model": model,
        "usage": {"prompt_tokens": embedded.input_tokens,
                  "total_tokens": embedded.input_tokens},
    }
