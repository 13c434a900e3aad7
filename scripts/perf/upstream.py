#!/usr/bin/env python3
"""Time to first token and tokens/s through Gaia versus directly from the same upstream.

One run measures, one stream at a time, alternating between the paths so that they all see
the same machine (its background load drifts):

(a) a fake OpenAI-compatible upstream with a fixed token rate (``tests/fakes/openai_upstream.py``
    in a subprocess): directly over HTTP, through the ``openai`` backend alone in this process
    (``adapter``: what the provider kind costs apart from Gaia's per-turn work), and through
    Gaia (an ``openai`` provider on it);
(b) the local GGUF model: directly in this process with llama-cpp-python (same prompt tokens
    and sampling as Gaia's ``local`` provider), and through Gaia (a ``local`` provider): the
    time to first token over many short streams (8 tokens), tokens/s over a few long ones;

and, while a long local generation streams through Gaia, the latency of ``GET /health``.

Every stream is read with aiohttp over a kept-alive connection. Through Gaia the local model
is also read with httpx, on alternate questions: the direct local path has no HTTP client, so
what the client itself costs counts against Gaia there, and httpx costs about 1 ms more than
aiohttp per stream (sending the request and parsing the first response).

Gaia is a real uvicorn process serving ``gaia_site.asgi:application`` on a throwaway data dir
(``GAIA_DATA_DIR``), migrated and provisioned by this script. Prints a table and the ratios;
targets: Gaia adds under 5 ms to the p50 time to first token and keeps at least 95 % of the
direct tokens/s.

    .venv/bin/python -m scripts.perf.upstream                # both upstreams
    .venv/bin/python -m scripts.perf.upstream --skip-local   # the fake upstream only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

SETUP = """
import json
from agents.models import Agent, Provider
from agents.services import api_key_create
fake = Provider.objects.create(name="perf-fake", kind="openai", base_url={fake_url!r},
                               default_model="fake-model", timeout_seconds=60,
                               max_concurrency=64)
Agent.objects.create(slug="perf-fake", display_name="perf fake", provider=fake,
                     max_output_tokens=100000, max_input_tokens=100000)
local = Provider.objects.create(name="perf-local", kind="local", timeout_seconds=300,
                                max_concurrency=1, options={local_options!r})
Agent.objects.create(slug="perf-local", display_name="perf local", provider=local,
                     max_output_tokens=100000, max_input_tokens=100000, temperature=0.0)
key, secret = api_key_create(name="perf")
print("SECRET=" + secret)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    pos = (len(values) - 1) * q / 100
    lo, hi = int(pos), min(int(pos) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


class Sample:
    def __init__(self, ttft: float, tokens: int, decode_seconds: float) -> None:
        self.ttft = ttft  # seconds from sending the request to the first content
        self.tokens = tokens
        self.decode_seconds = decode_seconds  # first content to last content

    @property
    def rate(self) -> float:
        """Tokens/s after the first token (the decode rate the upstream sets)."""
        return (self.tokens - 1) / self.decode_seconds if self.decode_seconds > 0 else 0.0


class TokenClock:
    """Times one stream's tokens from ``t0``, the moment the request was made (every path's
    clock: over HTTP, through the adapter, and in-process)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.t0 = time.perf_counter()
        self.first: float | None = None
        self.last = 0.0
        self.tokens = 0

    def tick(self) -> None:
        """One token arrived."""
        self.last = time.perf_counter()
        if self.first is None:
            self.first = self.last
        self.tokens += 1

    def sse_line(self, line: bytes) -> None:
        """One line of a streamed chat completion: a content delta is one upstream token."""
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            return
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise SystemExit(f"{self.name}: in-band error {chunk['error']}")
        for choice in chunk.get("choices") or ():
            if (choice.get("delta") or {}).get("content"):
                self.tick()

    def sample(self) -> Sample:
        if self.first is None:
            raise SystemExit(f"{self.name}: no content")
        return Sample(self.first - self.t0, self.tokens, self.last - self.first)


async def sse_stream(client: aiohttp.ClientSession, url: str, headers: dict[str, str],
                     body: dict[str, Any]) -> Sample:
    """One streamed chat completion with aiohttp, the measuring client of every path (its C
    HTTP parser costs the least of Python's clients, and the client's own work is no part
    of what Gaia adds)."""
    clock = TokenClock(url)
    async with client.post(url, json=body, headers=headers) as response:
        if response.status != 200:
            raise SystemExit(f"{url}: HTTP {response.status}: {await response.read()}")
        async for line in response.content:
            clock.sse_line(line)
    return clock.sample()


async def sse_stream_httpx(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                           body: dict[str, Any]) -> Sample:
    """The same with httpx, the OpenAI SDK's HTTP client: what a heavier client adds."""
    clock = TokenClock(url)
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            raise SystemExit(f"{url}: HTTP {response.status_code}: {await response.aread()}")
        async for line in response.aiter_lines():
            clock.sse_line(line.encode())
    return clock.sample()


def chat_body(model: str, max_tokens: int, prompt: str, i: int) -> dict[str, Any]:
    return {"model": model, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"{prompt} (request {i})"}]}


