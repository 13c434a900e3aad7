"""GAIA_PIN_CORES: each server process takes a core no other holds, with all its threads,
and gives it back when it exits (gaia_site/affinity.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A process that starts a thread, pins itself, reports the core and every thread's affinity,
# then holds its core until its standard input closes.
CHILD = """
import json, os, sys, threading
from pathlib import Path
from gaia_site.affinity import pin_to_free_core
started = threading.Event()
threading.Thread(target=lambda: (started.set(), sys.stdin.read()), daemon=True).start()
started.wait()
core = pin_to_free_core(Path(sys.argv[1]))
later = {}
t = threading.Thread(target=lambda: later.update(a=sorted(os.sched_getaffinity(0))))
t.start(); t.join()
threads = {}
for tid in os.listdir("/proc/self/task"):
    try:
        threads[tid] = sorted(os.sched_getaffinity(int(tid)))
    except ProcessLookupError:  # a joined thread can linger in /proc a moment after join
        pass
print(json.dumps({"core": core, "threads": threads, "later": later["a"]}), flush=True)
sys.stdin.read()
"""

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")


def start(lock_dir: Path) -> tuple[subprocess.Popen[str], dict]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(lock_dir)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def test_each_process_takes_a_free_core_with_all_its_threads(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("pinning needs two cores")
    procs, got = [], []
    try:
        for _ in cores:
            proc, report = start(tmp_path)
            procs.append(proc)
            core = report["core"]
            got.append(core)
            assert len(report["threads"]) >= 2  # the main thread and the earlier one
            assert all(a == [core] for a in report["threads"].values())  # the earlier thread too
            assert report["later"] == [core]  # and threads started after
        assert sorted(got) == cores  # a core each
        extra, report = start(tmp_path)  # every core is taken: this one floats
        procs.append(extra)
        assert report["core"] is None
        assert report["later"] == cores
    finally:
        for proc in procs:
            proc.communicate("")
    again, report = start(tmp_path)  # the exits gave the cores back
    again.communicate("")
    assert report["core"] == cores[0]
