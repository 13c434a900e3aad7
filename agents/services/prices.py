"""What a turn costs: the price of the model that answered, from an admin's price
(:class:`agents.models.ModelPrice`) over the table shipped in the ``genai-prices`` wheel (read
from the wheel, never downloaded: ``update_prices`` is not called), and ``0`` for the embedded
and fake models unless priced. A model with no price is *unknown*: its turns say so instead of
counting 0.

Prices are read once per provider and model while the configuration stamp is unchanged
(a price's save renews it): ``genai-prices`` takes 0.16 ms a look-up and its ``calc_price``
0.2 ms (measured), more than the whole budget check may cost, so a turn multiplies two
integers instead."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction

from agents.kernel.exceptions import NotFound
from agents.models import ModelPrice, Provider
from agents.models.spend import NANOS, dollars_of
from agents.selectors.access import access_cache_latest
from agents.services.audit import Actor, audit_record

log = logging.getLogger("gaia.prices")

MTOK = 1_000_000


@dataclass(frozen=True)
class Price:
    """Nano-dollars per million tokens, and where the price comes from."""

    input: int
    output: int
    cached_input: int
    source: str  # "admin", "genai-prices", "free: <kind>"
    # A shipped price that changes past a prompt length (genai-prices' TieredPrices): costed
    # by the table itself (0.2 ms); its base rates stand in the fields above.
    tiered: Any = field(default=None, compare=False)

    def cost_nanos(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> int:
        if self.tiered is not None:
            from genai_prices import Usage

            total = self.tiered.calc_price(Usage(
                input_tokens=input_tokens, output_tokens=output_tokens,
                cache_read_tokens=cached_tokens or None))["total_price"]
            return int((Decimal(total) * NANOS).to_integral_value())
        fresh = max(0, input_tokens - cached_tokens)
        total = fresh * self.input + cached_tokens * self.cached_input
        total += output_tokens * self.output
        return (total + MTOK // 2) // MTOK  # rounded half up, to the nano-dollar

    def public(self) -> dict[str, Any]:
        per = Decimal(NANOS)
        return {"input_per_mtok": str(Decimal(self.input) / per),
                "output_per_mtok": str(Decimal(self.output) / per),
                "cached_input_per_mtok": str(Decimal(self.cached_input) / per),
                "source": self.source}


UNKNOWN = "unknown"
_lock = threading.Lock()


def _nanos(dollars: Any) -> int:
    return int((Decimal(str(dollars)) * NANOS).to_integral_value())


def _shipped(provider: Provider, model: str) -> Price | None:
    """The ``genai-prices`` table's price (its flat rates; a tiered price is left unknown)."""
    from genai_prices import Usage, calc_price

    args: dict[str, Any] = {"provider_id": "openai"}
    if provider.kind == Provider.Kind.ANTHROPIC:
        args = {"provider_id": "anthropic"}
    elif provider.base_url:
        args = {"provider_api_url": provider.base_url}
    try:
        found = calc_price(Usage(input_tokens=0, output_tokens=0), model_ref=model, **args)
    except LookupError:
        return None
    except Exception:  # a malformed entry must not fail a turn
        log.warning("genai-prices failed for %s/%s", provider.name, model, exc_info=True)
        return None
    mp = found.model_price
    rates = [getattr(mp, name, None) for name in ("input_mtok", "output_mtok", "cache_read_mtok")]
    tiered = any(hasattr(r, "base") for r in rates)
    inp, out, cached = (_nanos(getattr(r, "base", r)) if r is not None else None for r in rates)
    return Price(inp or 0, out or 0, (inp or 0) if cached is None else cached,
                 f"genai-prices: {found.provider.id}/{found.model.id}"[:60],
                 tiered=mp if tiered else None)


def price_lookup(*, provider: Provider, model: str) -> Price | None:
    """The price of ``model`` on ``provider`` (uncached; :func:`price_of` caches it)."""
    rows = {r.model: r for r in ModelPrice.objects.filter(provider=provider,
                                                         model__in=[model, ""])}
    row = rows.get(model) or rows.get("")
    if row is not None:
        cached = row.cached_input_per_mtok
        return Price(_nanos(row.input_per_mtok), _nanos(row.output_per_mtok),
                     _nanos(cached if cached is not None else row.input_per_mtok), "admin")
    if provider.kind in (Provider.Kind.FAKE, Provider.Kind.LOCAL):
        return Price(0, 0, 0, f"free: {provider.kind}")
    return _shipped(provider, model)


def price_of(*, provider_name: str, model: str) -> Price | None:
    """:func:`price_lookup` for the provider named ``provider_name``, read once per stamp.
    Call on a database thread."""
    cache = access_cache_latest()
    prices = cache.prices
    key = (provider_name, model)
    if key in prices:
        return prices[key]
    provider = Provider.objects.filter(name=provider_name).first()
    found = price_lookup(provider=provider, model=model) if provider is not None else None
    with _lock:
        prices[key] = found
    return found


def turn_cost(*, provider_name: str, model: str, input_tokens: int, output_tokens: int
              ) -> tuple[int | None, str]:
    """``(nano-dollars, source)`` of a turn; ``(None, "unknown")`` when no price is known
    and tokens were used. A turn that used no tokens cost nothing, whatever its model."""
    if not input_tokens and not output_tokens:
        return 0, ""
    price = price_of(provider_name=provider_name, model=model) if provider_name else None
    if price is None:
        return None, UNKNOWN
    return price.cost_nanos(input_tokens, output_tokens), price.source


def cost_decimal(nanos: int | None) -> Decimal | None:
    return None if nanos is None else dollars_of(nanos)


PRICE_FIELDS = ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok")


def price_set(*, provider: Provider, model: str, fields: dict[str, Any], actor: Actor | None
              ) -> ModelPrice:
    """Set an admin's price for ``provider``'s ``model`` (blank: all its models), audited;
    every process prices with it from its next turn (the save renews the stamp)."""
    with transaction.atomic():
        row, created = ModelPrice.objects.update_or_create(
            provider=provider, model=model,
            defaults={f: fields.get(f) for f in PRICE_FIELDS if f in fields or
                      f == "cached_input_per_mtok"})
        audit_record(actor=actor, action="price_set", target=f"provider:{provider.name}",
                     detail={"model": model, "created": created,
                             **{f: str(getattr(row, f)) for f in PRICE_FIELDS}})
    return row


def price_delete(*, provider: Provider, model: str, actor: Actor | None) -> None:
    with transaction.atomic():
        done, _ = ModelPrice.objects.filter(provider=provider, model=model).delete()
        if not done:
            raise NotFound(f"No price set for {provider.name}/{model or '*'}.",
                           code="price_not_found")
        audit_record(actor=actor, action="price_delete", target=f"provider:{provider.name}",
                     detail={"model": model})
