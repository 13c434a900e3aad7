"""A streaming reply's checkpoints: its text so far, kept on its thread while its turn holds
the thread's lease (:mod:`agents.turns.checkpoint` decides when), so that a turn whose server
process died is recorded with what its client had already read
(``leases.thread_record_abandoned``)."""

from __future__ import annotations

import uuid

from django.db import connection, transaction

from agents.infra.rows import rows_update
from agents.models import Thread


def thread_reply_checkpoint(*, thread_id: uuid.UUID, lock_token: str, text: str) -> bool:
    """Keep ``text`` as the reply so far of the turn that holds ``thread_id``'s lease
    ``lock_token``: one ``UPDATE`` of one column by primary key. Nothing is written once the
    lease has moved on (the turn was recorded, or a newer turn holds the thread), so a late
    checkpoint never overwrites another turn's. Idempotent. Returns whether it was kept.

    On PostgreSQL the commit does not wait for the write-ahead log to reach the disk
    (``synchronous_commit = off`` for this transaction only): a checkpoint guards against the
    server process dying, not the database, and the wait was most of its cost (3.5-4.5 ms of
    a database thread, against 0.5-0.8 ms; ``scripts/perf/turn_writes.py``)."""
    where, values = {"id": thread_id, "lock_token": lock_token}, {"partial_reply": text}
    if connection.vendor != "postgresql":
        return rows_update(Thread, where=where, values=values) == 1
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO OFF")
        return rows_update(Thread, where=where, values=values) == 1
