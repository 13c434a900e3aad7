"""Helpers every dialect adapter shares: body parsing, validation errors, SSE framing, images."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from agents import llm
from agents.exceptions import InvalidRequest

_DATA_URI = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<b64>;base64)?,(?P<data>.*)$", re.S)
IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request ({exc}).", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return data


def validate(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """``model`` from ``data`` or :class:`InvalidRequest` naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ""
        for part in err["loc"]:
            if isinstance(part, int):
                param += f"[{part}]"
            elif part not in ("function-after", "list", "str", "dict", "union", "tagged-union"):
                param += ("." if param else "") + str(part)
        raise InvalidRequest(f"Invalid value for '{param}': {err['msg']}.", param=param or None,
                             code="invalid_value") from None


def image_from_url(url: str, *, param: str) -> llm.ImagePart:
    """An image part from an ``https://`` URL or a ``data:`` URI (validated base64)."""
    if url.startswith("data:"):
        match = _DATA_URI.match(url)
        if not match or not match.group("b64"):
            raise InvalidRequest("Image data URIs must be base64 encoded.", param=param,
                                 code="invalid_image")
        media_type = (match.group("type") or "image/png").lower()
        if media_type not in IMAGE_TYPES:
            raise InvalidRequest(f"Unsupported image type {media_type!r}.", param=param,
                                 code="invalid_image")
        data = match.group("data")
        try:
            base64.b64decode(data[:4096 - 4096 % 4] or "", validate=True)
        except binascii.Error:
            raise InvalidRequest("The image data is not valid base64.", param=param,
                                 code="invalid_image") from None
        return llm.ImagePart(data=data, media_type=media_type)
    if url.startswith(("http://", "https://")):
        return llm.ImagePart(url=url)
    raise InvalidRequest("Image URLs must be http(s) URLs or data URIs.", param=param,
                         code="invalid_image")


def sse_data(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + (
        b"\n\n"
    )


def sse_event(name: str, payload: Any) -> bytes:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {body}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"
SSE_KEEPALIVE = b": keepalive\n\n"
