"""``a2a:<name>``: a remote A2A agent (:class:`agents.models.A2aAgent`) as a tool the model
sees as ``a2a__<name>``, asked through the official ``a2a-sdk`` client.

A call reads the remote agent's card, checks where it says to send the task (its JSON-RPC
interface must be the URL the admin declared, or one ``GAIA_A2A_ALLOWED_URLS`` lists, compared
parsed: a card cannot send the admin's credentials to another host), streams the task to its
end and gives the model the reply. A remote task that waits for its own operator
(``TASK_STATE_INPUT_REQUIRED``) is followed on (``SubscribeToTask``) until it ends or the call's
time budget runs out; a call that is stopped (its turn killed, its budget spent) cancels the
remote task (``CancelTask``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents.models import A2aAgent
from agents.selectors.urls import url_listed
from agents.tools.base import ToolResult

CANCEL_SECONDS = 5.0  # for the remote CancelTask of a call that was stopped
DESCRIPTION_CHARS = 1000


@dataclass(frozen=True)
class A2aConfig:
    name: str
    url: str
    headers: tuple[tuple[str, str], ...]
    description: str
    require_approval: bool
    timeout: float


def a2a_configs_load(*, names: list[str]) -> dict[str, A2aConfig]:
    """The enabled remote agents ``names``, their headers read from the environment (a
    database thread)."""
    return {a.name: A2aConfig(
        name=a.name, url=a.url, description=a.description[:DESCRIPTION_CHARS],
        headers=tuple(sorted((k, os.environ.get(v, "")) for k, v in (a.headers_env or {}).items())),
        require_approval=a.require_approval, timeout=a.timeout_seconds)
        for a in A2aAgent.objects.filter(name__in=names, enabled=True)}


def _text(parts: Any) -> str:
    return "".join(p.text for p in parts if p.WhichOneof("content") == "text")


class _Progress:
    """What the remote task said so far."""

    def __init__(self) -> None:
        self.task_id = ""
        self.state = 0
        self.reply: dict[str, str] = {}  # artifact id -> its text
        self.status_text = ""

    def absorb(self, response: Any) -> None:
        from a2a.types import a2a_pb2 as pb

        kind = response.WhichOneof("payload")
        if kind == "task":
            task = response.task
            self.task_id, self.state = task.id, task.status.state
            self.status_text = _text(task.status.message.parts)
            if task.artifacts:
                self.reply = {a.artifact_id: _text(a.parts) for a in task.artifacts}
        elif kind == "message":  # a reply without a task
            self.reply = {"": _text(response.message.parts)}
            self.state = pb.TaskState.TASK_STATE_COMPLETED
        elif kind == "status_update":
            update = response.status_update
            self.task_id, self.state = update.task_id, update.status.state
            self.status_text = _text(update.status.message.parts)
        elif kind == "artifact_update":
            update = response.artifact_update
            text = _text(update.artifact.parts)
            key = update.artifact.artifact_id
            self.reply[key] = self.reply.get(key, "") + text if update.append else text


async def a2a_ask(config: A2aConfig, task: str) -> ToolResult:
    """Ask the remote agent ``task``; its reply, or why there is none, as the result."""
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.client.errors import A2AClientError
    from a2a.types import a2a_pb2 as pb

    name = f"a2a__{config.name}"
    progress = _Progress()
    async with httpx.AsyncClient(headers=dict(config.headers),
                                 timeout=httpx.Timeout(config.timeout, connect=10)) as http:
        try:
            card = await A2ACardResolver(http, config.url).get_agent_card()
        except (A2AClientError, httpx.HTTPError, ValueError) as exc:
            return ToolResult(f"{name}: its agent card could not be read: {exc}", is_error=True)
        interfaces = [i for i in card.supported_interfaces if i.protocol_binding == "JSONRPC"]
        refused = [i.url for i in interfaces
                   if not url_listed(i.url, [config.url, *settings.GAIA_A2A_ALLOWED_URLS])]
        if not interfaces or refused:
            return ToolResult(f"{name}: its card names an address Gaia may not call "
                              f"({', '.join(refused) or 'no JSON-RPC interface'}); an admin may "
                              "list it in GAIA_A2A_ALLOWED_URLS.", is_error=True)
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        message = pb.Message(message_id=uuid.uuid4().hex, role=pb.Role.ROLE_USER,
                             parts=[pb.Part(text=task)])
        try:
            async for response in client.send_message(pb.SendMessageRequest(message=message)):
                progress.absorb(response)
            while progress.state in (pb.TaskState.TASK_STATE_INPUT_REQUIRED,
                                     pb.TaskState.TASK_STATE_WORKING,
                                     pb.TaskState.TASK_STATE_SUBMITTED) and progress.task_id:
                # it waits (for its operator) or the stream ended early: follow it on
                async for response in client.subscribe(pb.SubscribeToTaskRequest(
                        id=progress.task_id)):
                    progress.absorb(response)
        except asyncio.CancelledError:
            await _cancel(client, progress.task_id)
            raise
        except (A2AClientError, httpx.HTTPError) as exc:
            return ToolResult(f"{name}: {exc}", is_error=True)
    state = progress.state
    reply = "\n\n".join(t for t in progress.reply.values() if t).strip()
    if state == pb.TaskState.TASK_STATE_COMPLETED:
        return ToolResult(reply or "(no answer)")
    verdict = pb.TaskState.Name(state).removeprefix("TASK_STATE_").lower()
    return ToolResult(f"{name}: the remote task ended {verdict}"
                      f"{': ' + progress.status_text if progress.status_text else ''}",
                      is_error=True)


async def _cancel(client: Any, task_id: str) -> None:
    """Cancel the remote task of a call that was stopped (best effort, bounded)."""
    if not task_id:
        return
    from a2a.types import a2a_pb2 as pb

    with contextlib.suppress(Exception):
        async with asyncio.timeout(CANCEL_SECONDS):
            await asyncio.shield(client.cancel_task(pb.CancelTaskRequest(id=task_id)))
