"""URLs that Gaia compares with a list an operator wrote (``GAIA_MCP_ALLOWED_URLS``, the
operator origins, an MCP server's configured URL): parsed, never compared as text.

One parser (:func:`url_parsed`) and one decision (:func:`url_matches`). The parser refuses
whatever two URL parsers could read differently (WHATWG and RFC 3986 disagree on backslashes,
userinfo, percent-encoded hosts, numeric host spellings; urllib and httpx on others), so what
is compared is what an HTTP client would reach:

* http(s) only, written ``scheme://host[:port]``;
* no userinfo (``user@``, ``a:b@``), no backslash, no whitespace or control character, no
  character outside ASCII (an internationalised host is written in its ``xn--`` form), no
  fragment, no ``%`` in the host, nothing over 2,048 characters;
* the host in lower case: a name of letters, digits, ``-``, ``_`` and dots; a dotted-quad
  IPv4 address (``127.1``, ``0x7f.0.0.1`` or ``2130706433`` are refused, not guessed); an
  IPv6 literal in brackets, compared in its compressed form;
* the port spelled out (80 for http, 443 for https);
* the path normalised as RFC 3986 section 6.2.2 says (escapes of unreserved characters
  decoded, the others in upper case), and refused when it holds a dot segment (``..``,
  ``%2e%2e``, ``..;``) or an encoded ``/``, ``\\``, ``%`` or control character.

A rule (:func:`url_rule_parsed`) is such a URL without a query, optionally ending in ``*``:
without it the URL must be the same (scheme, host, port, path; no query); with it the path
is a prefix ending on a segment boundary (``http://h:1/mcp*`` and ``http://h:1/mcp/*`` take
``/mcp``, ``/mcp/`` and ``/mcp/x?y``, not ``/mcpx``), and ``http://h:1*`` takes every path of
that one server. A ``*`` anywhere else is refused.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_URL_LENGTH = 2048

_SCHEME = re.compile(r"^(https?)://", re.IGNORECASE)
_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_ESCAPE = re.compile(r"%(..)?", re.DOTALL)
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Escapes a server could decode into something that changes which resource is named.
_FORBIDDEN_ESCAPES = frozenset({"2F", "5C", "25", "7F", *(f"{i:02X}" for i in range(0x20))})


class UrlRefused(ValueError):
    """A URL (or rule) Gaia will not compare or call; the message says why."""


@dataclass(frozen=True)
class Url:
    """A parsed, normalised http(s) URL (:func:`url_parsed`)."""

    scheme: str
    host: str  # lower case; an IPv6 literal in brackets, compressed
    port: int
    path: str  # at least "/"
    query: str = ""  # without the "?"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def text(self) -> str:
        """The URL as Gaia calls it, rebuilt from what was compared (so that is what is
        reached); a default port is left out, as HTTP clients send it in ``Host``."""
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        return (f"{self.scheme}://{self.host}{port}{self.path}"
                + (f"?{self.query}" if self.query else ""))


@dataclass(frozen=True)
class UrlRule:
    """A parsed allow-list entry (:func:`url_rule_parsed`)."""

    scheme: str
    host: str
    port: int
    path: str
    prefix: bool


def url_parsed(text: str) -> Url:
    """``text`` parsed and normalised, or :class:`UrlRefused` saying why it is not a URL
    Gaia compares or calls (the module's docstring lists the rules)."""
    if not isinstance(text, str) or not text:
        raise UrlRefused("the URL is empty")
    if len(text) > MAX_URL_LENGTH:
        raise UrlRefused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if not text.isascii():
        raise UrlRefused("the URL holds a character outside ASCII (write a host in its "
                         "xn-- form and percent-encode the path)")
    if any(c <= " " or c == "\x7f" for c in text):
        raise UrlRefused("the URL holds whitespace or a control character")
    if "\\" in text:
        raise UrlRefused("the URL holds a backslash")
    if "#" in text:
        raise UrlRefused("the URL holds a fragment ('#')")
    scheme = _SCHEME.match(text)
    if scheme is None:
        raise UrlRefused("the URL is not http:// or https://")
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise UrlRefused(f"the URL cannot be parsed ({exc})") from None
    netloc = parts.netloc
    if "@" in netloc:
        raise UrlRefused("the URL holds userinfo ('user@' before the host)")
    if "%" in netloc:
        raise UrlRefused("the URL's host holds a percent-encoded character")
    host, port = _host_port(netloc, scheme.group(1).lower())
    return Url(scheme=scheme.group(1).lower(), host=host, port=port,
               path=_path(parts.path), query=_escapes(parts.query, where="query", strict=False))


def url_rule_parsed(rule: str) -> UrlRule:
    """An allow-list entry parsed, or :class:`UrlRefused` saying why it is not one."""
    if not isinstance(rule, str):
        raise UrlRefused("a rule is a URL")
    prefix = rule.endswith("*")
    base = rule[:-1] if prefix else rule
    if "*" in base:
        raise UrlRefused("a rule may end in '*', and hold no other '*'")
    if "?" in base:
        raise UrlRefused("a rule holds no query ('?')")
    url = url_parsed(base)
    return UrlRule(scheme=url.scheme, host=url.host, port=url.port, path=url.path,
                   prefix=prefix)


def url_matches(url: str | Url, rule: str | UrlRule) -> bool:
    """Whether ``url`` is one ``rule`` allows: the same scheme, host and port, and the same
    path (no query), or with a ``*`` rule a path under the rule's, on a segment boundary.
    A URL or rule that :func:`url_parsed` refuses matches nothing."""
    try:
        parsed = url if isinstance(url, Url) else url_parsed(url)
        allowed = rule if isinstance(rule, UrlRule) else url_rule_parsed(rule)
    except UrlRefused:
        return False
    if (parsed.scheme, parsed.host, parsed.port) != (allowed.scheme, allowed.host,
                                                     allowed.port):
        return False
    if not allowed.prefix:
        return parsed.path == allowed.path and not parsed.query
    base = allowed.path.rstrip("/")
    return parsed.path == base or parsed.path.startswith(base + "/")


def url_listed(url: str | Url, rules: Iterable[str]) -> bool:
    """Whether one of ``rules`` allows ``url`` (:func:`url_matches`)."""
    return any(url_matches(url, rule) for rule in rules)


def url_rules_check(rules: Iterable[str], *, setting: str) -> None:
    """:class:`UrlRefused` naming ``setting`` and the entry, for the first of ``rules`` that
    is not a rule (checked when the server starts, so a typo is an error, not a rule that
    silently allows nothing)."""
    for rule in rules:
        try:
            url_rule_parsed(rule)
        except UrlRefused as exc:
            raise UrlRefused(f"{setting}: {rule!r} is not a URL rule: {exc}") from None


def _host_port(netloc: str, scheme: str) -> tuple[str, int]:
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise UrlRefused("the URL's IPv6 host has no closing ']'")
        literal, rest = netloc[1:end], netloc[end + 1:]
        try:
            host = f"[{ipaddress.IPv6Address(literal).compressed}]"
        except ValueError:
            raise UrlRefused("the URL's host is not an IPv6 address") from None
        if rest and not rest.startswith(":"):
            raise UrlRefused("the URL's authority has text after the IPv6 host")
        port_text = rest[1:] if rest else None
    else:
        name, colon, port_text_or_empty = netloc.partition(":")
        port_text = port_text_or_empty if colon else None
        host = _name(name.lower())
    if port_text is None:
        return host, DEFAULT_PORTS[scheme]
    if not _PORT.match(port_text) or not 0 < int(port_text) < 65536:
        raise UrlRefused("the URL's port is not a number from 1 to 65535")
    return host, int(port_text)


def _name(host: str) -> str:
    if not host:
        raise UrlRefused("the URL has no host")
    if not _NAME.match(host):
        raise UrlRefused("the URL's host holds a character other than letters, digits, "
                         "'-', '_' and dots")
    last = host.rstrip(".").rsplit(".", 1)[-1]
    if _NUMERIC_LABEL.match(last):
        # A name whose last label is a number is an IPv4 address to a browser and to
        # inet_aton (127.1, 0x7f.1, 2130706433): only the dotted quad is accepted.
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise UrlRefused("the URL's host is a number but not a dotted-quad IPv4 "
                             "address") from None
    return host


def _escapes(text: str, *, where: str, strict: bool = True) -> str:
    """``text`` with escapes of unreserved characters decoded and the others in upper case;
    :class:`UrlRefused` for a malformed escape, or (``strict``: a path, which rules compare)
    one of :data:`_FORBIDDEN_ESCAPES`."""
    def one(match: re.Match[str]) -> str:
        digits = (match.group(1) or "").upper()
        if len(digits) != 2 or any(c not in "0123456789ABCDEF" for c in digits):
            raise UrlRefused(f"the URL's {where} holds a '%' that is not an escape")
        if strict and digits in _FORBIDDEN_ESCAPES:
            raise UrlRefused(f"the URL's {where} holds an encoded '/', '\\', '%' or control "
                             "character")
        char = chr(int(digits, 16))
        return char if char in _UNRESERVED else f"%{digits}"

    return _ESCAPE.sub(one, text)


def _path(raw: str) -> str:
    path = _escapes(raw, where="path") or "/"
    if not path.startswith("/"):
        raise UrlRefused("the URL's path does not start with '/'")
    for segment in path.split("/"):
        if segment.split(";", 1)[0] in (".", ".."):
            raise UrlRefused("the URL's path holds a '.' or '..' segment")
    return path
