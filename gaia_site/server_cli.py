"""``gaia api start|stop|status``, ``gaia agents import|export`` and ``gaia keys create``.

The server runs under uvicorn (uvloop + httptools): a bare Django async view answered about
twice the requests/s under uvicorn that it did under daphne on these machines (see README).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
    import django

    django.setup()


def _data_dir() -> Path:
    _django()
    from django.conf import settings

    return Path(settings.DATA_DIR)


def _pidfile(port: int) -> Path:
    return _data_dir() / f"gaia-api-{port}.pid"


def _record(port: int, pid: int, *, group: bool) -> None:
    """Record the server on ``port`` for ``stop`` and ``status``: every ``gaia api start``
    does, in the foreground (``./run``) too. ``group``: the server leads a process group of
    its own (``--background``), which ``stop`` signals whole."""
    _pidfile(port).write_text(json.dumps({"pid": pid, "group": group}))


def _recorded(port: int) -> tuple[int, bool] | None:
    """The recorded server on ``port`` if it still runs (a record left by a server that has
    ended, or whose pid now belongs to another program, is removed)."""
    pidfile = _pidfile(port)
    try:
        raw = pidfile.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(raw)
        pid, group = (record, True) if isinstance(record, int) else (
            int(record["pid"]), bool(record.get("group")))
    except (ValueError, KeyError, TypeError):
        pidfile.unlink(missing_ok=True)
        return None
    if not _is_gaia(pid):
        pidfile.unlink(missing_ok=True)
        return None
    return pid, group


def _is_gaia(pid: int) -> bool:
    """Whether ``pid`` runs and is a Gaia server (its command line names the ASGI app, where
    ``/proc`` tells)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True
    try:
        return b"gaia_site.asgi" in cmdline.read_bytes()
    except OSError:
        return False


def register(sub: Any) -> None:
    api = sub.add_parser("api", help="run the API server").add_subparsers(dest="cmd",
                                                                           required=True)
    start = api.add_parser("start", help="serve /v1, /health and the admin")
    start.add_argument("--host", default=os.environ.get("GAIA_HOST", "127.0.0.1"))
    start.add_argument("--port", type=int, default=int(os.environ.get("GAIA_PORT", "8080")))
    start.add_argument("--background", action="store_true")
    start.add_argument("--debug", action="store_true", help="log raw requests (secrets redacted)")
    start.add_argument("--show-prompts", action="store_true", help="log prompts sent upstream")
    start.add_argument("--workers", type=int, default=int(os.environ.get("GAIA_WORKERS", "1")))
    start.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    start.set_defaults(func=api_start)
    stop = api.add_parser("stop")
    stop.add_argument("--port", type=int, default=int(os.environ.get("GAIA_PORT", "8080")))
    stop.set_defaults(func=api_stop)
    status = api.add_parser("status")
    status.add_argument("--host", default=os.environ.get("GAIA_HOST", "127.0.0.1"))
    status.add_argument("--port", type=int, default=int(os.environ.get("GAIA_PORT", "8080")))
    status.set_defaults(func=api_status)

    agents = sub.add_parser("agents", help="declarative agent config").add_subparsers(
        dest="cmd", required=True)
    imp = agents.add_parser("import", help="create or update from YAML (idempotent)")
    imp.add_argument("file")
    imp.set_defaults(func=lambda a: _manage("agents_import", a.file))
    exp = agents.add_parser("export", help="print providers and agents as YAML")
    exp.set_defaults(func=lambda a: _manage("agents_export"))

    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="cmd", required=True)
    create = keys.add_parser("create", help="create a key; prints the secret once")
    create.add_argument("--name", required=True)
    create.add_argument("--scope", action="append", default=[])
    create.add_argument("--agent", action="append", default=[])
    create.add_argument("--rpm", type=int, default=0)
    create.add_argument("--expires-days", type=int)
    create.set_defaults(func=_keys_create)


def _manage(*argv: str) -> int:
    _django()
    from django.core.management import call_command
    from django.core.management.base import CommandError

    try:
        call_command(*argv)
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _keys_create(args: argparse.Namespace) -> int:
    argv = ["keys_create", "--name", args.name, "--rpm", str(args.rpm)]
    for s in args.scope:
        argv += ["--scope", s]
    for a in args.agent:
        argv += ["--agent", a]
    if args.expires_days is not None:
        argv += ["--expires-days", str(args.expires_days)]
    return _manage(*argv)


