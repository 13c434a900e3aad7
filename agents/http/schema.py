"""The OpenAPI schema of ``/api/v1`` (drf-spectacular): every operation declares the errors it
can answer, each in the ``{"detail", "code"}`` envelope, so a client (and the schema fuzz test)
can check error bodies as strictly as successes.

A view adds statuses only it can answer (409 for a conflict, 503 for a paused agent) with
``schema_errors = (409, 503)``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

ERROR_DESCRIPTIONS = {
    400: "Invalid input: `param` names the field, `errors` holds every field's messages.",
    401: "No credentials, or an unknown or revoked key.",
    403: "The key lacks the scope, or the user is not staff.",
    404: "No such object.",
    409: "The object's state forbids this now.",
    413: "The request body is too large.",
    503: "Unavailable for now; see `Retry-After`.",
}


@extend_schema_serializer(component_name="Error")
class ErrorOutput(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField()
    param = serializers.CharField(required=False, allow_null=True,
                                  help_text="The field at fault, if one is.")
    errors = serializers.DictField(required=False,
                                   help_text="Validation errors by field (400 only).")


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's schema plus each operation's error responses."""

    def error_statuses(self) -> list[int]:
        statuses = [401, 403, *getattr(self.view, "schema_errors", ())]
        takes_input = bool(self.get_override_parameters()) or (
            self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None)
        if takes_input:
            statuses.append(400)
        if self.method in ("POST", "PUT", "PATCH"):
            statuses.append(413)
        if "{" in self.path:
            statuses.append(404)
        return sorted(set(statuses))

    def _map_serializer(self, serializer: Any, direction: Any,
                        bypass_extensions: bool = False) -> dict[str, Any]:
        mapped = super()._map_serializer(serializer, direction, bypass_extensions)
        if getattr(serializer, "strict", False) and direction == "request":
            mapped["additionalProperties"] = False  # agents.http.rest.StrictSerializer
        return mapped

    def _map_serializer_field(self, field: Any, direction: Any,
                              bypass_extensions: bool = False) -> dict[str, Any]:
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        # DRF trims a text field and then refuses it blank, so "\t" is a 400: the schema says
        # so (some character that is not white space), or a client (and the schema fuzz)
        # reads a plain "string" as accepting it.
        if (direction == "request" and isinstance(field, serializers.CharField)
                and field.trim_whitespace
                and not field.allow_blank and schema.get("type") == "string"
                and not {"pattern", "format", "enum"} & set(schema)):
            schema["pattern"] = r"\S"
        return schema

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for status in self.error_statuses():
            if str(status) not in responses:
                response = self._get_response_for_code(ErrorOutput, str(status),
                                                       direction=direction)
                response["description"] = ERROR_DESCRIPTIONS[status]
                responses[str(status)] = response
        return responses
