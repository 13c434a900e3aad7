"""How many client turns this process runs at once (``GAIA_MAX_TURNS_IN_FLIGHT``).

Past its capacity a server that queues every request makes every client wait: offered 256
connections, a Gaia process answered each in 1.4-1.9 s, 21x its time at 16 (issue 37), and a
client with a short timeout got nothing. So a turn beyond the limit is refused at once, before
any work is done for it, with :class:`~agents.kernel.exceptions.ServerOverloaded` (503, a
``Retry-After``, the dialect's own error body): the official SDKs retry it after a pause, a
load balancer sends it elsewhere, and the turns admitted keep their pace.

:func:`admit` is called by the one door (:func:`agents.turns.door.turn_open`), so every
interface that opens a client's turn (the ``/v1`` dialects, and those to come) is counted;
the turns a turn starts itself (a team's members, an agent's ``agent:<slug>`` calls), an
operator's inject and benchmark runs are not: a request admitted is never refused half-way,
and the operator can still act on an overloaded server. ``/health``, the feed and the operator
API open no turn and always answer.

A slot is released once, however the turn ends (:meth:`agents.turns.ending.TurnEnding.close`:
its reply stored, an error, a kill, a client gone mid-stream), or if opening it fails; a turn
dropped without ever being closed gives its slot back when it is collected.
"""

from __future__ import annotations

import threading

from django.conf import settings

from agents.kernel.exceptions import ServerOverloaded

RETRY_AFTER_SECONDS = 1  # a turn at capacity ends within about that (a JSON turn: ~0.1 s)

_lock = threading.Lock()  # turns close on their own loops (a benchmark worker's, the server's)
_in_flight = 0


class Slot:
    """One admitted turn's place; :meth:`release` gives it back (once)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = True

    def release(self) -> None:
        global _in_flight
        with _lock:
            if self._held:
                self._held = False
                _in_flight -= 1

    def __del__(self) -> None:  # a turn dropped without closing (an interface's bug)
        if self._held:
            self.release()


def admit() -> Slot:
    """A slot for one more turn, or :class:`ServerOverloaded` if the process runs
    ``GAIA_MAX_TURNS_IN_FLIGHT`` already (0: no limit)."""
    global _in_flight
    limit = settings.GAIA_MAX_TURNS_IN_FLIGHT
    with _lock:
        if 0 < limit <= _in_flight:
            raise ServerOverloaded(
                f"The server is running its limit of {limit} requests; try again shortly.",
                retry_after=RETRY_AFTER_SECONDS)
        _in_flight += 1
    return Slot()


def turns_in_flight() -> int:
    """How many admitted turns this process runs now."""
    return _in_flight