def _django() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
    django.setup()


async def adapter_stream(provider: Any, max_tokens: int, prompt: str, i: int) -> Sample:
    """One stream through the ``openai`` backend alone, in this process (no Gaia HTTP, no turn
    bookkeeping): what the adapter itself costs, apart from Gaia's per-turn work."""
    from agents.backends import backend_stream
    from agents.kernel.llm import LLMRequest, Message, TextDelta, TextPart

    request = LLMRequest(model="", system="", max_output_tokens=max_tokens,
                         messages=[Message("user", (TextPart(f"{prompt} (request {i})"),))])
    clock = TokenClock("adapter")
    async for event in backend_stream(provider, request):
        if isinstance(event, TextDelta):
            clock.tick()
    return clock.sample()


async def run_fake_paths(fake_url: str, gaia: str, key: str, n: int, max_tokens: int,
                         prompt: str, block: int) -> dict[str, list[Sample]]:
    """The paths to the fake upstream, interleaved in blocks of ``block`` streams (which
    path goes first rotating), so that all see the same background load: on a shared machine
    that drifts over seconds, measuring one path after the other biased their difference by
    more than the effect being measured."""
    paths: dict[str, Any]
    _django()
    from django.utils import timezone

    from agents.models import Provider

    provider = Provider(pk=10**9, name="adapter", kind="openai", base_url=fake_url,
                        default_model="fake-model", timeout_seconds=60, max_concurrency=8,
                        options={})
    provider.updated_at = timezone.now()
    async with aiohttp.ClientSession() as client:
        paths = {
            "direct": lambda i: sse_stream(client, f"{fake_url}/chat/completions", {},
                                           chat_body("fake-model", max_tokens, prompt, i)),
            "adapter": lambda i: adapter_stream(provider, max_tokens, prompt, i),
            "gaia": lambda i: sse_stream(client, f"{gaia}/v1/chat/completions",
                                         {"Authorization": f"Bearer {key}"},
                                         chat_body("perf-fake", max_tokens, prompt, i)),
            # A client naming its conversation (Open WebUI, LibreChat, Claude Code): the
            # turn also takes its thread's lease (while the upstream works).
            "gaia+session": lambda i: sse_stream(
                client, f"{gaia}/v1/chat/completions",
                {"Authorization": f"Bearer {key}", "X-Session-Id": f"perf-{uuid.uuid4()}"},
                chat_body("perf-fake", max_tokens, prompt, i)),
        }
        samples: dict[str, list[Sample]] = {name: [] for name in paths}
        names = list(paths)
        block = max(1, block)
        for start in range(-2 * block, n, block):  # two warm-up blocks
            for name in names:
                for i in range(start, min(start + block, n)):
                    sample = await paths[name](i)
                    if i >= 0:
                        samples[name].append(sample)
            names = names[1:] + names[:1]  # rotate which path goes first
    return samples


