#!/usr/bin/env python3
"""Issue 35's attacks on the event loop, each while an independent poller watches: how long a
bystander waits while one client's request does as much work as it can make Gaia do.

The poller is a thread of this process with its own connection: ``GET /health`` then a
one-line chat to the ``bystander`` agent, again every 50 ms. Per attack it prints the
attack's time and outcome and the poller's worst latency of each (the issue's bound: 250 ms).

Attacks (agents on the ``fake`` provider, whose ``script`` makes the calls a model told by the
user would make):

* ``calc-round``: the calculator's ``round(1, -10**7)`` (8.1 s on 026b68b);
* ``calc-factorial``: ``factorial(1000)**1000`` (1 s);
* ``calc-8-factorials``: a round of 8 of them (7 s);
* ``calc-500-calls``: a round of 500 calculator calls;
* ``kb-20k``, ``kb-100k``, ``kb-1m``: a chat of 20 KB, 100 KB, 1 MB to an agent with a
  knowledge base (``--passages`` passages; 4.4 s, 12.5 s, 25.5 s);
* ``kb-search-125k``: ``knowledge_search`` with a 125,000-word query (31 s); its model is a
  fake OpenAI-compatible upstream in this process (``tests/fakes/openai_upstream.py``) when
  the script starts its own server, else the ``fake`` provider, whose own work on a 1 MB tool
  call (in the server) then shows in the figures;
* ``fan-out``: an agent that delegates ``--fan`` calls a round to one that does the same, three
  levels deep (fan 10: 1,111 threads, a bystander held 7 s).

  .venv/bin/python -m scripts.perf.attacks                # a throwaway server (SQLite, or
                                                          # DATABASE_URL's database)
  .venv/bin/python -m scripts.perf.attacks --setup-only   # create the agents in the database
                                                          # of GAIA_DATA_DIR / DATABASE_URL,
                                                          # print a key
  .venv/bin/python -m scripts.perf.attacks --url http://127.0.0.1:8000 --key KEY
  [--only calc-round,kb-1m] [--timeout 60] [--passages 2000] [--fan 10]

Each attack is given ``--timeout`` seconds (the client gives up; a server that does not will
show in the next attack's figures). About a minute on a 2-core machine once set up.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from scripts.perf.harness import ROOT, free_port, wait_port

BOUND_MS = 250.0
POLL_SECONDS = 0.05
VOCABULARY = [f"{a}{b}{c}" for a in ("bri", "cal", "dun", "fer", "gol", "hav", "kir", "lom")
              for b in ("ad", "en", "ix", "or", "ul", "ym")
              for c in ("bek", "dor", "fip", "gan", "lut", "mor", "nep", "qua", "rid", "sov")]
FACTS = "Quillton holds the Zorblax festival on the ninth of Brumaire."


def words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCABULARY) for _ in range(count))


def message_of(size: int) -> str:
    """``size`` characters: the base's own words, many it has never seen, then a question."""
    text = words(size // 18, seed=7) + " " + " ".join(f"zq{i}" for i in range(size // 12))
    return text[:size - 40] + " When is the Zorblax festival?"


def calls(name: str, arguments: dict[str, Any], count: int = 1) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": name, "arguments": arguments}] * count},
            {"reply": "Done: {results}"}]


# ---------------------------------------------------------------------------------------------
# Setup (in the server's database)


