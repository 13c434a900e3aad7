"""The admin's pages for money: prices over the shipped table, and budgets. Budgets are saved
through :func:`agents.services.budget_save` (the API's rules and audit); their spend is read,
never edited here."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from agents import selectors, services
from agents.kernel.exceptions import GaiaError
from agents.models import Budget, ModelPrice
from agents.models.spend import dollars_of


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = ["provider", "model", "input_per_mtok", "output_per_mtok",
                    "cached_input_per_mtok", "updated_at"]
    list_filter = ["provider"]

    def save_model(self, request: HttpRequest, obj: ModelPrice, form: Any, change: bool
                   ) -> None:
        super().save_model(request, obj, form, change)
        services.audit_record(actor=services.audit_actor_of_request(request, channel="admin"),
                              action="price_set", target=f"provider:{obj.provider.name}",
                              detail={"model": obj.model, "created": not change})

    def delete_model(self, request: HttpRequest, obj: ModelPrice) -> None:
        services.audit_record(actor=services.audit_actor_of_request(request, channel="admin"),
                              action="price_delete", target=f"provider:{obj.provider.name}",
                              detail={"model": obj.model})
        super().delete_model(request, obj)


class BudgetForm(forms.ModelForm):
    limit_value = forms.DecimalField(label="limit", max_digits=18, decimal_places=9,
                                     min_value=Decimal(0),
                                     help_text="USD (unit usd) or tokens (unit tokens).")

    class Meta:
        model = Budget
        fields = ["name", "scope", "api_key", "agent", "user", "unit", "period",
                  "soft_percent"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        b = self.instance
        if b.pk:
            self.initial["limit_value"] = dollars_of(b.limit) if b.unit == "usd" else b.limit

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        fields = {"name": data.get("name"), "scope": data.get("scope"),
                  "key": data["api_key"].pk if data.get("api_key") else None,
                  "agent": data["agent"].slug if data.get("agent") else None,
                  "user": data.get("user") or "", "unit": data.get("unit"),
                  "limit": data.get("limit_value"), "period": data.get("period"),
                  "soft_percent": data.get("soft_percent")}
        self.budget_fields = fields
        if not self.errors:  # the API's rules, said on the form (not a 500 when it saves)
            try:
                services.budget_save(budget=Budget.objects.filter(pk=self.instance.pk).first(),
                                     fields=fields, actor=None, commit=False)
            except GaiaError as exc:
                field = {"key": "api_key", "limit": "limit_value"}.get(exc.param or "",
                                                                      exc.param)
                self.add_error(field if field in self.fields else None, exc.message)
        return data


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    form = BudgetForm
    list_display = ["name", "scope", "unit", "limit_shown", "period", "spent_shown",
                    "soft_percent"]
    list_filter = ["scope", "period", "unit"]

    @admin.display(description="limit")
    def limit_shown(self, obj: Budget) -> Any:
        return selectors.budget_public(obj)["limit"]

    @admin.display(description="spent this period")
    def spent_shown(self, obj: Budget) -> Any:
        return selectors.budget_public(obj)["spent"]

    def save_model(self, request: HttpRequest, obj: Budget, form: Any, change: bool) -> None:
        actor = services.audit_actor_of_request(request, channel="admin")
        saved = services.budget_save(budget=Budget.objects.get(pk=obj.pk) if change else None,
                                     fields=form.budget_fields, actor=actor)
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Budget) -> None:
        services.budget_delete(budget=obj, actor=services.audit_actor_of_request(
            request, channel="admin"))
