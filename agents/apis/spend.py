"""The operator API of money: budgets (``/budgets``) and the prices admins set over the
shipped table (``/prices``). Staff sessions and ``admin`` keys only (:class:`StaffApi`);
every change is audited."""

from __future__ import annotations

from decimal import Decimal

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors, services
from agents.apis.console import StaffApi
from agents.http.rest import PaginationFilter, StrictSerializer, paginated_schema, sort_field
from agents.kernel.exceptions import InvalidRequest, NotFound
from agents.models import Budget, ModelPrice, Provider

# ---------------------------------------------------------------------------------------------
# Budgets


class BudgetOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    scope = serializers.ChoiceField(choices=Budget.Scope.choices)
    key = serializers.CharField(allow_null=True, help_text="The key's prefix (scope key, or "
                                "the key whose user it is).")
    agent = serializers.CharField(allow_null=True)
    user = serializers.CharField(allow_null=True)
    unit = serializers.ChoiceField(choices=Budget.Unit.choices)
    limit = serializers.JSONField(help_text="USD as a decimal string, or tokens.")
    period = serializers.ChoiceField(choices=Budget.Period.choices)
    soft_percent = serializers.IntegerField(allow_null=True)
    spent = serializers.JSONField(help_text="In this period.")
    reserved = serializers.JSONField(help_text="Held by the turns running now.")
    remaining = serializers.JSONField()
    period_start = serializers.CharField()
    resets_at = serializers.CharField(allow_null=True, help_text="Null: a total budget.")
    created_at = serializers.CharField()
    updated_at = serializers.CharField()


class BudgetInput(StrictSerializer):
    name = serializers.CharField(max_length=100)
    scope = serializers.ChoiceField(choices=Budget.Scope.choices)
    key = serializers.CharField(required=False, allow_null=True, max_length=40,
                                help_text="A key's prefix or id (scope key; optional for "
                                "scope user: without it, the user across trusting keys).")
    agent = serializers.CharField(required=False, allow_null=True, max_length=100)
    user = serializers.CharField(required=False, allow_blank=True, max_length=300)
    unit = serializers.ChoiceField(choices=Budget.Unit.choices)
    limit = serializers.DecimalField(max_digits=28, decimal_places=9, min_value=Decimal(0),
                                     help_text="USD (at most 9,000,000,000) or tokens.")
    period = serializers.ChoiceField(choices=Budget.Period.choices)
    soft_percent = serializers.IntegerField(required=False, allow_null=True, min_value=1,
                                            max_value=100)

    def validate(self, data: dict) -> dict:
        data = super().validate(data)
        unit, limit = data.get("unit"), data.get("limit")
        if unit == Budget.Unit.TOKENS and limit is not None and limit != int(limit):
            raise serializers.ValidationError({"limit": "A token limit is a whole number."})
        return data


class BudgetUpdateInput(BudgetInput):
    name = serializers.CharField(max_length=100, required=False)
    scope = serializers.ChoiceField(choices=Budget.Scope.choices, required=False)
    unit = serializers.ChoiceField(choices=Budget.Unit.choices, required=False)
    limit = serializers.DecimalField(max_digits=28, decimal_places=9, min_value=Decimal(0),
                                     required=False)
    period = serializers.ChoiceField(choices=Budget.Period.choices, required=False)


def _budget_body(budget: Budget) -> dict:
    return BudgetOutput(selectors.budget_public(selectors.budget_get(budget_id=budget.pk))).data


class BudgetListApi(StaffApi):
    class FilterSerializer(PaginationFilter):
        scope = serializers.ChoiceField(choices=Budget.Scope.choices, required=False)
        sort = sort_field(selectors.BUDGET_ORDERING)

    @extend_schema(parameters=[FilterSerializer], operation_id="budgets_list",
                   summary="Budgets, with what each has spent this period",
                   responses=paginated_schema("PaginatedBudgets", BudgetOutput))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        return self.paginated(selectors.budget_list(scope=f.get("scope"), sort=f.get("sort")),
                              selectors.budget_public, BudgetOutput)

    @extend_schema(request=BudgetInput, responses={201: BudgetOutput},
                   operation_id="budgets_create", summary="Make a budget")
    def post(self, request: Request) -> Response:
        serializer = BudgetInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        budget = services.budget_save(budget=None, fields=dict(serializer.validated_data),
                                      actor=services.audit_actor_of_request(request))
        return Response(_budget_body(budget), status=status.HTTP_201_CREATED)


