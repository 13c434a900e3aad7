"""A stateful thread's stored conversation, as its provider gets it.

A client that continues a thread by id sends only its new message, so every turn reads the
whole conversation back. Read naively, a turn on a 1,000-message thread cost 31 ms of CPU
against 4 ms for a new thread (issue 27, SQLite, ``scripts/perf/data_scale.py``): 80% of it
building model instances. The read takes plain columns, and each process keeps the
conversations it read lately (:data:`KEEP_MESSAGES` messages at most, least recently used
first out) and reads only the rows stored since.

Why that is safe: a turn reads under its thread's lease, once every earlier turn has ended
(or was recorded abandoned), and a stored message of an ended turn never changes again (no
interface edits one: the admin shows them read-only). A row count of the part already held
is checked on every read (one indexed count), so a thread whose messages went away is read
afresh. Each process reads the rows other processes stored since it last served the thread.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

from agents import llm
from agents.models import Message

# Failed replies that said nothing are stored (the record) but not replayed to the provider.
FAILED_FINISHES = ("error", "client_disconnected", "interrupted")
KEEP_MESSAGES = 200_000  # per process, over every kept thread (~1 KB each: 200 MB at most)

_lock = threading.Lock()
# thread id -> (the stored rows read so far: seq of the next one, how many were not inner
# work, the conversation they make)
_kept: OrderedDict[uuid.UUID, tuple[int, int, list[llm.Message]]] = OrderedDict()
_kept_messages = 0


def thread_history(thread_id: uuid.UUID) -> list[llm.Message]:
    """The conversation ``thread_id`` holds, in order: without the agent's inner work and
    without failed replies that said nothing. Call it under the thread's lease."""
    global _kept_messages
    with _lock:
        kept = _kept.pop(thread_id, None)
        if kept is not None:
            _kept_messages -= len(kept[2])
    upto, rows_seen, messages = kept if kept is not None else (0, 0, [])
    stored = Message.objects.filter(thread_id=thread_id, internal=False)
    if upto and stored.filter(seq__lt=upto).count() != rows_seen:
        upto, rows_seen, messages = 0, 0, []  # rows went away: read it all again
    rows = (stored.filter(seq__gte=upto).order_by("seq")
            .values_list("seq", *Message.LLM_FIELDS, "finish_reason"))
    messages = list(messages)
    for seq, role, content, parts, calls, call_id, finish in rows:
        upto, rows_seen = seq + 1, rows_seen + 1
        if not (role == "assistant" and finish in FAILED_FINISHES and not content
                and not calls):
            messages.append(Message.llm_of(role, content, parts, calls, call_id))
    with _lock:
        _kept[thread_id] = (upto, rows_seen, messages)
        _kept_messages += len(messages)
        while _kept_messages > KEEP_MESSAGES and _kept:
            _, (_, _, gone) = _kept.popitem(last=False)
            _kept_messages -= len(gone)
    return list(messages)

