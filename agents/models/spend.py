"""Money and limits: the prices admins set over the shipped price table, and budgets that hold
under concurrency (``agents.services.budgets``).

Amounts are integers: money in nano-dollars (10^-9 USD), so that sums in SQL are exact on both
databases (SQLite's decimal is a float), tokens as tokens. A budget's ``spent`` and
``reserved`` are changed only by single conditional ``UPDATE`` statements, never read then
written."""

from __future__ import annotations

from decimal import Decimal

from django.db import models

NANOS = 1_000_000_000  # nano-dollars per dollar
MONEY_PLACES = Decimal("0.000000001")


def nanos_of(dollars: Decimal) -> int:
    return int((Decimal(dollars) * NANOS).to_integral_value())


def dollars_of(nanos: int) -> Decimal:
    return (Decimal(nanos) / NANOS).quantize(MONEY_PLACES)


class ModelPrice(models.Model):
    """An admin's price for a provider's model, over the shipped table (``genai-prices``).
    A blank model prices every model of the provider that has no row of its own."""

    provider = models.ForeignKey("agents.Provider", on_delete=models.CASCADE,
                                 related_name="prices")
    model = models.CharField(max_length=200, blank=True,
                             help_text="The upstream model; blank: every model of the provider.")
    input_per_mtok = models.DecimalField(
        "input, USD per million tokens", max_digits=12, decimal_places=6)
    output_per_mtok = models.DecimalField(
        "output, USD per million tokens", max_digits=12, decimal_places=6)
    cached_input_per_mtok = models.DecimalField(
        "cached input, USD per million tokens", max_digits=12, decimal_places=6, null=True,
        blank=True, help_text="Blank: cached input is priced as input.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "model"],
                                               name="model_price_unique")]
        ordering = ["provider__name", "model"]

    def __str__(self) -> str:
        return f"{self.provider_id}/{self.model or '*'}"


class Budget(models.Model):
    class Scope(models.TextChoices):
        KEY = "key"
        AGENT = "agent"
        USER = "user"  # an end user, as the key that names them (or every trusting key)
        GLOBAL = "global"

    class Unit(models.TextChoices):
        USD = "usd"
        TOKENS = "tokens"

    class Period(models.TextChoices):
        DAY = "day"
        MONTH = "month"
        TOTAL = "total"

    name = models.CharField(max_length=100, unique=True)
    scope = models.CharField(max_length=10, choices=Scope.choices)
    api_key = models.ForeignKey("agents.ApiKey", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="budgets")
    agent = models.ForeignKey("agents.Agent", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="budgets")
    user = models.CharField(max_length=300, blank=True,
                            help_text="The end user (scope user), as clients name them.")
    unit = models.CharField(max_length=10, choices=Unit.choices)
    limit = models.BigIntegerField(help_text="Nano-dollars (usd) or tokens.")
    period = models.CharField(max_length=10, choices=Period.choices)
    soft_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The feed hears budget_threshold once a period when "
        "spend reaches this percent of the limit.")
    # The period being counted: spent and reserved belong to it; the first reservation of a
    # later period starts it afresh (in the same statement).
    period_start = models.DateTimeField()
    spent = models.BigIntegerField(default=0)
    reserved = models.BigIntegerField(default=0, help_text="Held by the turns running now.")
    threshold_period = models.DateTimeField(null=True, blank=True, editable=False)
    exceeded_period = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
