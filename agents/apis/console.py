"""The operator API of what staff manage: API keys (``/keys``: the secret shown once, at
creation), providers (``/providers``: credentials write-only, and a connection test), and the
audit trail every operator action leaves (``/audit``).

Keys and providers need a staff session (an API key, even an operator's, cannot make or
widen keys: that would let a key grant itself more). The audit trail is read by staff and by
operator keys with no agent list (:func:`agents.selectors.audit_read_check`). Each class calls
one selector or service, as the admin's forms do.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors, services
from agents.apis import OperatorApi
from agents.backends import backend_probe
from agents.http.authentication import AdminKeyAuthentication, StaffSessionAuthentication, note
from agents.http.rest import (
    GaiaApi,
    PaginationFilter,
    SlugName,
    StrictSerializer,
    paginated_schema,
    sort_field,
)
from agents.kernel.exceptions import InvalidRequest
from agents.models import Agent, ApiKey, AuditEvent, Provider


class IsStaff(BasePermission):
    message = ("Keys, providers, prices and budgets are managed by staff: this needs a staff "
               "session or a key with the 'admin' scope.")
    code = "staff_required"

    def has_permission(self, request: Request, view: object) -> bool:
        if isinstance(request.auth, ApiKey):  # authenticated for the admin scope
            return True
        user = request.user
        return bool(user and user.is_authenticated and user.is_active and user.is_staff)


class StaffApi(GaiaApi):
    authentication_classes = [AdminKeyAuthentication, StaffSessionAuthentication]
    permission_classes = [IsStaff]

    def get_authenticate_header(self, request: Request) -> str:
        # no credentials: a 401 as on every other route (then a key gets 403 staff_required)
        return 'Bearer realm="gaia"'



# ---------------------------------------------------------------------------------------------
# API keys


class KeyOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's public part; the secret is never shown "
                                   "again after its creation.")
    state = serializers.ChoiceField(choices=["active", "expired", "revoked"])
    owner = serializers.CharField(allow_null=True)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ApiKey.Scope.values))
    agents = serializers.ListField(child=serializers.CharField(),
                                   help_text="The agents it may use; empty: every agent.")
    expires_at = serializers.CharField(allow_null=True)
    revoked_at = serializers.CharField(allow_null=True)
    last_used_at = serializers.CharField(allow_null=True)
    requests_per_minute = serializers.IntegerField(help_text="0: unlimited.")
    tokens_per_minute = serializers.IntegerField(help_text="0: unlimited.")
    budget_exempt = serializers.BooleanField(help_text="Exempt from every budget (staff only).")
    users_across_keys = serializers.BooleanField(
        help_text="Trusted to speak for users across keys: the users it names are everyone's "
        "(their memory is shared by every trusted key). False: a user it names is its own.")
    created_at = serializers.CharField()


class KeyCreatedOutput(KeyOutput):
    secret = serializers.CharField(help_text="The whole key: shown this once, stored hashed.")


class KeyInput(StrictSerializer):
    name = serializers.CharField(max_length=200)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ApiKey.Scope.values),
                                   min_length=1, max_length=5)
    agents = serializers.ListField(child=serializers.CharField(max_length=100), required=False,
                                   max_length=1000, help_text="Agent slugs; empty: every agent.")
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    requests_per_minute = serializers.IntegerField(required=False, min_value=0,
                                                   max_value=1_000_000)
    tokens_per_minute = serializers.IntegerField(required=False, min_value=0,
                                                 max_value=2_000_000_000)
    budget_exempt = serializers.BooleanField(
        required=False, help_text="Exempt from every budget (staff only; default false).")
    users_across_keys = serializers.BooleanField(
        required=False, help_text="Trust it to speak for users across keys (default false).")

    def validate_scopes(self, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


def _owner(request: Request) -> object | None:
    """Who a new key belongs to: the staff member, or the admin key's owner (if any)."""
    if isinstance(request.auth, ApiKey):
        return request.auth.owner
    return request.user


def _agents_named(slugs: list[str] | None) -> list[Agent] | None:
    if slugs is None:
        return None
    found = {a.slug: a for a in Agent.objects.filter(slug__in=slugs)}
    for i, slug in enumerate(slugs):
        if slug not in found:
            raise InvalidRequest(f"agents[{i}]: no agent {slug!r}.", param="agents")
    return [found[s] for s in dict.fromkeys(slugs)]


