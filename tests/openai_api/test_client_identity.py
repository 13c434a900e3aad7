"""Participants from a client's own identity (issue 36 item 3), over real HTTP against a live
Gaia: Claude Code packs its device, account and session into ``metadata.user_id`` (a JSON
string today, ``user_<hash>_account_<uuid>_session_<uuid>`` before); the thread's user and
participants are named after the client, its session id keeps the conversation's thread,
and no JSON blob is ever a name."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import httpx
import pytest

from agents.models import ApiKey, Thread
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)

CLAUDE_CODE = {"User-Agent": "claude-cli/2.1.197 (external, cli)", "x-app": "cli",
               "anthropic-version": "2023-06-01",
               "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"}
DEVICE = "9f" * 32  # Claude Code's device id: 64 hex digits


def short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@pytest.fixture
def key(make_key: Any) -> str:
    return make_key("laptop", scopes=[ApiKey.Scope.CHAT, ApiKey.Scope.OPERATOR])[1]


def claude_turn(server: Any, key: str, *, user_id: str, messages: list[dict[str, Any]],
                session_header: str | None = None, stream: bool = False) -> str:
    """One Claude-Code-shaped Messages request; the thread it went to."""
    headers = {**CLAUDE_CODE, "Authorization": f"Bearer {key}"}
    if session_header:
        headers["X-Claude-Code-Session-Id"] = session_header
    r = httpx.post(f"{server.v1}/messages", timeout=30, headers=headers, json={
        "model": "echo", "max_tokens": 32000, "stream": stream, "messages": messages,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "metadata": {"user_id": user_id}})
    assert r.status_code == 200, r.text
    if stream:
        assert parse_sse(r.text).json_payloads()[-1]["type"] == "message_stop"
    return r.headers["x-gaia-thread-id"]


def thread_of(server: Any, key: str, thread_id: str) -> dict[str, Any]:
    r = httpx.get(f"{server.url}/api/v1/threads/{thread_id}", timeout=30,
                  headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


def said(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_claude_codes_json_user_id_names_the_client_and_keeps_its_session(
        gaia_server: Any, echo_agent: Any, key: str, stream: bool) -> None:
    account, session, other_session = (str(uuid.uuid4()) for _ in range(3))

    def user_id(session_id: str) -> str:  # as Claude Code 2.x writes it (JSON.stringify)
        return json.dumps({"device_id": DEVICE, "account_uuid": account,
                           "session_id": session_id}, separators=(",", ":"))

    first = claude_turn(gaia_server, key, user_id=user_id(session), session_header=session,
                        messages=[said("list the files")], stream=stream)
    shown = thread_of(gaia_server, key, first)
    name = f"claude-code:{short(account)}"
    assert shown["user"] == name
    assert shown["participants"] == [name, "echo"]
    assert not any("{" in p or account in p for p in shown["participants"])
    # the session continues its thread; another session of the same person gets its own,
    # under the same name
    reply = Thread.objects.get(pk=first).messages.get(role="assistant").content
    again = claude_turn(gaia_server, key, user_id=user_id(session), session_header=session,
                        messages=[said("list the files"), {"role": "assistant",
                                                           "content": reply},
                                  said("and the tests?")], stream=stream)
    assert again == first
    other = claude_turn(gaia_server, key, user_id=user_id(other_session),
                        session_header=other_session, messages=[said("list the files")],
                        stream=stream)
    assert other != first
    assert thread_of(gaia_server, key, other)["participants"] == [name, "echo"]


def test_an_older_claude_codes_user_id_gives_its_session_without_a_header(
        gaia_server: Any, echo_agent: Any, key: str) -> None:
    account, session = str(uuid.uuid4()), str(uuid.uuid4())
    legacy = f"user_{DEVICE}_account_{account}_session_{session}"
    thread_id = claude_turn(gaia_server, key, user_id=legacy, messages=[said("hello")])
    assert thread_of(gaia_server, key, thread_id)["participants"] == [
        f"claude-code:{short(account)}", "echo"]
    # the session id it packed is its session (as the header would have said)
    assert Thread.objects.get(pk=thread_id).session_key == f"x-claude-code-session-id:{session}"
    # no account (an API-key login): named by its device
    anonymous = claude_turn(gaia_server, key, user_id=f"user_{DEVICE}_account__session_{session}",
                            messages=[said("hi there")])
    assert thread_of(gaia_server, key, anonymous)["user"] == f"claude-code:{short(DEVICE)}"


@pytest.mark.parametrize(("agent", "label"), [("codex_cli_rs/0.169.0 (Debian 12; x86_64)", "codex"),
                                              ("python-httpx/0.28", "user")])
def test_an_unknown_json_user_is_never_a_name(gaia_server: Any, echo_agent: Any, key: str,
                                              agent: str, label: str) -> None:
    blob = '{"tenant": "acme", "person": {"email": "a@acme.example"}}'
    r = httpx.post(f"{gaia_server.v1}/chat/completions", timeout=30, json={
        "model": "echo", "user": blob, "messages": [said("hi")]},
        headers={"Authorization": f"Bearer {key}", "User-Agent": agent})
    assert r.status_code == 200, r.text
    shown = thread_of(gaia_server, key, r.headers["x-gaia-thread-id"])
    assert shown["participants"] == [f"{label}:{short(blob)}", "echo"]
    assert "acme" not in json.dumps(shown)
    # a plain user name stays as the client gave it
    r = httpx.post(f"{gaia_server.v1}/chat/completions", timeout=30, json={
        "model": "echo", "user": "alice", "messages": [said("hello")]},
        headers={"Authorization": f"Bearer {key}", "User-Agent": agent})
    assert thread_of(gaia_server, key, r.headers["x-gaia-thread-id"])["user"] == "alice"
