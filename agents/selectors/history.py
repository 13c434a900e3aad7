"""A stateful thread's stored conversation, as its provider gets it.

A client that continues a thread by id sends only its new message, so every turn reads the
whole conversation back. Read naively, a turn on a 1,000-message thread cost 31 ms of CPU
against 4 ms for a new thread (issue 27, SQLite, ``scripts/perf/data_scale.py``): 80% of it
building model instances. The read takes plain columns, and each process keeps the
conversations it read lately (:data:`KEEP_MESSAGES` messages at most, least recently used
first out) and reads only the rows stored since.

Why that is safe: a turn reads under its thread's lease, once every earlier turn has ended
(or was recorded abandoned), and a stored message of an ended turn never changes again (no
interface edits one: the admin shows them read-only). Deleting messages bumps their thread's
``messages_removed`` (a database trigger, migration 0021), read with every read in the same
round trip, so a thread whose messages went away is read afresh (counting the thread's rows
instead read all of them every turn: 14 ms on a 12,000-message thread on PostgreSQL).
Each process reads the rows other processes stored since it last served the thread.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from typing import Any

from django.db import connection

from agents.infra.rows import rows_cursor
from agents.kernel import llm
from agents.models import Message, Thread

# Failed replies that said nothing are stored (the record) but not replayed to the provider.
FAILED_FINISHES = ("error", "client_disconnected", "interrupted")
KEEP_MESSAGES = 200_000  # per process, over every kept thread (~1 KB each: 200 MB at most)

_lock = threading.Lock()
# thread id -> (the stored rows read so far: seq of the next one; the thread's
# messages_removed then; the conversation they make)
_kept: OrderedDict[uuid.UUID, tuple[int, int | None, list[llm.Message]]] = OrderedDict()
_kept_messages = 0


def _rows_after(thread_id: uuid.UUID, upto: int, before: int | None
                ) -> tuple[int | None, list[tuple[Any, ...]]]:
    """The thread's ``messages_removed`` (``None``: no such thread) and its conversation's
    rows from the ``seq`` ``upto`` (to ``before``), in one round trip."""
    key = (connection.vendor, Message._meta.db_table)
    sql = _ROWS_SQL.get(key)
    if sql is None:
        qn = connection.ops.quote_name
        columns = ", ".join(qn(c) for c in ("seq", *Message.LLM_FIELDS, "finish_reason"))
        sql = _ROWS_SQL[key] = (  # names of ours, values as parameters
            f"SELECT -1, NULL, NULL, NULL, NULL, NULL, NULL, messages_removed "  # noqa: S608
            f"FROM {qn(Thread._meta.db_table)} WHERE id = %s UNION ALL SELECT {columns}, 0 "
            f"FROM {qn(Message._meta.db_table)} WHERE thread_id = %s AND NOT internal "
            "AND seq >= %s AND seq < %s ORDER BY 1")
    pk = Message._meta.get_field("thread").get_db_prep_value(thread_id, connection)
    with rows_cursor(connection) as cursor:
        cursor.execute(sql, [pk, pk, upto, SEQ_END if before is None else before])
        fetched = cursor.fetchall()
    if not fetched:  # no such thread (nor its messages)
        return None, []
    return fetched[0][7], [row[:7] for row in fetched[1:]]


_ROWS_SQL: dict[tuple[str, str], str] = {}
SEQ_END = 2**31 - 1  # past any message's seq (a PostgreSQL integer)


def thread_history(thread_id: uuid.UUID, *, before: int | None = None) -> list[llm.Message]:
    """The conversation ``thread_id`` holds, in order (its messages before the ``seq``
    ``before``, if given: a turn that stored its own first reads what came before them):
    without the agent's inner work and without failed replies that said nothing. Call it
    under the thread's lease."""
    global _kept_messages
    with _lock:
        kept = _kept.pop(thread_id, None)
        if kept is not None:
            _kept_messages -= len(kept[2])
    upto, removed, messages = kept if kept is not None else (0, None, [])
    if before is not None and upto > before:
        upto, removed, messages = 0, None, []
    now_removed, rows = _rows_after(thread_id, upto, before)
    if upto and now_removed != removed:  # rows went away: read it all again
        upto, messages = 0, []
        now_removed, rows = _rows_after(thread_id, 0, before)
    removed = now_removed
    messages = list(messages)
    for seq, role, content, parts, calls, call_id, finish in rows:
        upto = seq + 1
        if not (role == "assistant" and finish in FAILED_FINISHES and not content
                and not calls):
            messages.append(Message.llm_of(
                role, content, json.loads(parts) if isinstance(parts, str) else parts,
                json.loads(calls) if isinstance(calls, str) else calls, call_id))
    with _lock:
        _kept[thread_id] = (upto, removed, messages)
        _kept_messages += len(messages)
        while _kept_messages > KEEP_MESSAGES and _kept:
            _, (_, _, gone) = _kept.popitem(last=False)
            _kept_messages -= len(gone)
    return list(messages)