def server_command(host: str, port: int, *, workers: int = 1, server: str = "uvicorn"
                   ) -> list[str]:
    if server == "daphne":
        return [sys.executable, "-m", "daphne", "-b", host, "-p", str(port),
                "gaia_site.asgi:application"]
    return [sys.executable, "-m", "uvicorn", "gaia_site.asgi:application", "--host", host,
            "--port", str(port), "--loop", "uvloop", "--http", "httptools", "--lifespan", "on",
            "--no-access-log", "--timeout-graceful-shutdown", "5", "--workers", str(workers),
            # Compressing every feed message for every socket cost more CPU than sending it
            # (scripts/perf/feed.py); the feed's JSON is small and mostly on a LAN.
            "--ws-per-message-deflate", "false"]


def _metrics_dir(port: int) -> Path:
    """Where the workers of the server on ``port`` keep their metrics for /metrics to add up
    (prometheus-client's multiprocess mode), emptied at every start: a counter starts at 0
    with its server, as Prometheus expects of a restart."""
    path = _data_dir() / "metrics" / str(port)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def api_start(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    if args.debug:
        env["GAIA_API_DEBUG"] = "1"
    if args.show_prompts:
        env["GAIA_SHOW_PROMPTS"] = "1"
    cmd = server_command(args.host, args.port, workers=args.workers, server=args.server)
    running = _recorded(args.port)
    if running is not None:
        print(f"Gaia already runs on port {args.port} (pid {running[0]}); "
              f"stop it with: gaia api stop --port {args.port}", file=sys.stderr)
        return 1
    if args.workers > 1 and not env.get("PROMETHEUS_MULTIPROC_DIR"):
        env["PROMETHEUS_MULTIPROC_DIR"] = str(_metrics_dir(args.port))
    if not args.background:
        print(f"Gaia serving on http://{args.host}:{args.port} (OpenAI base URL "
              f"http://{args.host}:{args.port}/v1); stop it with Ctrl-C or "
              f"gaia api stop --port {args.port}", flush=True)
        _record(args.port, os.getpid(), group=False)  # exec keeps the pid: the server's
        os.execvpe(cmd[0], cmd, env)  # noqa: S606 - replaces this process with the server
    log_path = _data_dir() / f"gaia-api-{args.port}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log,  # noqa: S603
                                stdin=subprocess.DEVNULL, start_new_session=True)
    _record(args.port, proc.pid, group=True)
    for _ in range(100):
        if _health(args.host, args.port) is not None:
            print(f"Gaia started in the background (pid {proc.pid}) on "
                  f"http://{args.host}:{args.port}; log: {log_path}")
            return 0
        if proc.poll() is not None:
            print(f"Gaia exited with {proc.returncode}; see {log_path}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"Gaia did not answer /health within 10 s; see {log_path}", file=sys.stderr)
    return 1


def _health(host: str, port: int, *, key: str | None = None) -> dict[str, Any] | None:
    request = urllib.request.Request(  # noqa: S310 - http(s) to the given host only
        f"http://{host}:{port}/health",
        headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=2) as r:  # noqa: S310
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return None


def api_stop(args: argparse.Namespace) -> int:
    running = _recorded(args.port)
    if running is None:
        print(f"No Gaia recorded as running on port {args.port}.")
        return 1
    pid, group = running
    try:
        if group:
            os.killpg(pid, signal.SIGTERM)
        else:
            os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        print(f"Gaia (pid {pid}) was not running.")
        _pidfile(args.port).unlink(missing_ok=True)
        return 0
    # The server finishes its requests (5 s), then records the turns still running.
    for _ in range(300):
        if not _is_gaia(pid):
            break
        time.sleep(0.1)
    _pidfile(args.port).unlink(missing_ok=True)
    print(f"Stopped Gaia (pid {pid}).")
    return 0


def api_status(args: argparse.Namespace) -> int:
    """Whether Gaia answers on the port, its process if recorded, and its components'
    checks when ``GAIA_API_KEY`` holds an operator key (``/health`` shows them to such a key
    only)."""
    key = os.environ.get("GAIA_API_KEY") or None
    report = _health(args.host, args.port, key=key)
    running = _recorded(args.port)
    if report is None:
        print(f"Gaia is not running on http://{args.host}:{args.port}.")
        return 1
    where = f" (pid {running[0]})" if running else ""
    print(f"Gaia on http://{args.host}:{args.port}{where}: {report.get('status')}")
    if "checks" in report:
        print(json.dumps(report["checks"], indent=2))
    elif "error" in report:
        print(f"Components not shown: {report['error'].get('message', report['error'])}")
    else:
        print("Components not shown: set GAIA_API_KEY to an operator-scope key to see them.")
    return 0 if report.get("status") == "ok" else 2
