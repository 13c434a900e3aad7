"""Writes of providers, shared by the console's API and the admin's form: credentials are
write-only (an empty secret keeps the stored one, ``clear`` removes it; an ``extra_headers``
value shown as ``[hidden]`` keeps the stored value)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from agents.kernel.exceptions import InvalidRequest
from agents.models import Provider, options_unmasked
from agents.services.audit import Actor, audit_record

PROVIDER_EDITABLE = ("name", "kind", "base_url", "api_key_env", "default_model",
                     "timeout_seconds", "max_concurrency", "options")


def provider_secrets_kept(provider: Provider, *, stored: Provider | None, api_key: str | None,
                          clear_api_key: bool = False) -> Provider:
    """Apply the write-only rules to ``provider`` (unsaved) against its ``stored`` row."""
    provider.options = options_unmasked(provider.options, stored.options if stored else {})
    if clear_api_key:
        provider.api_key_secret = ""
    elif api_key:
        provider.api_key_secret = api_key
    else:
        provider.api_key_secret = stored.api_key_secret if stored else ""
    return provider


@transaction.atomic
def provider_save(*, provider: Provider | None, fields: dict[str, Any],
                  api_key: str | None = None, clear_api_key: bool = False,
                  actor: Actor | None = None) -> Provider:
    """Create (``provider=None``) or change a provider from ``fields`` (those of
    :data:`PROVIDER_EDITABLE`); the model's own validation answers as a 400 naming the field."""
    stored = Provider.objects.select_for_update().get(pk=provider.pk) if provider else None
    before = {k: getattr(stored, k) for k in PROVIDER_EDITABLE} if stored else {}
    secret, options = (stored.api_key_secret, stored.options) if stored else ("", {})
    row = stored or Provider()
    for name, value in fields.items():
        if name in PROVIDER_EDITABLE:
            setattr(row, name, value)
    kept = Provider(api_key_secret=secret, options=options)
    provider_secrets_kept(row, stored=kept if stored else None, api_key=api_key,
                          clear_api_key=clear_api_key)
    try:
        row.full_clean(validate_unique=True)
    except ValidationError as exc:
        name, messages = next(iter(exc.message_dict.items()))
        raise InvalidRequest(f"{name}: {' '.join(messages)}",
                             param=None if name == "__all__" else name) from None
    row.save()  # the post_save signal renews the configuration stamp
    changed = sorted(k for k in fields if k in PROVIDER_EDITABLE and (
        not before or before[k] != getattr(row, k)))
    if api_key or clear_api_key:
        changed.append("api_key")
    audit_record(actor=actor, action="provider_update" if stored else "provider_create",
                 target=f"provider:{row.name}", detail={"fields": changed})
    return row
