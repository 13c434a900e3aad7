"""A core of its own for each server process (``GAIA_PIN_CORES``), on Linux.

A Gaia server process is one event loop and its database threads, and they hand the GIL to
each other on every turn. Left to float, the threads run on different cores and the GIL
(and every object it guards) moves between caches with each hand-over; pinned to one core,
the same turns cost about 30 % less CPU (``scripts/perf/chat.py --pin``: 5.25 -> 3.77 ms per
JSON turn on PostgreSQL with Redis). With ``gaia api start --workers N`` each worker takes a
different core: a lock file per core, held for the life of the process, says which are taken
(by any Gaia process of this user on the machine). A worker that finds none free floats.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
from pathlib import Path
from typing import IO

log = logging.getLogger("gaia.affinity")

_held: list[IO[str]] = []  # this process's core lock, open until it exits


def default_lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"gaia-cores-{os.getuid()}"


def pin_to_free_core(lock_dir: Path | None = None) -> int | None:
    """Pin every thread of this process (and the threads it starts later) to the first
    allowed core that no other process holds; return it, or ``None`` when none is free, the
    process may use a single core anyway, or the platform cannot pin."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    lock_dir = lock_dir or default_lock_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    for core in cores:
        handle = open(lock_dir / f"core-{core}.lock", "a")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held.append(handle)
        for task in os.listdir("/proc/self/task"):  # sched_setaffinity(0) sets one thread
            try:
                os.sched_setaffinity(int(task), {core})
            except OSError:  # a thread that ended meanwhile
                pass
        os.sched_setaffinity(0, {core})
        log.info("server process %d pinned to core %d", os.getpid(), core)
        return core
    log.info("no free core for server process %d: it floats", os.getpid())
    return None
