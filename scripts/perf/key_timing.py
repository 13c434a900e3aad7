#!/usr/bin/env python3
"""Can a client tell a known key prefix from an unknown one by the time a 401 takes?

Starts a real Gaia server on a throwaway SQLite data dir (or DATABASE_URL), creates one key,
then sends ``--requests`` GET /v1/models with a wrong key of each kind, interleaved: an
unknown prefix, and the known prefix with a wrong secret. Prints the median and p90 of each
and their difference (issue 17 item 12: 4.2 ms against 2.7 ms before keys were all loaded).

  .venv/bin/python -m scripts.perf.key_timing [--requests 400]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from scripts.perf.soak import Server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gaia-keys-") as tmp:
        env = {**os.environ, "GAIA_DATA_DIR": tmp}
        os.environ.update(env)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from agents.services import api_key_create

        for i in range(50):  # a few keys, as a real installation has
            api_key_create(name=f"k{i}")
        _, secret = api_key_create(name="target")
        prefix, rest = secret[:13], secret[14:]
        wrong = {"known prefix, wrong secret": f"{prefix}_{rest[::-1]}",
                 "unknown prefix": f"gaia_{'0' * 8}_{rest}"}
        server = Server(Path(tmp), env)
        server.start()
        times: dict[str, list[float]] = {k: [] for k in wrong}
        try:
            with httpx.Client(base_url=server.base) as client:
                for _ in range(20):  # warm up
                    for raw in wrong.values():
                        client.get("/v1/models", headers={"x-api-key": raw})
                for _ in range(args.requests):
                    for kind, raw in wrong.items():
                        t0 = time.perf_counter()
                        r = client.get("/v1/models", headers={"x-api-key": raw})
                        times[kind].append((time.perf_counter() - t0) * 1000)
                        assert r.status_code == 401, r.text
        finally:
            server.stop()
    print(f"\n401 latency of GET /v1/models, {args.requests} requests each, interleaved\n")
    for kind, values in times.items():
        values.sort()
        print(f"  {kind:28} median {statistics.median(values):6.3f} ms   "
              f"p90 {values[int(len(values) * 0.9)]:6.3f} ms")
    a, b = (statistics.median(v) for v in times.values())
    print(f"  difference of medians        {abs(a - b):6.3f} ms")


if __name__ == "__main__":
    main()