class BudgetDetailApi(StaffApi):
    schema_errors = (404,)

    @extend_schema(responses=BudgetOutput, operation_id="budgets_get", summary="A budget")
    def get(self, request: Request, budget_id: int) -> Response:
        return Response(_budget_body(selectors.budget_get(budget_id=budget_id)))

    @extend_schema(request=BudgetUpdateInput, responses=BudgetOutput,
                   operation_id="budgets_update", summary="Change a budget")
    def patch(self, request: Request, budget_id: int) -> Response:
        budget = selectors.budget_get(budget_id=budget_id)
        serializer = BudgetUpdateInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.budget_save(budget=budget, fields=dict(serializer.validated_data),
                             actor=services.audit_actor_of_request(request))
        return Response(_budget_body(budget))

    @extend_schema(request=None, responses={204: None}, operation_id="budgets_delete",
                   summary="Delete a budget")
    def delete(self, request: Request, budget_id: int) -> Response:
        services.budget_delete(budget=selectors.budget_get(budget_id=budget_id),
                               actor=services.audit_actor_of_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


# ---------------------------------------------------------------------------------------------
# Prices


class PriceOutput(serializers.Serializer):
    provider = serializers.CharField()
    model = serializers.CharField(allow_blank=True, help_text="Blank: every model of the "
                                  "provider without a price of its own.")
    input_per_mtok = serializers.CharField(help_text="USD per million input tokens.")
    output_per_mtok = serializers.CharField()
    cached_input_per_mtok = serializers.CharField(allow_null=True)
    updated_at = serializers.CharField()


class PriceInput(StrictSerializer):
    provider = serializers.CharField(max_length=100)
    model = serializers.CharField(max_length=200, allow_blank=True, required=False)
    input_per_mtok = serializers.DecimalField(max_digits=12, decimal_places=6,
                                              min_value=Decimal(0))
    output_per_mtok = serializers.DecimalField(max_digits=12, decimal_places=6,
                                               min_value=Decimal(0))
    cached_input_per_mtok = serializers.DecimalField(
        max_digits=12, decimal_places=6, min_value=Decimal(0), required=False, allow_null=True)


class PriceLookupOutput(serializers.Serializer):
    provider = serializers.CharField()
    model = serializers.CharField()
    known = serializers.BooleanField()
    input_per_mtok = serializers.CharField(required=False)
    output_per_mtok = serializers.CharField(required=False)
    cached_input_per_mtok = serializers.CharField(required=False)
    source = serializers.CharField(help_text="admin, genai-prices: <id>, free: <kind> or "
                                   "unknown.")


def _price_public(row: ModelPrice) -> dict:
    return {"provider": row.provider.name, "model": row.model,
            "input_per_mtok": str(row.input_per_mtok),
            "output_per_mtok": str(row.output_per_mtok),
            "cached_input_per_mtok": (str(row.cached_input_per_mtok)
                                      if row.cached_input_per_mtok is not None else None),
            "updated_at": row.updated_at.isoformat()}


class PriceListApi(StaffApi):
    class FilterSerializer(PaginationFilter):
        provider = serializers.CharField(required=False, max_length=100)
        model = serializers.CharField(required=False, allow_blank=True, max_length=200,
                                      help_text="With "
                                      "provider: the price a turn of that model is charged "
                                      "(whatever its source) instead of the list.")

    @extend_schema(parameters=[FilterSerializer], operation_id="prices_list",
                   summary="Prices set by admins; or, with provider and model, the price "
                   "that applies", responses=paginated_schema("PaginatedPrices", PriceOutput))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        if f.get("model") is not None:
            provider = _provider(f.get("provider") or "")
            price = services.price_lookup(provider=provider, model=f["model"])
            body = {"provider": provider.name, "model": f["model"], "known": price is not None,
                    **(price.public() if price else {"source": "unknown"})}
            return Response(PriceLookupOutput(body).data)
        rows = ModelPrice.objects.select_related("provider").order_by("provider__name",
                                                                       "model", "pk")
        if f.get("provider"):
            rows = rows.filter(provider__name=f["provider"])
        return self.paginated(rows, _price_public, PriceOutput)

    @extend_schema(request=PriceInput, responses=PriceOutput, operation_id="prices_set",
                   summary="Set the price of a provider's model (over the shipped table)")
    def post(self, request: Request) -> Response:
        serializer = PriceInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        row = services.price_set(provider=_provider(data.pop("provider")),
                                 model=data.pop("model", ""), fields=data,
                                 actor=services.audit_actor_of_request(request))
        return Response(PriceOutput(_price_public(row)).data)

    @extend_schema(request=None, parameters=[FilterSerializer], responses={204: None},
                   operation_id="prices_delete",
                   summary="Remove an admin's price (?provider=&model=)")
    def delete(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        if f.get("model") is None:
            raise InvalidRequest("Name the price: ?provider=...&model=... (model may be "
                                 "empty).", param="model")
        services.price_delete(provider=_provider(f.get("provider") or ""), model=f["model"],
                              actor=services.audit_actor_of_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _provider(name: str) -> Provider:
    found = Provider.objects.filter(name=name).first()
    if found is None:
        raise NotFound(f"No provider {name!r}.", code="provider_not_found", param="provider")
    return found