def setup(passages: int, fan: int, upstream: str | None = None) -> str:
    """Migrate; create the agents, the knowledge base and a key (printed). With ``upstream``
    (an OpenAI-compatible fake's URL), ``kb-search``'s model is that upstream, so that making
    the 1 MB tool call is not the server's own work (the ``fake`` provider runs in it)."""
    from django.core.management import call_command
    from django.db import connections

    from agents.models import (
        Agent,
        KnowledgeBase,
        KnowledgeChunk,
        KnowledgeDocument,
        Provider,
    )
    from agents.services import api_key_create

    call_command("migrate", verbosity=0)
    calc = "calculator"
    plans: dict[str, tuple[list[str], dict[str, Any]]] = {
        "bystander": ([], {"reply": "Here."}),
        "calc-round": ([calc], {"script": calls(calc, {"expression": "round(1, -10**7)"})}),
        "calc-factorial": ([calc], {"script": calls(
            calc, {"expression": "factorial(1000)**1000"})}),
        "calc-8-factorials": ([calc], {"script": calls(
            calc, {"expression": "factorial(1000)**1000"}, 8)}),
        "calc-500-calls": ([calc], {"script": calls(calc, {"expression": "6 * 7"}, 500)}),
        "kb-chat": ([], {"echo": "system"}),
        "kb-search": (["knowledge_search"], {"script": calls(
            "knowledge_search", {"query": words(125_000, seed=11) + " Zorblax"})}),
        "fan-leaf": ([], {"reply": "leaf"}),
    }
    for level in (3, 2, 1):
        below = f"fan-{level + 1}" if level < 3 else "fan-leaf"
        plans[f"fan-{level}"] = ([f"agent:{below}"], {"script": calls(
            f"agent__{below}", {"task": "Go on."}, fan)})
    for slug, (tools, options) in plans.items():
        remote = upstream is not None and slug == "kb-search"
        provider, _ = Provider.objects.update_or_create(name=f"attack-{slug}", defaults={
            "kind": "openai" if remote else "fake", "base_url": upstream if remote else "",
            "max_concurrency": 10_000, "options": {} if remote else options})
        Agent.objects.update_or_create(slug=slug, defaults={
            "display_name": slug, "provider": provider, "tools": tools})
    kb, _ = KnowledgeBase.objects.update_or_create(slug="attack-lore", defaults={
        "name": "Lore", "top_k": 3})
    if kb.chunks.count() != passages + 1:
        KnowledgeDocument.objects.filter(knowledge_base=kb).delete()
        doc = KnowledgeDocument.objects.create(knowledge_base=kb, name="lore.txt", kind="text",
                                               data=b"-", status="ready",
                                               chunk_count=passages + 1)
        texts = [words(60, seed) for seed in range(passages)] + [FACTS]
        KnowledgeChunk.objects.bulk_create(
            (KnowledgeChunk(knowledge_base=kb, document=doc, seq=i, source=f"lore.txt#{i}",
                            text=text) for i, text in enumerate(texts)), batch_size=500)
        KnowledgeBase.objects.filter(pk=kb.pk).update(index_version=f"attack-{passages}")
    for slug in ("kb-chat", "kb-search"):
        Agent.objects.get(slug=slug).knowledge_bases.set([kb])
    key = api_key_create(name="attacks")[1]
    connections.close_all()
    return key


# ---------------------------------------------------------------------------------------------
# The poller and the attacks


