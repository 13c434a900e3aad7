"""What every JSON input of Gaia must be before anything reads it further (``/v1`` bodies, the
operator and benchmarks APIs, the feed's commands): one rule, here.

A JSON text is refused with :class:`InvalidRequest` (a 400 in each channel's error body) for
bad syntax (``NaN`` and ``Infinity`` too), nesting too deep to parse (or deeper than
``max_depth``), an integer too long to convert, and text that no database column can hold: a
NUL (PostgreSQL refuses it) or a lone UTF-16 surrogate, whether written as a ``\\u`` escape
or as CESU-8 bytes (``ED A0 80``: ``json.loads`` decodes bytes with ``surrogatepass``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.kernel.exceptions import InvalidRequest

# Deeper is no operator's or benchmark's input; a value this deep is still re-serialised
# safely (Python's json recursion has ~1,000 frames of headroom).
MAX_JSON_DEPTH = 100

# JSON escapes and bytes for what no database text column can hold. Searched for in the raw
# body, which is cheap; only a body that contains one is walked to find where it is.
_UNSTORABLE_RAW = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])|\xed[\xa0-\xbf]")
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")


def _not_json(name: str) -> Any:
    """``NaN`` and ``Infinity`` are Python's extensions, not JSON (RFC 8259 section 6)."""
    raise json.JSONDecodeError(f"{name} is not a JSON value", name, 0)


def printable(text: str) -> str:
    """``text`` with NULs and lone surrogates written as escapes: safe to put in an error
    message (a lone surrogate cannot be encoded into a response)."""
    if not _UNSTORABLE_CHAR.search(text):
        return text
    return _UNSTORABLE_CHAR.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def unstorable_where(value: Any, where: str = "") -> str | None:
    """Where in ``value`` a string (or a key) holds a NUL or a lone surrogate (``None``:
    nowhere). Iterative: any depth."""
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE_CHAR.search(item):
                return at
        elif isinstance(item, dict):
            for k, v in item.items():
                path = f"{at}.{k}" if at else str(k)
                if _UNSTORABLE_CHAR.search(k):
                    return path
                stack.append((v, path))
        elif isinstance(item, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
    return None


def too_deep(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``max_depth`` deep. Iterative."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return False


def json_parse(body: bytes | str, *, max_depth: int | None = MAX_JSON_DEPTH,
               what: str = "the JSON body of your request") -> Any:
    """The JSON value in ``body``, or :class:`InvalidRequest`: ``invalid_json`` for what is not
    JSON (or nests deeper than ``max_depth``; ``None``: as deep as the parser can go),
    ``invalid_value`` (naming where) for text holding a NUL or a lone surrogate."""
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    try:
        data = json.loads(raw, parse_constant=_not_json)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"We could not parse {what} ({exc}).",
                             code="invalid_json") from None
    except RecursionError:
        raise InvalidRequest(f"{what[0].upper()}{what[1:]} is nested too deeply.",
                             code="invalid_json") from None
    except ValueError as exc:  # an integer over Python's digit limit
        raise InvalidRequest(f"We could not parse {what} ({exc}).",
                             code="invalid_json") from None
    if max_depth is not None and isinstance(data, dict | list) and too_deep(data, max_depth):
        raise InvalidRequest(f"{what[0].upper()}{what[1:]} is nested more than {max_depth} "
                             "levels deep.", code="invalid_json")
    if _UNSTORABLE_RAW.search(raw):
        where = unstorable_where(data)
        if where is not None:
            raise InvalidRequest(
                f"Invalid value for '{printable(where) or 'body'}': text may not contain NUL "
                "characters or unpaired UTF-16 surrogates.", param=printable(where) or None,
                code="invalid_value")
    return data


def json_text_check(text: str, *, param: str) -> None:
    """A JSON text carried inside a value (a tool call's ``arguments``): if it is JSON, it
    must parse (not too deep) and hold no NUL or lone surrogate; text that is not JSON at all
    is left as it is (a model or client may send free text)."""
    if not text or not isinstance(text, str):
        return
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidRequest(f"'{param}' is JSON nested too deeply.", param=param,
                             code="invalid_value") from None
    except ValueError:
        return
    if isinstance(value, dict | list) and too_deep(value, MAX_JSON_DEPTH):
        raise InvalidRequest(f"'{param}' is JSON nested more than {MAX_JSON_DEPTH} levels "
                             "deep.", param=param, code="invalid_value")
    if unstorable_where(value) is not None:
        raise InvalidRequest(f"'{param}' may not contain NUL characters or unpaired UTF-16 "
                             "surrogates.", param=param, code="invalid_value")
