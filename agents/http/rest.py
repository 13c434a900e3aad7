"""The DRF edge shared by the operator API (:mod:`agents.apis`) and the benchmarks API
(:mod:`benchmarks.apis`): one error body, one exception handler, JSON only, checked pagination
and filters, strict input, and the schema's security schemes.

Every error of either API leaves as ``{"detail": "...", "code": "...", "param": ...}``
(``param``: the field a 400 is about, else ``null``; a validation error adds ``errors``, DRF's
own detail), never a traceback or an HTML page (:func:`api_exception_handler`, the project's
``EXCEPTION_HANDLER``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator, validate_slug
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.authentication import SessionScheme
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from agents.http.authentication import (
    AdminKeyAuthentication,
    BenchmarksKeyAuthentication,
    OperatorKeyAuthentication,
    StaffSessionAuthentication,
)
from agents.http.jsonbody import printable
from agents.http.paging import order_keys, rows_after, seek_slice, sort_field_of
from agents.http.schema import ApiAutoSchema
from agents.kernel.exceptions import GaiaError, PayloadTooLarge

log = logging.getLogger("gaia.api")


def _first_error(errors: Any, prefix: str = "") -> tuple[str | None, str]:
    """``(field, message)`` of a validation error's first problem: ``field`` dotted for a
    nested one (``tools.reason``), ``None`` when it is about the whole body."""
    if isinstance(errors, dict):
        for key, value in errors.items():
            if key == "non_field_errors":
                return prefix or None, _first_error(value, prefix)[1]
            if value:
                name = f"{prefix}.{key}" if prefix else str(key)
                field, message = _first_error(value, name)
                return field or name, message
    if isinstance(errors, list):
        for value in errors:
            if value:
                return _first_error(value, prefix)
    if isinstance(errors, dict | list):
        return prefix or None, "Invalid value."
    return prefix or None, str(errors)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Every error of the operator and benchmarks APIs as ``{"detail", "code", "param"}``;
    500s are logged and say nothing more."""
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(
            f"The request body is larger than {settings.GAIA_MAX_BODY_BYTES} bytes.")
    if isinstance(exc, GaiaError):
        code = exc.code or ("invalid" if exc.status == 400 else exc.kind)
        response = Response({"detail": printable(exc.message), "code": code,
                             "param": printable(exc.param) if exc.param else exc.param},
                            status=exc.status)
        if exc.retry_after is not None:
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, DjangoValidationError):
        # A model's own check (full_clean in a service) the input's checks let through: the
        # client's mistake, a 400 naming the field, not a 500.
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    response = drf_exception_handler(exc, context)
    if response is None:
        request = context.get("request")
        log.error("unhandled error on %s %s", getattr(request, "method", "?"),
                  getattr(request, "path", "?"), exc_info=exc)
        return Response({"detail": "The server had an error while processing your request.",
                         "code": "internal_error", "param": None}, status=500)
    assert isinstance(exc, exceptions.APIException)
    if isinstance(exc, exceptions.ValidationError):
        errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        field, message = _first_error(errors)
        response.data = {"detail": f"{field}: {message}" if field else message,
                         "code": "invalid", "param": field, "errors": errors}
    else:
        code = getattr(exc.detail, "code", None) or exc.default_code
        response.data = {"detail": str(exc.detail), "code": code, "param": None}
    return response