def local_direct_stream(backend: Any, max_tokens: int, prompt: str, i: int) -> Sample:
    """One generation with the same model, prompt tokens and sampling as Gaia's local
    provider, in this process (no HTTP, no turn bookkeeping). The clock starts with the
    chat messages, as for a client of llama-cpp-python's chat API: applying the chat
    template and tokenizing are part of any path's time to first token."""
    from agents.kernel.llm import LLMRequest, Message, TextPart

    model = backend.model()
    request = LLMRequest(model="", system="", temperature=0.0, max_output_tokens=max_tokens,
                         messages=[Message("user", (TextPart(f"{prompt} (request {i})"),))])
    sampling = backend._sampling(request)
    clock = TokenClock("local direct")
    tokens = model.tokenize(model.prompt(request))
    with model.lock:
        for token in model.llama.generate(tokens, **sampling):
            if model.is_eog(token):
                break
            model.llama.detokenize([token])
            clock.tick()
            if clock.tokens >= max_tokens:
                break
    return clock.sample()


async def run_local_paths(gaia: str, key: str, n_short: int, n_long: int, short_tokens: int,
                          long_tokens: int, prompt: str, options: dict[str, Any]
                          ) -> tuple[dict[str, list[Sample]], dict[str, list[float]]]:
    """The local model directly and through Gaia, one stream each in turn (the machine's
    load drifts; the model is CPU-bound; which path goes first alternates), request ``i``
    of both paths asking the same question, so both model instances hold the same previous
    prompt in their cache.

    Most streams are short (``short_tokens``): what Gaia adds is a few ms on some 45 ms of
    prompt evaluation that varies by several ms from one question to the next, so it takes
    many pairs to pin down. The last ``n_long`` streams (``long_tokens``) measure tokens/s.

    Gaia is reached over one kept-alive connection, as chat clients do: with aiohttp for
    even ``i``, with httpx for odd ``i``. The direct path has no HTTP client, so the
    client's own work counts as Gaia's here: the httpx rows show how much a heavier client
    adds. Returns the samples and, per Gaia path, the per-question differences."""
    _django()
    from agents.backends.local import LocalBackend

    backend = LocalBackend(name="direct", options=options)
    url, headers = f"{gaia}/v1/chat/completions", {"Authorization": f"Bearer {key}"}
    samples: dict[str, list[Sample]] = {"direct": [], "gaia": [], "gaia-httpx": []}
    diffs: dict[str, list[float]] = {"gaia": [], "gaia-httpx": []}
    plan = [short_tokens] * (4 + n_short) + [long_tokens] * n_long  # 4 warm-up streams
    async with aiohttp.ClientSession() as client, httpx.AsyncClient(timeout=300) as heavy:
        for i, max_tokens in enumerate(plan, start=-4):
            body = chat_body("perf-local", max_tokens, prompt, i)
            path = "gaia" if i % 2 == 0 else "gaia-httpx"
            through = (sse_stream(client, url, headers, body) if path == "gaia"
                       else sse_stream_httpx(heavy, url, headers, body))
            if (i // 2) % 2:
                direct = local_direct_stream(backend, max_tokens, prompt, i)
                sample = await through
            else:
                sample = await through
                direct = local_direct_stream(backend, max_tokens, prompt, i)
            if i >= 0:
                samples["direct"].append(direct)
                samples[path].append(sample)
                diffs[path].append(sample.ttft - direct.ttft)
    return samples, diffs


async def health_idle(gaia: str, n: int = 30) -> list[float]:
    latencies = []
    async with httpx.AsyncClient(timeout=10) as poller:
        for _ in range(n):
            t0 = time.perf_counter()
            await poller.get(f"{gaia}/health")
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)
    return latencies


