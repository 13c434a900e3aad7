"""A streaming reply's checkpoints: its text so far, written to its thread as it grows, so that
a server process that dies mid-turn (``kill -9``, the OOM killer, a power cut) leaves what its
client had already read. The next process records the turn as interrupted with that text
(``services.thread_leases_sweep`` at its start, or the next turn on the thread).

The cost is bounded whatever the provider's pace: a write when ``GAIA_REPLY_CHECKPOINT_SECONDS``
have passed since the last one, or sooner once the text grew by
``GAIA_REPLY_CHECKPOINT_CHARS`` characters; never per token, never two at once for one turn
(while one runs, the text goes on growing and the first event after it ends writes it). Each
is one ``UPDATE`` of one column by primary key (:func:`services.thread_reply_checkpoint`), on
a database thread: the stream never waits for it. The turn's final record empties it as part
of its own write. ``GAIA_REPLY_CHECKPOINT_SECONDS=0`` turns checkpoints off;
``scripts/perf/checkpoint.py`` measures what they cost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.conf import settings

from agents import services
from agents.infra.database import run_db
from agents.kernel import llm
from agents.turns.reply import storable

log = logging.getLogger("gaia.turns")


class Checkpoint:
    """The checkpoints of one turn's reply (:class:`agents.turns.runtime.Turn` offers it each
    event it absorbed)."""

    def __init__(self) -> None:
        self.every = float(settings.GAIA_REPLY_CHECKPOINT_SECONDS)
        self.chars = int(settings.GAIA_REPLY_CHECKPOINT_CHARS)
        self.at = time.monotonic()  # when the last write was started (or the turn began)
        self.grown = 0  # characters of text since then
        self.writes = 0
        self._writing: asyncio.Future[bool] | None = None

    def due(self, now: float) -> bool:
        """Whether the text gained since the last write is due to be written at ``now``."""
        return self.grown > 0 and (self.grown >= self.chars or now - self.at >= self.every)

    def offer(self, turn: Any, event: Any) -> None:
        """``turn`` absorbed ``event``: write the reply's text so far if it is due (and the
        turn holds its thread's lease)."""
        if self.every <= 0 or not isinstance(event, llm.TextDelta):
            return
        grown = self.grown = self.grown + len(event.text)
        now = time.monotonic()
        # due(now), inline: this runs for every token of every reply.
        if not grown or (grown < self.chars and now - self.at < self.every) or (
                turn.start is None or not turn.lease_token) or (
                self._writing is not None and not self._writing.done()):
            return
        self.at, self.grown = now, 0
        self.writes += 1
        self._writing = asyncio.ensure_future(run_db(
            services.thread_reply_checkpoint, thread_id=turn.start.thread_id,
            lock_token=turn.lease_token, text=storable("".join(turn.reply.text))))
        self._writing.add_done_callback(_logged)


def _logged(write: asyncio.Future[bool]) -> None:
    """A checkpoint that failed costs the turn nothing: the next one, or the final record,
    writes the text again."""
    if not write.cancelled() and write.exception() is not None:
        log.warning("could not write a reply checkpoint: %s", write.exception())