class JsonOnly(BaseContentNegotiation):
    """JSON whatever the client's ``Accept`` says (a browser's ``text/html`` included): the
    APIs have no other representation, and a 406 helps nobody."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return DefaultContentNegotiation().select_parser(request, parsers)

    def select_renderer(self, request: Request, renderers: list[Any],
                        format_suffix: str | None = None) -> tuple[Any, str]:
        return renderers[0], renderers[0].media_type


class Pagination(LimitOffsetPagination):
    """``limit`` (1 to ``max_limit``, default 50) and ``offset`` or ``cursor``; answers
    ``{"count", "next", "previous", "results"}``.

    ``next`` carries a cursor: the last row's sort key. The page it names starts right after
    that row, found with one index seek however deep it is, and stays the same page while new
    rows arrive at the top of the list (an offset shifts with every new row and reads every
    row it skips). ``offset`` still jumps to any page; a cursor page has no ``previous``.
    Lists whose order does not end with a unique key page by offset alone.
    """

    default_limit = 50
    max_limit = 200
    cursor_query_param = "cursor"

    def paginate_queryset(self, queryset: QuerySet[Any], request: Request, view: Any = None
                          ) -> list[Any]:
        self.request = request
        self.keys = order_keys(queryset)
        raw = request.query_params.get(self.cursor_query_param)
        if raw and self.keys is None:
            raise exceptions.ValidationError({"cursor": ["This list pages by offset only."]})
        if not raw:
            self.cursor_page = False
            self.limit = self.get_limit(request)
            self.count = self.get_count(queryset)
            self.offset = self.get_offset(request)
            self.rows = ([] if self.count == 0 or self.offset > self.count else
                         seek_slice(queryset, self.offset, self.offset + self.limit,
                                    self.count))
            return self.rows
        self.cursor_page = True
        self.limit = self.get_limit(request)
        self.count = self.get_count(queryset)
        self.offset = 0
        after = _cursor_decode(raw, queryset.model, self.keys)
        rows = list(queryset.filter(rows_after(self.keys, after))[: self.limit + 1])
        self.more = len(rows) > self.limit
        self.rows = rows[: self.limit]
        return self.rows

    def get_count(self, queryset: Any) -> int:
        """The list's size: ``count_hint`` when the view knows it without counting (the
        message total is kept by a trigger: counting a million rows took 13-24 ms)."""
        hint = getattr(self, "count_hint", None)
        return hint if hint is not None else super().get_count(queryset)

    def get_next_link(self) -> str | None:
        if self.keys is None:
            return super().get_next_link()
        more = self.more if self.cursor_page else self.offset + self.limit < self.count
        if not more or not self.rows:
            return None
        url = remove_query_param(self.request.build_absolute_uri(), self.offset_query_param)
        url = replace_query_param(url, self.limit_query_param, self.limit)
        return replace_query_param(url, self.cursor_query_param,
                                   _cursor_encode(self.rows[-1], self.keys))

    def get_previous_link(self) -> str | None:
        return None if self.cursor_page else super().get_previous_link()


def _sort_of(keys: list[tuple[str, bool]]) -> list[str]:
    return [("-" if descending else "") + name for name, descending in keys]


def _cursor_encode(row: Any, keys: list[tuple[str, bool]]) -> str:
    """The row's sort key, and the sort itself: a cursor of another sort (a ``next`` link
    whose ``sort`` was edited) is refused, not read as if it were of this one."""
    values = []
    for name, _ in keys:
        value = getattr(row, "pk" if name == "pk" else sort_field_of(type(row), name).attname)
        values.append(value.isoformat() if hasattr(value, "isoformat") else str(value))
    raw = json.dumps({"sort": _sort_of(keys), "after": values})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _cursor_decode(raw: str, model: Any, keys: list[tuple[str, bool]]) -> list[Any]:
    try:
        cursor = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if not isinstance(cursor, dict) or cursor.get("sort") != _sort_of(keys):
            raise ValueError("another list's or another sort's cursor")
        values = cursor.get("after")
        if not isinstance(values, list) or len(values) != len(keys):
            raise ValueError("wrong shape")
        return [sort_field_of(model, name).to_python(v) for (name, _), v in zip(keys, values,
                                                                         strict=True)]
    except (ValueError, TypeError, binascii.Error, DjangoValidationError):
        raise exceptions.ValidationError(
            {"cursor": ["Not a cursor of this list (use the next link as given)."]}) from None


class PaginationFilter(serializers.Serializer):
    """``limit``, ``offset`` and ``cursor`` checked (DRF's paginator silently ignores bad
    values)."""

    limit = serializers.IntegerField(required=False, min_value=1, max_value=Pagination.max_limit)
    offset = serializers.IntegerField(required=False, min_value=0)
    cursor = serializers.CharField(required=False, max_length=500,
                                   help_text="The next page after a row: from a `next` link.")


class SlugName(serializers.SlugField):
    """A name that is a slug exactly as sent: DRF's slug field trims spaces ('0 ' became a
    suite named '0') and its pattern ends with ``$``, which lets a trailing newline through
    to the model's own check (a 500). Django's ``validate_slug`` ends with ``\\Z``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, RegexValidator)]
        self.validators.append(validate_slug)


