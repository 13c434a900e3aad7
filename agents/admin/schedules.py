"""The admin's page of schedules: saved and deleted through :mod:`agents.services.schedules`
(the API's rules, the beat's periodic task kept in step, the audit); how each last ran is
read, never edited here."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from agents import services
from agents.kernel.exceptions import GaiaError
from agents.models import Schedule

FORM_FIELDS = ["name", "enabled", "cron", "timezone", "kind", "agent", "prompt", "thread_mode",
               "suite", "targets"]


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    fields = {f: data.get(f) for f in FORM_FIELDS}
    fields["agent"] = data["agent"].slug if data.get("agent") else None
    fields["thread"] = fields.pop("thread_mode") or Schedule.ThreadMode.NEW
    fields["targets"] = data.get("targets") or []
    return fields


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = FORM_FIELDS

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.errors:  # the API's rules, said on the form
            try:
                services.schedule_save(
                    schedule=Schedule.objects.filter(pk=self.instance.pk).first(),
                    fields=_fields(data), actor=None, commit=False)
            except GaiaError as exc:
                field = {"thread": "thread_mode"}.get(exc.param or "", exc.param)
                self.add_error(field if field in self.fields else None, exc.message)
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ["name", "enabled", "cron", "timezone", "kind", "agent", "last_status",
                    "last_run_at", "run_count"]
    list_filter = ["enabled", "kind", "last_status"]
    search_fields = ["name", "prompt", "suite"]
    readonly_fields = ["thread", "last_run_id", "last_fired_for", "last_run_at", "last_status",
                       "last_error", "run_count"]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # one by one: each with its periodic task
        return actions

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        saved = services.schedule_save(
            schedule=Schedule.objects.filter(pk=obj.pk).first() if change else None,
            fields=_fields(form.cleaned_data),
            actor=services.audit_actor_of_request(request, channel="admin"))
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        services.schedule_delete(schedule=obj, actor=services.audit_actor_of_request(
            request, channel="admin"))