class Poller:
    """``/health`` and a bystander's chat, one after the other, every 50 ms, on a thread."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key
        self.worst = {"health": 0.0, "chat": 0.0}
        self.polls = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=120) as client:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                health = client.get("/health")
                t1 = time.perf_counter()
                chat = client.post("/v1/chat/completions",
                                   headers={"Authorization": f"Bearer {self.key}"},
                                   json={"model": "bystander", "messages": [
                                       {"role": "user", "content": "Are you there?"}]})
                t2 = time.perf_counter()
                self.failures += (health.status_code != 200) + (chat.status_code != 200)
                self.worst["health"] = max(self.worst["health"], (t1 - t0) * 1000)
                self.worst["chat"] = max(self.worst["chat"], (t2 - t1) * 1000)
                self.polls += 1
                self._stop.wait(POLL_SECONDS)

    def __enter__(self) -> Poller:
        self._thread.start()
        while self.polls < 5:  # warm: not counted
            time.sleep(POLL_SECONDS)
        self.worst = {"health": 0.0, "chat": 0.0}
        self.polls = self.failures = 0
        return self

    def __exit__(self, *exc: Any) -> None:
        time.sleep(0.2)
        self._stop.set()
        self._thread.join(180)


def ask(base: str, key: str, model: str, content: str, timeout: float) -> str:
    """One chat; its outcome in a few words."""
    try:
        r = httpx.post(base + "/v1/chat/completions", timeout=timeout,
                       headers={"Authorization": f"Bearer {key}"},
                       json={"model": model, "messages": [{"role": "user", "content": content}]})
    except httpx.TimeoutException:
        return f"no answer in {timeout:g} s"
    if r.status_code != 200:
        try:
            return f"{r.status_code} {r.json()['error']['code']}"
        except (ValueError, KeyError, TypeError):
            return f"{r.status_code} {r.text[:60]!r}"
    text = r.json()["choices"][0]["message"]["content"] or ""
    return f"200 {' '.join(text.split())[:70]!r}"


def attacks(timeout: float) -> dict[str, Callable[[str, str], str]]:
    def chat(model: str, content: str = "Go.") -> Callable[[str, str], str]:
        return lambda base, key: ask(base, key, model, content, timeout)

    return {
        "calc-round": chat("calc-round"),
        "calc-factorial": chat("calc-factorial"),
        "calc-8-factorials": chat("calc-8-factorials"),
        "calc-500-calls": chat("calc-500-calls"),
        "kb-20k": chat("kb-chat", message_of(20_000)),
        "kb-100k": chat("kb-chat", message_of(100_000)),
        "kb-1m": chat("kb-chat", message_of(1_000_000)),
        "kb-search-125k": chat("kb-search"),
        "fan-out": chat("fan-1"),
    }


def run(base: str, key: str, only: list[str] | None, timeout: float) -> bool:
    """Every attack under the poller; prints a line each; whether all stayed in the bound."""
    todo = attacks(timeout)
    # the knowledge base's index is built on its first use (once per upload: not an attack),
    # and the process's first call of an upstream loads its TLS setup (once)
    ask(base, key, "kb-chat", "When is the Zorblax festival?", timeout)
    if not only or "kb-search-125k" in only:
        ask(base, key, "kb-search", "Go.", timeout)
    print(f"{'attack':<18} {'seconds':>8} {'/health ms':>11} {'chat ms':>9} {'polls':>6}  "
          "outcome")
    ok = True
    for name, attack in todo.items():
        if only and name not in only:
            continue
        with Poller(base, key) as poller:
            t0 = time.perf_counter()
            outcome = attack(base, key)
            elapsed = time.perf_counter() - t0
        worst = poller.worst
        within = max(worst.values()) < BOUND_MS and not poller.failures
        ok &= within
        print(f"{name:<18} {elapsed:8.2f} {worst['health']:11.1f} {worst['chat']:9.1f} "
              f"{poller.polls:6d}  {outcome}{'' if within else '  <- over the bound'}"
              f"{f' ({poller.failures} failed polls)' if poller.failures else ''}", flush=True)
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running Gaia (its agents made by --setup-only)")
    parser.add_argument("--key", help="an API key of that server")
    parser.add_argument("--setup-only", action="store_true")
    parser.add_argument("--only", help="attacks to run, comma-separated")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per attack")
    parser.add_argument("--passages", type=int, default=2000, help="knowledge base size")
    parser.add_argument("--fan", type=int, default=10, help="delegations a round, a level")
    args = parser.parse_args()
    only = args.only.split(",") if args.only else None
    if args.url:
        if not args.key:
            parser.error("--url needs --key")
        sys.exit(0 if run(args.url.rstrip("/"), args.key, only, args.timeout) else 1)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
    if args.setup_only:
        import django

        django.setup()
        print(setup(args.passages, args.fan))
        return
    from tests.fakes import Reply, ToolCallSpec
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    upstream = FakeOpenAIUpstream(tokens=2).start()
    query = json.dumps({"query": words(125_000, seed=11) + " Zorblax"})
    upstream.script(*[reply for _ in range(100) for reply in (
        Reply(tool_calls=[ToolCallSpec("knowledge_search", query)]), Reply(text="Found."))])
    with tempfile.TemporaryDirectory(prefix="gaia-perf-attacks-") as tmp:
        os.environ["GAIA_DATA_DIR"] = tmp
        import django

        django.setup()
        from gaia_site.server_cli import server_command

        print("setting up", file=sys.stderr, flush=True)
        key = setup(args.passages, args.fan, upstream.base_url)
        port = free_port()
        log = open(Path(tmp) / "server.log", "wb")  # noqa: SIM115 - closed with the server
        proc = subprocess.Popen(server_command("127.0.0.1", port), cwd=ROOT,
                                env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_port(port, proc)
            database = "PostgreSQL" if "postgres" in os.environ.get("DATABASE_URL", "") \
                else "SQLite"
            print(f"Gaia at http://127.0.0.1:{port} ({database}); the bystander's worst "
                  f"latency while each attack runs (bound {BOUND_MS:g} ms)\n", flush=True)
            ok = run(f"http://127.0.0.1:{port}", key, only, args.timeout)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
            upstream.stop()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