def sort_field(ordering: Any) -> serializers.ChoiceField:
    """The ``sort`` query parameter of a list sorted by :class:`agents.selectors.ordering.Ordering`:
    a 400 naming ``sort`` for a column the list does not sort by."""
    return serializers.ChoiceField(
        choices=ordering.choices, required=False,
        help_text=f"Sort by a column (a leading - for descending; default {ordering.default}"
        "). Ties keep the id's order; a next link keeps the sort.")


class StrictSerializer(serializers.Serializer):
    """Unknown fields are errors (a typo must not silently run the default); the schema says
    so (``additionalProperties: false``, :class:`agents.http.schema.ApiAutoSchema`)."""

    strict = True
    NUMBERS = (serializers.IntegerField, serializers.FloatField, serializers.DecimalField)

    def to_internal_value(self, data: Any) -> Any:
        # JSON's true and false are no numbers, though Python reads them as 1 and 0 (DRF's
        # FloatField took {"grace_seconds": true} as one second: the schema fuzz found it).
        if isinstance(data, dict):
            for name, field in self.fields.items():
                if isinstance(field, self.NUMBERS) and isinstance(data.get(name), bool):
                    raise serializers.ValidationError({name: ["A number is required."]})
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(getattr(self, "initial_data", {}) or {}) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({unknown[0]: ["Unknown field."]})
        return attrs


class GaiaApi(APIView):
    """The base of every operator and benchmarks API view: JSON only, the body's size checked
    before DRF reads it, filters and pages checked."""

    schema = ApiAutoSchema()
    content_negotiation_class = JsonOnly
    # Not DRF's ``pagination_class``: the schema would then call every list a page.
    page_class: type[Pagination] = Pagination

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # DRF reads a JSON body whole whatever Django's upload limit says; the ASGI guard
        # (openai_api.asgi.BodyLimit) answers first in production, this in every other case.
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.GAIA_MAX_BODY_BYTES:
            raise PayloadTooLarge(
                f"The request body is larger than {settings.GAIA_MAX_BODY_BYTES} bytes.")
        super().initial(request, *args, **kwargs)

    def filters(self, serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
        """The query's filters, checked: a 400 naming the bad one."""
        # A plain dict, not the QueryDict: DRF reads an empty form value as "absent", so
        # ``?limit=`` or ``?status=`` passed unchecked where the schema promises a value.
        serializer = serializer_class(data=self.request.query_params.dict())
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def paginated(self, rows: Any, render: Any, output: type[serializers.Serializer] | None = None,
                  count: int | None = None) -> Response:
        """A page of ``rows``, each rendered (and serialised by ``output`` if given);
        ``count``: how many rows there are, when known without counting them."""
        paginator = self.page_class()
        paginator.count_hint = count
        page = paginator.paginate_queryset(rows, self.request, view=self)
        data = [render(r) for r in page or []]
        if output is not None:
            data = output(data, many=True).data
        return paginator.get_paginated_response(data)


def paginated_schema(name: str, item: type[serializers.Field]) -> Any:
    """The schema of a :meth:`GaiaApi.paginated` answer, the component ``name``: ``count``,
    ``next``, ``previous`` and the page's ``results``, a list of ``item`` (an output
    serializer, or a field such as ``DictField``). The fields are made in that order, the
    order DRF lists them in."""
    fields: dict[str, serializers.Field] = {
        "count": serializers.IntegerField(),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
    }
    fields["results"] = (item(many=True) if issubclass(item, serializers.BaseSerializer)
                         else serializers.ListField(child=item()))
    return inline_serializer(name=name, fields=fields)


# The schema's security schemes (drf-spectacular finds extensions by subclassing).


class OperatorKeyScheme(OpenApiAuthenticationExtension):
    target_class = OperatorKeyAuthentication
    name = "operatorKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer",
                "description": "An API key with the 'operator' scope (also accepted as "
                               "X-API-Key)."}


class BenchmarksKeyScheme(OpenApiAuthenticationExtension):
    target_class = BenchmarksKeyAuthentication
    name = "benchmarksKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer",
                "description": "An API key with the 'benchmarks' scope (also accepted as "
                               "X-API-Key)."}


class AdminKeyScheme(OpenApiAuthenticationExtension):
    target_class = AdminKeyAuthentication
    name = "adminKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer",
                "description": "An API key with the 'admin' scope, made only by staff or the "
                               "CLI (also accepted as X-API-Key)."}


class StaffSessionScheme(SessionScheme):
    target_class = StaffSessionAuthentication