async def health_during_generation(gaia: str, key: str, prompt: str, max_tokens: int
                                   ) -> tuple[list[float], Sample]:
    """Poll /health every 20 ms while one long local generation streams through Gaia."""
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=300) as client:
        gen = asyncio.create_task(sse_stream_httpx(
            client, f"{gaia}/v1/chat/completions", {"Authorization": f"Bearer {key}"},
            {"model": "perf-local", "stream": True, "max_tokens": max_tokens,
             "messages": [{"role": "user", "content": prompt + " (health)"}]}))
        async with httpx.AsyncClient(timeout=10) as poller:
            await asyncio.sleep(0.3)  # into the generation
            while not gen.done():
                t0 = time.perf_counter()
                response = await poller.get(f"{gaia}/health")
                latencies.append(time.perf_counter() - t0)
                assert response.status_code in (200, 503)
                await asyncio.sleep(0.02)
        return latencies, await gen


def row(name: str, path: str, samples: list[Sample], min_tokens: int = 0) -> dict[str, Any]:
    """TTFT over all ``samples``; tokens/s over those of at least ``min_tokens`` tokens."""
    long = [s for s in samples if s.tokens >= min_tokens]
    return {"upstream": name, "path": path, "n": len(samples),
            "ttft_p50_ms": pct([s.ttft for s in samples], 50) * 1000,
            "ttft_p90_ms": pct([s.ttft for s in samples], 90) * 1000,
            "n_rate": len(long),
            "tok_s_p50": statistics.median(s.rate for s in long) if long else float("nan"),
            "tokens_p50": statistics.median(s.tokens for s in long) if long else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60, help="streams per fake path")
    parser.add_argument("--block", type=int, default=10,
                        help="streams per path before switching to the next path")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--token-delay-ms", type=float, default=5.0)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--local-requests", type=int, default=160,
                        help="short local streams per path, for TTFT (half of Gaia's with "
                             "each client)")
    parser.add_argument("--local-short-tokens", type=int, default=8)
    parser.add_argument("--local-long", type=int, default=16,
                        help="long local streams per path, for tokens/s")
    parser.add_argument("--local-tokens", type=int, default=128,
                        help="tokens per long local stream")
    parser.add_argument("--local-threads", type=int, default=0,
                        help="llama.cpp threads (default: the provider default, all cores)")
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args()

    prompt = "Write a long story about a dragon who learns to cook."
    local_options: dict[str, Any] = {"n_ctx": 2048}
    if args.local_threads:
        local_options["n_threads"] = args.local_threads
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="gaia-perf-") as data_dir:
        env = {**os.environ, "GAIA_DATA_DIR": data_dir, "PYTHONPATH": str(ROOT)}
        try:
            fake_port = free_port()
            procs.append(subprocess.Popen(
                [PYTHON, str(ROOT / "tests/fakes/openai_upstream.py"), "--port", str(fake_port),
                 "--tokens", str(args.tokens), "--token-delay-ms", str(args.token_delay_ms),
                 "--ttft-ms", str(args.ttft_ms)], cwd=ROOT, env=env))
            fake_url = f"http://127.0.0.1:{fake_port}/v1"
            subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env,
                           check=True)
            out = subprocess.run(
                [PYTHON, "manage.py", "shell", "-c",
                 SETUP.format(fake_url=fake_url, local_options=local_options)],
                cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
            secret = next(line[7:] for line in out.splitlines() if line.startswith("SECRET="))
            gaia_port = free_port()
            procs.append(subprocess.Popen(
                [PYTHON, "-m", "uvicorn", "gaia_site.asgi:application", "--port",
                 str(gaia_port), "--lifespan", "off", "--loop", "uvloop", "--http", "httptools",
                 "--log-level", "warning", "--no-access-log"], cwd=ROOT, env=env))
            gaia = f"http://127.0.0.1:{gaia_port}"
            wait_http(f"{gaia}/health")
            wait_http(f"http://127.0.0.1:{fake_port}/health")

            fake = asyncio.run(run_fake_paths(fake_url, gaia, secret, args.requests,
                                              args.tokens, prompt, args.block))
            rows = [row("fake-openai", path, fake[path]) for path in fake]
            health: list[float] = []
            idle: list[float] = []
            health_sample = None
            diffs: dict[str, list[float]] = {}
            if not args.skip_local:
                local, diffs = asyncio.run(run_local_paths(
                    gaia, secret, args.local_requests, args.local_long,
                    args.local_short_tokens, args.local_tokens, prompt, local_options))
                rows += [row("local", path, local[path], min_tokens=args.local_tokens // 2)
                         for path in local]
                idle = asyncio.run(health_idle(gaia))
                health, health_sample = asyncio.run(health_during_generation(
                    gaia, secret, prompt, max(args.local_tokens, 256)))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=10)

    print()
    print(f"{'upstream':<12} {'path':<12} {'n':>4} {'ttft p50 ms':>12} {'ttft p90 ms':>12} "
          f"{'n':>4} {'tok/s p50':>10} {'tokens':>7}")
    for r in rows:
        print(f"{r['upstream']:<12} {r['path']:<12} {r['n']:>4} {r['ttft_p50_ms']:>12.2f} "
              f"{r['ttft_p90_ms']:>12.2f} {r['n_rate']:>4} {r['tok_s_p50']:>10.1f} "
              f"{r['tokens_p50']:>7.0f}")
    print()
    verdicts = []
    for name in ("fake-openai", "local"):
        pair = {r["path"]: r for r in rows if r["upstream"] == name}
        if len(pair) < 2:
            continue
        added = pair["gaia"]["ttft_p50_ms"] - pair["direct"]["ttft_p50_ms"]
        kept = pair["gaia"]["tok_s_p50"] / pair["direct"]["tok_s_p50"]
        ok = added < 5 and kept >= 0.95
        verdicts.append(ok)
        print(f"{name}: Gaia adds {added:+.2f} ms to p50 TTFT "
              f"(ratio {pair['gaia']['ttft_p50_ms'] / pair['direct']['ttft_p50_ms']:.3f}), "
              f"keeps {kept * 100:.1f} % of direct tok/s -> "
              f"{'meets' if ok else 'MISSES'} target (<5 ms, >=95 %)")
    if diffs:
        local = {r["path"]: r for r in rows if r["upstream"] == "local"}
        paired = {path: statistics.median(d) * 1000 for path, d in diffs.items()}
        print(f"local: the median of the per-question differences (request i through Gaia "
              f"minus request i directly) is {paired['gaia']:+.2f} ms")
        print(f"local: with httpx as the client (the OpenAI SDK's) instead of aiohttp, "
              f"{local['gaia-httpx']['ttft_p50_ms'] - local['direct']['ttft_p50_ms']:+.2f} ms "
              f"(per-question median {paired['gaia-httpx']:+.2f} ms): the client's own work, "
              f"which the in-process direct path does not have")
    fake = {r["path"]: r for r in rows if r["upstream"] == "fake-openai"}
    direct = fake["direct"]
    print(f"fake-openai: a named session (X-Session-Id: the thread's lease is taken too) "
          f"adds {fake['gaia+session']['ttft_p50_ms'] - direct['ttft_p50_ms']:+.2f} ms to p50 "
          f"TTFT")
    print(f"fake-openai: the openai backend alone (in-process, no HTTP server, no turn "
          f"bookkeeping) adds {fake['adapter']['ttft_p50_ms'] - direct['ttft_p50_ms']:+.2f} "
          f"ms to p50 TTFT and keeps "
          f"{fake['adapter']['tok_s_p50'] / direct['tok_s_p50'] * 100:.1f} % of tok/s")
    if health:
        print(f"/health during a {health_sample.tokens}-token local generation "
              f"({len(health)} polls): p50 {pct(health, 50) * 1000:.1f} ms, "
              f"p99 {pct(health, 99) * 1000:.1f} ms, max {max(health) * 1000:.1f} ms "
              f"(idle: p50 {pct(idle, 50) * 1000:.1f} ms, p99 {pct(idle, 99) * 1000:.1f} ms)")
    sys.exit(0 if all(verdicts) else 1)


if __name__ == "__main__":
    main()
