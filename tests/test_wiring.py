"""The project's wiring: Channels WebSockets through the live ASGI server and the channel
layer (Redis in CI), and Celery's configuration in both modes."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets


@pytest.mark.django_db(transaction=True)
def test_websocket_round_trip_through_the_channel_layer(gaia_server):
    ws_url = gaia_server.url.replace("http://", "ws://") + "/ws/ping/"

    async def talk():
        async with websockets.connect(ws_url, origin=gaia_server.url) as ws:
            hello = json.loads(await ws.recv())
            await ws.send(json.dumps({"n": 1}))
            pong = json.loads(await asyncio.wait_for(ws.recv(), 10))
            return hello, pong

    hello, pong = asyncio.run(talk())
    assert hello == {"event": "connected"}
    assert pong == {"event": "pong", "echo": {"n": 1}}


@pytest.mark.django_db(transaction=True)
def test_websocket_from_a_foreign_origin_is_refused(gaia_server):
    ws_url = gaia_server.url.replace("http://", "ws://") + "/ws/ping/"

    async def talk():
        async with websockets.connect(ws_url, origin="http://evil.example") as ws:
            await ws.recv()

    with pytest.raises(websockets.exceptions.InvalidStatus):
        asyncio.run(talk())


def test_celery_mode_follows_redis_url(settings):
    from gaia_site.celery import app

    if settings.REDIS_URL:
        assert app.conf.broker_url == settings.REDIS_URL
        assert not app.conf.task_always_eager
    else:
        assert app.conf.task_always_eager


def test_processes_starting_together_share_one_whole_secret_key(tmp_path):
    """CI's two legs (and a server beside its workers) start at once on a fresh data dir:
    each process either makes the key file or reads a whole one, so all hold the same
    non-empty key (written in place, one read it empty and ran its sessions with no key)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    env = {**os.environ, "GAIA_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE":
           "gaia_site.settings"}
    env.pop("SECRET_KEY", None)
    procs = [subprocess.Popen([sys.executable, "-c", "import django; django.setup(); " + code],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    keys = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(keys) == 1, keys
    (key,) = keys
    assert len(key) > 40
    assert (tmp_path / "secret_key").read_text().strip() == key
    assert sorted(f.name for f in tmp_path.iterdir()) == ["secret_key"]  # no leftovers
