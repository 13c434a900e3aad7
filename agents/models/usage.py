"""Usage over time: a roll-up of finished turns, one row per (bucket, agent, key, upstream
model, error kind), kept as each turn's reply is stored (``agents.services.usage``).

Why a roll-up and not queries over ``Message``: at 1,000,000 stored messages a 7-day
summary over the messages themselves reads every reply of the week (hundreds of thousands
of rows, on both databases, whatever the index), while the roll-up reads a few thousand
hourly and 6-hourly rows (``scripts/perf/usage.py`` prints both). Percentiles survive the roll-up as
histograms: each row counts its turns' time to first token and duration in fixed,
log-spaced bins (:data:`BIN_EDGES_MS`), so a percentile read from the sums of many rows is
exact to within one bin (a factor of :data:`BIN_RATIO`).
"""

from __future__ import annotations

import math

from django.db import models

# Bins of milliseconds: bin 0 holds [0, 10), bin i holds [10 * 1.5**(i-1), 10 * 1.5**i), the
# last one everything from 10 * 1.5**30 ms (about 32 minutes) up.
BINS = 32
BIN_BASE_MS = 10.0
BIN_RATIO = 1.5
BIN_EDGES_MS = [0.0] + [BIN_BASE_MS * BIN_RATIO ** i for i in range(BINS - 1)]

# The granularities stored: a window is read as whole 6-hour spans, then the hours and minutes
# at its edges (a week: 27 or so 6-hour rows per group and up to 10 hours, not 168 hours).
# 6 hours, not a day: ``span`` is a small integer on PostgreSQL (at most 32,767), and
# widening it would rewrite the table.
SPAN_MINUTE = 60
SPAN_HOUR = 3600
SPAN_6H = 21600
SPANS = (SPAN_MINUTE, SPAN_HOUR, SPAN_6H)


def usage_bin(ms: float) -> int:
    """The histogram bin of a duration of ``ms`` milliseconds."""
    if ms < BIN_BASE_MS:
        return 0
    return min(BINS - 1, 1 + int(math.floor(math.log(ms / BIN_BASE_MS, BIN_RATIO) + 1e-9)))


def usage_bin_value(index: int) -> float:
    """The value a percentile falling in bin ``index`` is reported as: the bin's geometric
    middle (the last, open bin: its lower edge)."""
    if index == 0:
        return BIN_BASE_MS / 2
    low = BIN_EDGES_MS[index]
    if index == BINS - 1:
        return low
    return math.sqrt(low * low * BIN_RATIO)


TTFT_COLUMNS = [f"ttft_{i}" for i in range(BINS)]
DURATION_COLUMNS = [f"duration_{i}" for i in range(BINS)]


class UsageBucket(models.Model):
    class Shape(models.IntegerChoices):
        # Each turn is counted in four shapes of row, so the common reads stay small: the
        # dashboard's series reads TOTAL rows (one per bucket and error kind), its per-agent
        # and per-model tables AGENT_MODEL rows, its per-key table KEY rows; a key filter
        # (or a per-key table under an agent or model filter) reads the FULL rows, narrowed
        # by the filter. Minute rows come in two shapes only, FULL and TOTAL (a window's
        # minutes are its edges, few enough to read in full): STORED. Only FULL minute rows
        # are needed to derive all the others (agents.services.usage.usage_derive).
        FULL = 0, "agent, key, model"
        AGENT_MODEL = 1, "agent and model (all keys)"
        KEY = 2, "key (all agents and models)"
        TOTAL = 3, "all agents, keys and models"

    span = models.PositiveSmallIntegerField(help_text="The bucket's length in seconds.")
    shape = models.PositiveSmallIntegerField(choices=Shape.choices)
    start = models.DateTimeField()
    # Plain ids, not foreign keys: a deleted agent's or key's usage stays, and the conflict
    # target needs no NULL. 0: all agents (KEY rows); 0: no key, or all keys (AGENT_MODEL).
    agent_id = models.PositiveIntegerField(default=0)
    key_id = models.PositiveIntegerField(default=0, help_text="The API key's id (0: none).")
    model = models.CharField(max_length=200, blank=True, help_text="The upstream model.")
    error_kind = models.CharField(
        max_length=40, blank=True,
        help_text="Blank: the turns succeeded; else how they failed (the reply's finish "
        "reason: error, client_disconnected, interrupted, killed).")
    requests = models.BigIntegerField(default=0, db_default=0)
    input_tokens = models.BigIntegerField(default=0, db_default=0)
    output_tokens = models.BigIntegerField(default=0, db_default=0)
    cost_nanos = models.BigIntegerField(default=0, db_default=0,
                                        help_text="The priced turns' cost, nano-dollars.")
    unpriced = models.BigIntegerField(default=0, db_default=0,
                                      help_text="Turns with tokens whose price is unknown.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["span", "shape", "start", "agent_id", "key_id", "model", "error_kind"],
                name="usage_bucket_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} +{self.span}s {self.agent_id}/{self.model}"


# The shapes stored at each span; a read of another shape at that span reads FULL rows.
STORED = {SPAN_MINUTE: (UsageBucket.Shape.FULL, UsageBucket.Shape.TOTAL),
          SPAN_HOUR: tuple(UsageBucket.Shape), SPAN_6H: tuple(UsageBucket.Shape)}


def usage_stored_shape(shape: int, span: int) -> int:
    """The shape to read for ``shape`` at ``span``: itself if stored, else FULL."""
    return shape if shape in STORED[span] else UsageBucket.Shape.FULL


for _column in TTFT_COLUMNS + DURATION_COLUMNS:
    UsageBucket.add_to_class(_column, models.IntegerField(default=0, db_default=0))


class UserUsage(models.Model):
    """Usage per end user (the ``user`` a client names, scoped by its key: ``key_id``), per
    hour and per day (``span``, seconds): a row per (span, start, key, user, agent) with
    turns, written in the statement that stores the reply (``agents.services.usage``). Apart
    from :class:`UsageBucket` so that the common reads never see a user, and a turn without
    one writes nothing here. The day rows are for long ranges: 30 days of hours was 360,000
    rows at 1,000,000 messages and 1,000 users, summed in 120 ms (scripts/perf/usage.py)."""

    HOUR, DAY = 3600, 86400

    span = models.PositiveIntegerField(default=3600, db_default=3600)
    start = models.DateTimeField()
    key_id = models.PositiveIntegerField()
    user = models.CharField(max_length=300)
    agent_id = models.PositiveIntegerField(default=0)
    requests = models.BigIntegerField(default=0, db_default=0)
    input_tokens = models.BigIntegerField(default=0, db_default=0)
    output_tokens = models.BigIntegerField(default=0, db_default=0)
    cost_nanos = models.BigIntegerField(default=0, db_default=0)
    unpriced = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["span", "start", "key_id", "user", "agent_id"], name="user_usage_span_unique")]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:00} ({self.span} s) key {self.key_id} {self.user}"