class KeyListApi(StaffApi):
    class FilterSerializer(PaginationFilter):
        state = serializers.ChoiceField(choices=["active", "expired", "revoked"], required=False)
        q = serializers.CharField(required=False, max_length=200)
        sort = sort_field(selectors.KEY_ORDERING)

    @extend_schema(parameters=[FilterSerializer], operation_id="keys_list",
                   summary="API keys, newest first (never a secret)",
                   responses=paginated_schema("PaginatedKeys", KeyOutput))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        return self.paginated(selectors.key_list(state=f.get("state"), q=f.get("q"),
                                                 sort=f.get("sort")),
                              selectors.key_public, KeyOutput)

    @extend_schema(request=KeyInput, responses={201: KeyCreatedOutput},
                   operation_id="keys_create", summary="Make a key; its secret is shown once")
    def post(self, request: Request) -> Response:
        serializer = KeyInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        key, secret = services.api_key_create(
            name=data["name"], scopes=data["scopes"], agents=_agents_named(data.get("agents")),
            owner=_owner(request), expires_at=data.get("expires_at"),
            requests_per_minute=data.get("requests_per_minute", 0),
            tokens_per_minute=data.get("tokens_per_minute", 0),
            budget_exempt=data.get("budget_exempt", False),
            users_across_keys=data.get("users_across_keys", False),
            actor=services.audit_actor_of_request(request))
        note(request, created_key=key.prefix)
        body = {**KeyOutput(selectors.key_public(selectors.key_get(key_id=key.pk))).data,
                "secret": secret}
        response = Response(body, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response


class KeyUpdateInput(KeyInput):
    name = serializers.CharField(max_length=200, required=False)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ApiKey.Scope.values),
                                   min_length=1, max_length=5, required=False)


class KeyDetailApi(StaffApi):
    schema_errors = (404, 409)

    @extend_schema(responses=KeyOutput, operation_id="keys_get", summary="One key")
    def get(self, request: Request, key_id: int) -> Response:
        return Response(KeyOutput(selectors.key_public(selectors.key_get(key_id=key_id))).data)

    @extend_schema(request=KeyUpdateInput, responses=KeyOutput, operation_id="keys_update",
                   summary="Change a key's name, scopes, agents, expiry, rate or trust")
    def patch(self, request: Request, key_id: int) -> Response:
        key = selectors.key_get(key_id=key_id)
        serializer = KeyUpdateInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        agents = _agents_named(data.pop("agents", None))
        services.api_key_update(key=key, fields=data, agents=agents,
                                actor=services.audit_actor_of_request(request))
        return Response(KeyOutput(selectors.key_public(selectors.key_get(key_id=key_id))).data)


class KeyRevokeApi(StaffApi):
    schema_errors = (404,)

    @extend_schema(request=None, responses=KeyOutput, operation_id="keys_revoke",
                   summary="Revoke a key: every request with it is refused from now on")
    def post(self, request: Request, key_id: int) -> Response:
        key = selectors.key_get(key_id=key_id)
        services.api_key_revoke(key=key, actor=services.audit_actor_of_request(request))
        return Response(KeyOutput(selectors.key_public(selectors.key_get(key_id=key_id))).data)


# ---------------------------------------------------------------------------------------------
# Providers


class ProviderOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Provider.Kind.choices)
    base_url = serializers.CharField(allow_blank=True)
    api_key_env = serializers.CharField(allow_null=True)
    has_credentials = serializers.BooleanField(help_text="Whether a credential is set; it is "
                                               "never shown.")
    default_model = serializers.CharField(allow_blank=True)
    timeout_seconds = serializers.FloatField()
    max_concurrency = serializers.IntegerField()
    options = serializers.DictField(help_text="extra_headers values are shown as [redacted].")
    agent_count = serializers.IntegerField(allow_null=True)
    updated_at = serializers.CharField()


class ProviderInput(StrictSerializer):
    name = SlugName(max_length=100)
    kind = serializers.ChoiceField(choices=Provider.Kind.choices)
    base_url = serializers.URLField(max_length=500, required=False, allow_blank=True)
    api_key_env = serializers.CharField(max_length=200, required=False, allow_blank=True)
    api_key = serializers.CharField(max_length=500, required=False, allow_blank=True,
                                    write_only=True, help_text="Write-only; empty keeps the "
                                    "stored one.")
    clear_api_key = serializers.BooleanField(required=False, default=False)
    default_model = serializers.CharField(max_length=200, required=False, allow_blank=True)
    timeout_seconds = serializers.FloatField(required=False, min_value=0.1, max_value=3600)
    max_concurrency = serializers.IntegerField(required=False, min_value=1, max_value=10_000)
    options = serializers.DictField(required=False, help_text="Kind-specific settings; an "
                                    "extra_headers value of [hidden] keeps the stored one.")


class ProviderUpdateInput(ProviderInput):
    name = SlugName(max_length=100, required=False)
    kind = serializers.ChoiceField(choices=Provider.Kind.choices, required=False)


