"""What every ``gaia bench`` command shares: the API call (plain HTTP, httpx), its errors, and
how a run is shown and waited for (a progress bar on stderr)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import httpx

from benchmarks.cli import show

DEFAULT_URL = "http://127.0.0.1:8080"
FINAL = ("succeeded", "failed", "cancelled")


class CliError(Exception):
    pass


def call(args: argparse.Namespace, method: str, path: str, *, raw: bool = False,
         headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """The API's JSON body (``raw``: its text); :class:`CliError` with the API's message for
    an error."""
    headers = {**({"Authorization": f"Bearer {args.key}"} if args.key else {}),
               **(headers or {})}
    url = args.url.rstrip("/") + "/api/v1/benchmarks/" + path
    try:
        response = httpx.request(method, url, headers=headers, timeout=60, **kwargs)
    except httpx.HTTPError as exc:
        raise CliError(f"{url}: {exc}") from exc
    if raw and response.status_code < 400:
        return response.text
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text[:200]}
    if response.status_code >= 400:
        detail = body.get("detail") if isinstance(body, dict) else body
        raise CliError(f"HTTP {response.status_code}: {detail}")
    return body


def is_replay(run: dict[str, Any]) -> bool:
    return run.get("kind") == "replay"


def line(run: dict[str, Any]) -> str:
    if is_replay(run):
        return show.run_line(run)
    p = run["progress"]
    summary = run.get("summary") or {}
    quality = (f" EM {summary['mean_exact_match']:.3f} F1 {summary['mean_f1']:.3f}"
               if "mean_exact_match" in summary else "")
    label = " [baseline]" if run.get("baseline") and quality else ""
    return (f"run {run['id']} {run['status']} {run['suite']} {run['protocol']} "
            f"{p['questions_done']}/{p['questions_total']}{quality}{label}"
            + (f" error: {run['error']}" if run.get("error") else ""))


def bar(run: dict[str, Any], width: int = 30) -> str:
    p = run["progress"]
    total = max(1, p["questions_total"])
    filled = int(width * p["questions_done"] / total)
    tail = show.bar_tail(run) if is_replay(run) else f"{p['packets']} packets"
    return (f"\r[{'#' * filled}{'.' * (width - filled)}] {p['questions_done']}/"
            f"{p['questions_total']} {run['status']} {tail}")


def wait(args: argparse.Namespace, run: dict[str, Any]) -> int:
    tty = sys.stderr.isatty()
    while run["status"] not in FINAL:
        if tty:
            sys.stderr.write(bar(run))
            sys.stderr.flush()
        time.sleep(0.5)
        run = call(args, "GET", f"runs/{run['id']}")
    sys.stderr.write(bar(run) + "\n")
    print(line(run))
    if is_replay(run):
        print("\n".join(show.summary_table(run.get("summary"))))
    elif run.get("baseline") and run.get("summary"):
        print(f"  quality: {run['quality_label']}")
    return 0 if run["status"] == "succeeded" else 1
