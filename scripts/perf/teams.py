#!/usr/bin/env python3
"""What issue 14's features cost: ``auto`` routing, a team over its slowest member, and
knowledge-base retrieval over 10,000 passages.

Starts a real Gaia server (uvicorn) on a throwaway SQLite data dir (or DATABASE_URL) with
agents on the deterministic ``fake`` provider, then measures, one request at a time:

* routing overhead: p50/p99 of ``model=auto`` minus the same request to the chosen agent
  directly, with the deterministic ranker over 20 agents' descriptions, then with a fake
  router agent (its provider answers the ``route_to`` tool call at once);
* a three-member ``collaborate`` team whose members take 100, 200 and 300 ms to answer:
  the team's latency minus its slowest member's asked directly (the leader answers at once,
  so this is the team's own cost: storing the inner messages, the leader's second call);
* retrieval: a knowledge base of 10,000 passages (indexed by the real service), the first
  retrieval (builds the process's BM25 index) and then p50/p99 of warm retrievals in
  process, and a turn's latency through the server with and without the knowledge base.

  .venv/bin/python -m scripts.perf.teams [--requests 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from scripts.perf.harness import ROOT, free_port, percentile, wait_health

TOPICS = ["cooking recipes baking bread", "weather forecasts rain wind", "tax returns invoices",
          "gardening roses soil", "astronomy stars planets", "football league scores",
          "python programming code", "travel flights hotels", "music guitar chords",
          "medicine symptoms doctors", "law contracts courts", "chess openings endgames",
          "photography cameras lenses", "cars engines repairs", "poetry verses rhyme",
          "history empires wars", "movies actors directors", "fitness running training",
          "pets dogs cats", "finance stocks bonds"]


SETUP = """
from agents.models import Agent, KnowledgeBase, Provider, RoutingPolicy, Team, TeamMember
from agents.services import api_key_create
from agents import selectors as knowledge, services
topics = {topics!r}
fast, _ = Provider.objects.update_or_create(name='fast', defaults=dict(
    kind='fake', max_concurrency=1000, options={{'reply': 'ok ' * 16}}))
for i, t in enumerate(topics):
    Agent.objects.update_or_create(slug=f'topic-{{i}}', defaults=dict(
        display_name=t.title(), description=f'Questions about {{t}}.', provider=fast))
router_p, _ = Provider.objects.update_or_create(name='router', defaults=dict(
    kind='fake', max_concurrency=1000, options={{'tool_call': {{'name': 'route_to',
    'arguments': {{'agent': 'topic-0'}}}}}}))
router, _ = Agent.objects.update_or_create(slug='router', defaults=dict(
    display_name='Router', provider=router_p, enabled=True))
RoutingPolicy.objects.update_or_create(pk=1, defaults=dict(router=None,
    default_agent=Agent.objects.get(slug='topic-0')))
members = []
for ms in (100, 200, 300):
    p, _ = Provider.objects.update_or_create(name=f'member-{{ms}}', defaults=dict(
        kind='fake', max_concurrency=1000, options={{'reply': 'part ' * 16, 'ttft_ms': ms}}))
    a, _ = Agent.objects.update_or_create(slug=f'member-{{ms}}', defaults=dict(
        display_name=f'Member {{ms}}', description='A team member.', provider=p))
    members.append(a)
lead, _ = Agent.objects.update_or_create(slug='lead', defaults=dict(
    display_name='Lead', description='Team leader.', provider=fast))
team, _ = Team.objects.update_or_create(slug='trio', defaults=dict(
    display_name='Trio', leader=lead, mode='collaborate'))
TeamMember.objects.filter(team=team).delete()
for i, a in enumerate(members):
    TeamMember.objects.create(team=team, agent=a, position=i)
kb, _ = KnowledgeBase.objects.update_or_create(slug='big', defaults=dict(
    name='Big', chunk_chars=300, chunk_overlap=0, top_k=4))
words = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel', 'india',
         'juliet', 'kilo', 'lima', 'mike', 'november', 'oscar', 'papa', 'quebec', 'romeo']
paras = []
for i in range(10000):
    w = [words[(i * 7 + j * 3) % len(words)] + str((i + j) % 97) for j in range(40)]
    paras.append(' '.join(w)[:280] + '.')
paras[4242] = 'The lighthouse of Varnholm was built in 1871 by Ingrid Solberg.' + ' x' * 100
doc = services.knowledge_document_add(knowledge_base=kb, name='big.txt',
                                       data='\\n\\n'.join(paras).encode())
t0 = time.monotonic()
"""

# Indexing runs in this shell's process (no Redis: the embedded worker thread), so it waits.
SETUP_WAIT = """
from agents.models import KnowledgeDocument
import time as _t
t0 = _t.monotonic()
while KnowledgeDocument.objects.get(pk=doc.pk).status not in ('ready', 'error'):
    _t.sleep(0.1)
d = KnowledgeDocument.objects.get(pk=doc.pk)
print('INDEXED', d.status, d.chunk_count, round(_t.monotonic() - t0, 2))
kbagent, _ = Agent.objects.update_or_create(slug='reader', defaults=dict(
    display_name='Reader', provider=fast))
kbagent.knowledge_bases.set([kb])
Agent.objects.update_or_create(slug='plain-reader', defaults=dict(
    display_name='Plain', provider=fast))
