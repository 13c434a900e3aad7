"""Stop and start the organism (``POST /api/v1/organism/stop`` and ``/start``, reference 003).

Stopped, no process opens a new turn: every ``/v1`` dialect answers 503
(``organism_stopped``) with ``Retry-After`` in its own error body, and an operator's inject is
refused the same way. The state lives on the configuration stamp's row and stopping renews
the stamp, so every process on every machine sees it on its next request, as it does a
paused agent. Turns already running finish; those still running ``grace_seconds`` after the
stop are killed through the kill path (:func:`agents.services.thread_kill`: their partial
reply kept, the thread ``killed``), by the process that took the stop (if it goes down
before, the running turns are left to finish). The operator API, the feed and ``/health``
keep answering."""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from agents import selectors
from agents.models import ConfigStamp, Thread
from agents.outlet import events, realtime
from agents.selectors.access import OrganismState
from agents.services.audit import Actor, audit_record
from agents.services.config import config_changed
from agents.services.control import thread_kill

log = logging.getLogger("gaia.organism")

ORGANISM_STOPPED_RETRY_AFTER = 30  # seconds: what a turn refused while stopped is told to wait
STOP_GRACE_SECONDS = 30  # default: how long running turns may finish before they are killed
STOP_GRACE_MAX = 3600


@transaction.atomic
def organism_set_stopped(*, stopped: bool, actor: Actor | None,
                         grace_seconds: float = STOP_GRACE_SECONDS) -> OrganismState:
    """Stop (no new turn anywhere; running turns killed after ``grace_seconds``) or start
    the organism again. Idempotent: stopping a stopped organism keeps its ``since`` and
    ``by`` (and schedules no second kill), starting a running one changes nothing."""
    current = selectors.organism_state()
    if current.stopped == stopped:
        return current
    now = timezone.now()
    by = actor.label if actor is not None else "system"
    config_changed(reason="organism_stopped" if stopped else "organism_started")
    ConfigStamp.objects.filter(pk=1).update(
        organism_stopped=stopped, organism_state_at=now, organism_state_by=by[:320])
    state = OrganismState(stopped=stopped, since=now, by=by)
    realtime.send_event_on_commit(events.organism_state(
        state="stopped" if stopped else "running", since=now.isoformat(), by=by,
        grace_seconds=grace_seconds if stopped else None))
    audit_record(actor=actor, action="stop" if stopped else "start", target="organism",
                 detail={"grace_seconds": grace_seconds} if stopped else {})
    if stopped:
        transaction.on_commit(lambda: _grace_schedule(grace_seconds, since=now, actor=actor))
    return state


def _grace_schedule(grace_seconds: float, *, since: datetime, actor: Actor | None) -> None:
    timer = threading.Timer(grace_seconds, _grace_expired, kwargs={"since": since,
                                                                   "actor": actor})
    timer.daemon = True
    timer.name = "gaia-organism-stop-grace"
    timer.start()


def _grace_expired(*, since: datetime, actor: Actor | None) -> None:
    """Kill the turns still running, if the organism is still stopped by the same stop."""
    close_old_connections()
    try:
        killed = organism_running_turns_kill(since=since, actor=actor)
        if killed:
            log.info("organism stop: grace over, %d running turn(s) killed", killed)
    except Exception:  # a timer thread has nobody to raise to
        log.exception("organism stop: killing the running turns failed")
    finally:
        connection.close()


def organism_running_turns_kill(*, since: datetime, actor: Actor | None) -> int:
    """Kill every thread whose turn holds its lease now (the stop's grace is over), unless the
    organism was started (or stopped anew) since ``since``. Returns how many."""
    state = selectors.organism_state()
    if not state.stopped or state.since != since:
        return 0
    now = timezone.now()
    running = Thread.objects.select_related("agent").filter(lock_expires_at__gt=now)
    n = 0
    for thread in running:
        thread_kill(thread=thread, actor=actor)
        n += 1
    return n