def _provider_save(request: Request, provider: Provider | None,
                   serializer_class: type[ProviderInput]) -> Provider:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = dict(serializer.validated_data)
    api_key, clear = data.pop("api_key", ""), data.pop("clear_api_key", False)
    return services.provider_save(provider=provider, fields=data, api_key=api_key,
                                  clear_api_key=clear,
                                  actor=services.audit_actor_of_request(request))


class ProviderListApi(StaffApi):
    class FilterSerializer(PaginationFilter):
        sort = sort_field(selectors.PROVIDER_ORDERING)

    @extend_schema(parameters=[FilterSerializer], operation_id="providers_list",
                   summary="Providers (never a credential)",
                   responses=paginated_schema("PaginatedProviders", ProviderOutput))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        return self.paginated(selectors.provider_list(sort=f.get("sort")),
                              selectors.provider_public, ProviderOutput)

    @extend_schema(request=ProviderInput, responses={201: ProviderOutput},
                   operation_id="providers_create", summary="Add a provider")
    def post(self, request: Request) -> Response:
        provider = _provider_save(request, None, ProviderInput)
        shown = selectors.provider_public(selectors.provider_get(name=provider.name))
        return Response(ProviderOutput(shown).data, status=status.HTTP_201_CREATED)


class ProviderDetailApi(StaffApi):
    schema_errors = (404,)

    @extend_schema(responses=ProviderOutput, operation_id="providers_get", summary="A provider")
    def get(self, request: Request, name: str) -> Response:
        shown = selectors.provider_public(selectors.provider_get(name=name))
        return Response(ProviderOutput(shown).data)

    @extend_schema(request=ProviderUpdateInput, responses=ProviderOutput,
                   operation_id="providers_update", summary="Change a provider")
    def patch(self, request: Request, name: str) -> Response:
        provider = _provider_save(request, selectors.provider_get(name=name),
                                  ProviderUpdateInput)
        shown = selectors.provider_public(selectors.provider_get(name=provider.name))
        return Response(ProviderOutput(shown).data)


class ProbeOutput(serializers.Serializer):
    ok = serializers.BooleanField()
    model = serializers.CharField(allow_null=True, required=False)
    reply = serializers.CharField(allow_blank=True, required=False)
    ttft_ms = serializers.IntegerField(required=False)
    elapsed_ms = serializers.IntegerField()
    error = serializers.CharField(required=False)
    kind = serializers.CharField(required=False)


class ProviderTestApi(StaffApi):
    schema_errors = (404,)

    @extend_schema(request=None, responses=ProbeOutput, operation_id="providers_test",
                   summary="Test the connection: one short request to the default model")
    def post(self, request: Request, name: str) -> Response:
        provider = selectors.provider_get(name=name)
        result = async_to_sync(backend_probe)(provider)
        services.audit_record(actor=services.audit_actor_of_request(request),
                              action="provider_test", target=f"provider:{provider.name}",
                              detail={"ok": result["ok"]})
        return Response(ProbeOutput(result).data)


# ---------------------------------------------------------------------------------------------
# The audit trail


class AuditOutput(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.CharField()
    actor = serializers.CharField(help_text="user:<name> or key:<name> (<prefix>).")
    channel = serializers.CharField(help_text="rest, ws, page or admin.")
    ip = serializers.CharField(allow_null=True)
    action = serializers.ChoiceField(choices=AuditEvent.Action.values)
    target = serializers.CharField()
    detail = serializers.DictField()


class AuditListApi(OperatorApi):
    class FilterSerializer(PaginationFilter):
        action = serializers.ChoiceField(choices=AuditEvent.Action.values, required=False)
        actor = serializers.CharField(required=False, max_length=320)
        target = serializers.CharField(required=False, max_length=300)
        since = serializers.DateTimeField(required=False)
        until = serializers.DateTimeField(required=False)
        sort = sort_field(selectors.AUDIT_ORDERING)

    @extend_schema(parameters=[FilterSerializer], operation_id="audit_list",
                   summary="Who did what, when and from where; newest first",
                   responses=paginated_schema("PaginatedAudit", AuditOutput))
    def get(self, request: Request) -> Response:
        selectors.audit_read_check(
            api_key=request.auth if isinstance(request.auth, ApiKey) else None, user=request.user)
        f = self.filters(self.FilterSerializer)
        rows = selectors.audit_list(action=f.get("action"), actor=f.get("actor"),
                                    target=f.get("target"), since=f.get("since"),
                                    until=f.get("until"), sort=f.get("sort"))
        return self.paginated(rows, selectors.audit_public, AuditOutput)