print('KEY', api_key_create(name='perf')[1])
"""


def manage(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=env, cwd=ROOT,
                         check=True, capture_output=True, text=True, input=stdin)
    return out.stdout


def timed(client: httpx.Client, key: str, models: list[str], text: str, n: int
          ) -> list[list[float]]:
    """Latencies (ms) of ``n`` requests to each model, interleaved (so drift and warm-up
    affect every model alike)."""
    times: list[list[float]] = [[] for _ in models]
    for i in range(n):
        for j, model in enumerate(models):
            t0 = time.perf_counter()
            r = client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                            json={"model": model, "messages": [
                                {"role": "user", "content": f"{text} ({i})"}]})
            times[j].append((time.perf_counter() - t0) * 1000)
            if r.status_code != 200:
                raise SystemExit(f"{model}: HTTP {r.status_code} {r.text[:300]}")
    return times


def row(label: str, times: list[float], base: list[float] | None = None) -> str:
    p50, p99 = percentile(times, 50), percentile(times, 99)
    extra = ""
    if base is not None:
        extra = f"  +{p50 - percentile(base, 50):6.1f} ms over p50 {percentile(base, 50):.1f}"
    return f"  {label:44} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms{extra}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    n = args.requests
    with tempfile.TemporaryDirectory(prefix="gaia-perf-teams-") as tmp:
        env = {**os.environ, "GAIA_DATA_DIR": tmp}
        env.pop("REDIS_URL", None)
        manage(env, "migrate", "-v", "0")
        t0 = time.monotonic()
        out = manage(env, "shell", stdin="import time\n" + SETUP.format(topics=TOPICS)
                     + SETUP_WAIT)
        lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
        key = lines["KEY"].strip()
        indexed = lines["INDEXED"].split()
        print(f"setup {time.monotonic() - t0:.1f} s; knowledge base: {indexed[1]} passages "
              f"indexed in {indexed[2]} s (status {indexed[0]})", file=sys.stderr)

        from gaia_site.server_cli import server_command

        port = free_port()
        log = open(Path(tmp) / "server.log", "wb")  # noqa: SIM115 - lives with the server
        proc = subprocess.Popen(server_command("127.0.0.1", port, workers=1, server="uvicorn"),
                                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_health(base, timeout=0.5)
            report: list[str] = []
            with httpx.Client(base_url=base, timeout=60) as c:
                question = "How long should I knead the bread for this recipe?"
                timed(c, key, ["auto", "topic-0"], question, 10)  # warm-up
                direct, ranker = timed(c, key, ["topic-0", "auto"], question, n)
                manage(env, "shell", "-c", "from agents.models import Agent, RoutingPolicy; "
                       "RoutingPolicy.objects.filter(pk=1).update(router=Agent.objects.get("
                       "slug='router')); from agents.services import config_changed; "
                       "config_changed()")
                timed(c, key, ["auto"], question, 5)
                direct2, router = timed(c, key, ["topic-0", "auto"], question, n)
                report += ["auto routing (20 agents; concurrency 1)",
                           row("direct to the chosen agent", direct),
                           row("auto, deterministic ranker", ranker, direct),
                           row("direct (again, beside the router runs)", direct2),
                           row("auto, fake router agent", router, direct2)]
                m = max(10, n // 5)
                slowest, team = timed(c, key, ["member-300", "team/trio"], "go", m)
                report += ["three-member collaborate team (members 100/200/300 ms)",
                           row("slowest member alone", slowest),
                           row("team/trio", team, slowest)]
                ask = "Who built the lighthouse of Varnholm?"
                r = c.post("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                           json={"model": "reader", "messages": [
                               {"role": "user", "content": ask}]})
                first_ms = r.elapsed.total_seconds() * 1000
                plain, with_kb = timed(c, key, ["plain-reader", "reader"], ask, n)
                report += [f"knowledge base of {indexed[1]} passages (BM25, top 4)",
                           f"  first turn (builds the server's index)       {first_ms:7.1f} ms",
                           row("turn without knowledge", plain),
                           row("turn with retrieval", with_kb, plain)]
        finally:
            proc.terminate()
            proc.wait(10)
        out = manage(env, "shell", stdin=RETRIEVE)
        report += [line for line in out.splitlines() if line.startswith("  ")]
    print("\n".join(report))


RETRIEVE = """
import time
from agents import selectors as knowledge, services
from agents.models import KnowledgeBase
kb = KnowledgeBase.objects.get(slug='big')
t0 = time.perf_counter()
knowledge.knowledge_retrieve(knowledge_base_ids=[kb.pk], query='warm up')
build = (time.perf_counter() - t0) * 1000
queries = ['Who built the lighthouse of Varnholm?', 'alpha5 bravo17 delta40',
           'romeo3 quebec8', 'november oscar papa', 'what is kilo12 with lima13']
times = []
for i in range(200):
    t0 = time.perf_counter()
    found = knowledge.knowledge_retrieve(knowledge_base_ids=[kb.pk], query=queries[i % 5])
    times.append((time.perf_counter() - t0) * 1000)
times.sort()
top = knowledge.knowledge_retrieve(knowledge_base_ids=[kb.pk], query=queries[0])[0]
print(f'  in process: index build {build:7.1f} ms; warm retrieval p50 {times[100]:6.2f} ms  '
      f'p99 {times[197]:6.2f} ms (200 queries)')
print(f'  top passage for the lighthouse question: {top["text"][:60]!r}')
from collections import Counter
from agents.models import Message, Thread
methods = Counter(t.route.get('method') for t in Thread.objects.filter(route__model='auto'))
print(f'  check: auto turns by routing method {dict(methods)}; team/trio inner messages '
      f'{Message.objects.filter(internal=True).count()}')
"""


if __name__ == "__main__":
    main()
