"""The operator API of webhooks (``/webhooks``): endpoints, each with its delivery log and
manual redelivery. Staff sessions and ``admin`` keys only (:class:`StaffApi`); every change
is audited. An endpoint's secret is in the answer that makes it, and in no other."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors, services
from agents.apis.console import StaffApi
from agents.http.rest import PaginationFilter, StrictSerializer, paginated_schema
from agents.models import WEBHOOK_EVENT_TYPES, WebhookDelivery


class WebhookOutput(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=WEBHOOK_EVENT_TYPES))
    enabled = serializers.BooleanField()
    created_at = serializers.CharField()
    updated_at = serializers.CharField()


class WebhookCreatedOutput(WebhookOutput):
    secret = serializers.CharField(help_text="whsec_...: verifies the signature of every "
                                   "delivery (standardwebhooks); shown this once.")


class WebhookInput(StrictSerializer):
    url = serializers.CharField(max_length=2048, help_text="http(s); allowed by "
                                "GAIA_WEBHOOK_ALLOWED_URLS (private addresses only if listed).")
    events = serializers.ListField(child=serializers.CharField(max_length=100), required=False,
                                   max_length=len(WEBHOOK_EVENT_TYPES) * 2,
                                   help_text="Event types; default: every type.")
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class WebhookUpdateInput(WebhookInput):
    url = serializers.CharField(max_length=2048, required=False)


class AttemptOutput(serializers.Serializer):
    number = serializers.IntegerField()
    manual = serializers.BooleanField(help_text="A redelivery an operator asked for.")
    started_at = serializers.CharField()
    status_code = serializers.IntegerField(allow_null=True, help_text="Null: no answer.")
    latency_ms = serializers.IntegerField()
    response = serializers.CharField(allow_blank=True, help_text="The answer's first 1,000 "
                                     "characters.")
    error = serializers.CharField(allow_null=True)


class DeliveryOutput(serializers.Serializer):
    id = serializers.IntegerField()
    endpoint = serializers.IntegerField()
    event_id = serializers.CharField(help_text="evt_...: the webhook-id header.")
    type = serializers.ChoiceField(choices=WEBHOOK_EVENT_TYPES)
    payload = serializers.JSONField()
    state = serializers.ChoiceField(choices=WebhookDelivery.State.choices)
    attempts = serializers.IntegerField()
    status_code = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)
    response = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_null=True)
    next_attempt_at = serializers.CharField(allow_null=True)
    created_at = serializers.CharField()
    updated_at = serializers.CharField()
    attempt_log = AttemptOutput(many=True)


def _body(endpoint: object) -> dict:
    return WebhookOutput(selectors.webhook_endpoint_public(endpoint)).data


class WebhookListApi(StaffApi):
    @extend_schema(parameters=[PaginationFilter], operation_id="webhooks_list",
                   summary="Webhook endpoints (never their secrets)",
                   responses=paginated_schema("PaginatedWebhooks", WebhookOutput))
    def get(self, request: Request) -> Response:
        self.filters(PaginationFilter)
        return self.paginated(selectors.webhook_endpoint_list(),
                              selectors.webhook_endpoint_public, WebhookOutput)

    @extend_schema(request=WebhookInput, responses={201: WebhookCreatedOutput},
                   operation_id="webhooks_create",
                   summary="Register an endpoint; the answer holds its secret, once")
    def post(self, request: Request) -> Response:
        serializer = WebhookInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        endpoint = services.webhook_endpoint_save(
            endpoint=None, fields=dict(serializer.validated_data),
            actor=services.audit_actor_of_request(request))
        body = {**selectors.webhook_endpoint_public(endpoint), "secret": endpoint.secret}
        return Response(WebhookCreatedOutput(body).data, status=status.HTTP_201_CREATED)


class WebhookDetailApi(StaffApi):
    schema_errors = (404,)

    @extend_schema(responses=WebhookOutput, operation_id="webhooks_get",
                   summary="A webhook endpoint")
    def get(self, request: Request, endpoint_id: str) -> Response:
        return Response(_body(selectors.webhook_endpoint_get(endpoint_id=endpoint_id)))

    @extend_schema(request=WebhookUpdateInput, responses=WebhookOutput,
                   operation_id="webhooks_update", summary="Change a webhook endpoint")
    def patch(self, request: Request, endpoint_id: str) -> Response:
        endpoint = selectors.webhook_endpoint_get(endpoint_id=endpoint_id)
        serializer = WebhookUpdateInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.webhook_endpoint_save(endpoint=endpoint, fields=dict(serializer.validated_data),
                                       actor=services.audit_actor_of_request(request))
        return Response(_body(endpoint))

    @extend_schema(request=None, responses={204: None}, operation_id="webhooks_delete",
                   summary="Delete a webhook endpoint and its delivery log")
    def delete(self, request: Request, endpoint_id: str) -> Response:
        services.webhook_endpoint_delete(
            endpoint=selectors.webhook_endpoint_get(endpoint_id=endpoint_id),
            actor=services.audit_actor_of_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookDeliveryListApi(StaffApi):
    schema_errors = (404,)

    class FilterSerializer(PaginationFilter):
        state = serializers.ChoiceField(choices=WebhookDelivery.State.choices, required=False)
        type = serializers.ChoiceField(choices=WEBHOOK_EVENT_TYPES, required=False)

    @extend_schema(parameters=[FilterSerializer], operation_id="webhooks_deliveries",
                   summary="An endpoint's delivery log, newest first, each with its attempts",
                   responses=paginated_schema("PaginatedWebhookDeliveries", DeliveryOutput))
    def get(self, request: Request, endpoint_id: str) -> Response:
        endpoint = selectors.webhook_endpoint_get(endpoint_id=endpoint_id)
        f = self.filters(self.FilterSerializer)
        return self.paginated(
            selectors.webhook_delivery_list(endpoint=endpoint, state=f.get("state"),
                                            event_type=f.get("type")),
            selectors.webhook_delivery_public, DeliveryOutput)


class WebhookDeliveryDetailApi(StaffApi):
    schema_errors = (404,)

    @extend_schema(responses=DeliveryOutput, operation_id="webhooks_delivery_get",
                   summary="One delivery, with its attempts")
    def get(self, request: Request, endpoint_id: str, delivery_id: str) -> Response:
        endpoint = selectors.webhook_endpoint_get(endpoint_id=endpoint_id)
        delivery = selectors.webhook_delivery_get(endpoint=endpoint, delivery_id=delivery_id)
        return Response(DeliveryOutput(selectors.webhook_delivery_public(delivery)).data)


class WebhookRedeliverApi(StaffApi):
    schema_errors = (404, 409)

    @extend_schema(request=None, responses={202: DeliveryOutput},
                   operation_id="webhooks_redeliver",
                   summary="Send a delivery again now (same event id)")
    def post(self, request: Request, endpoint_id: str, delivery_id: str) -> Response:
        endpoint = selectors.webhook_endpoint_get(endpoint_id=endpoint_id)
        delivery = selectors.webhook_delivery_get(endpoint=endpoint, delivery_id=delivery_id)
        delivery = services.webhook_delivery_redeliver(
            delivery=delivery, actor=services.audit_actor_of_request(request))
        return Response(DeliveryOutput(selectors.webhook_delivery_public(delivery)).data,
                        status=status.HTTP_202_ACCEPTED)
