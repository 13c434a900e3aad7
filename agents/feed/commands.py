"""What the feed's consumer (:mod:`agents.feed.consumers`) reads: JSON commands, each
answered by an ``ack`` or an ``error`` (what the REST API answers for the same refusal: one
rule in the core for both), and a socket's first message ``auth`` for browsers."""

from __future__ import annotations

import logging
from typing import Any

from agents import services, turns
from agents.feed.input import (
    agent_get,
    command_parse,
    command_thread_id,
    required_str,
    str_list,
    thread_get,
)
from agents.infra.database import run_db
from agents.kernel.exceptions import GaiaError, InvalidRequest
from agents.models import ApiKey
from agents.outlet import realtime

log = logging.getLogger("gaia.feed")

COMMANDS = ("auth", "subscribe", "inject", "kill", "pause", "resume", "approve", "deny")
CLOSE_UNAUTHENTICATED = 4001  # RFC 6455 leaves 4000-4999 to applications: 4xxx mirrors HTTP


class FeedCommands:
    """The incoming half of :class:`agents.feed.consumers.FeedConsumer`, which holds the state
    annotated here, authenticates (``_authenticate_key``, ``_refuse``) and answers
    (:class:`agents.feed.sending.FeedSending`'s ``_reply`` and ``_error``)."""

    closed: bool
    authenticated: bool
    api_key: ApiKey | None
    user_label: str | None
    scope: dict[str, Any]
    threads: frozenset[str]
    agents: frozenset[str]
    events: frozenset[str]

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:
        if self.closed:
            return
        # The rule every JSON input follows, before anything reads it (commands are text
        # frames): refused here, authenticated or not.
        content, problem, cmd_id = command_parse(text_data)
        if content is None:
            if not self.authenticated:
                await self._refuse(CLOSE_UNAUTHENTICATED, "first message must be auth")
                return
            self._error(cmd_id, problem or InvalidRequest("Not a command."))
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        cmd = content.get("cmd")
        if not self.authenticated:
            if cmd == "auth" and isinstance(content.get("api_key"), str):
                await self._authenticate_key(content["api_key"])
            else:
                await self._refuse(CLOSE_UNAUTHENTICATED, "first message must be auth")
            return
        cmd_id = content.get("id")
        if cmd not in COMMANDS:
            self._error(cmd_id, InvalidRequest(
                f"Unknown command {cmd!r}; one of {', '.join(COMMANDS)}.", param="cmd",
                code="unknown_command"))
            return
        try:
            if self.api_key is not None and self.api_key.requests_per_minute:
                # a command counts against the key's budget as a REST request does
                await run_db(services.api_key_throttle, key=self.api_key)
            result = await getattr(self, f"cmd_{cmd}")(content)
        except GaiaError as exc:
            self._error(cmd_id, exc)
            return
        except Exception:
            log.exception("feed command %r failed", cmd)
            self._error(cmd_id, GaiaError("Internal error.", code="internal_error"))
            return
        self._reply(content, **result)

    def actor(self) -> services.Actor:  # who this socket's commands are from (audit trail)
        return services.audit_actor(user=self.scope.get("user"), api_key=self.api_key,
                                    channel="ws", ip=(self.scope.get("client") or (None,))[0])

    async def cmd_auth(self, content: dict[str, Any]) -> dict[str, Any]:
        return {}  # already authenticated

    async def cmd_subscribe(self, content: dict[str, Any]) -> dict[str, Any]:
        threads = str_list(content, "threads")
        agents = str_list(content, "agents")
        events = str_list(content, "events")
        unknown = sorted(events - set(realtime.EVENT_FIELDS))
        if unknown:
            raise InvalidRequest(f"Unknown event types: {', '.join(unknown)}.", param="events",
                                 code="unknown_event")
        self.threads, self.agents, self.events = threads, agents, events
        turns.snapshots_request(thread_ids=threads)
        return {"threads": sorted(threads), "agents": sorted(agents), "events": sorted(events)}

    async def cmd_inject(self, content: dict[str, Any]) -> dict[str, Any]:
        # The command's fields are POST /api/v1/inject's body: one parser answers both.
        body = turns.inject_parse({k: v for k, v in content.items() if k not in ("cmd", "id")})
        injected = await turns.inject(
            to=body.to, payload=body.payload, thread_id=body.thread_id, api_key=self.api_key,
            operator=self.user_label, actor=self.actor())
        return {"thread_id": injected.thread_id, "message_id": injected.message_id}

    async def cmd_kill(self, content: dict[str, Any]) -> dict[str, Any]:
        thread = await run_db(thread_get, command_thread_id(content, required=True))
        running = await run_db(services.thread_kill, thread=thread,
                               api_key=self.api_key, actor=self.actor())
        return {"thread_id": str(thread.pk), "running": running}

    async def _set_paused(self, content: dict[str, Any], paused: bool) -> dict[str, Any]:
        agent = await run_db(agent_get, required_str(content, "agent"))
        await run_db(services.agent_set_paused, agent=agent, paused=paused,
                     api_key=self.api_key, actor=self.actor())
        return {"agent": agent.slug, "paused": paused}

    async def cmd_pause(self, content: dict[str, Any]) -> dict[str, Any]:
        return await self._set_paused(content, True)

    async def cmd_resume(self, content: dict[str, Any]) -> dict[str, Any]:
        return await self._set_paused(content, False)

    async def _decide(self, content: dict[str, Any], decision: str) -> dict[str, Any]:
        reason = content.get("reason") or ""
        if not isinstance(reason, str):
            raise InvalidRequest("'reason' is a string.", param="reason")
        approval = await run_db(
            services.approval_decide, approval_id=required_str(content, "approval_id"),
            decision=decision, reason=reason, api_key=self.api_key,
            decided_by=services.approval_decider(api_key=self.api_key, username=self.user_label),
            actor=self.actor())
        return {"approval_id": str(approval.pk), "status": approval.status}

    async def cmd_approve(self, content: dict[str, Any]) -> dict[str, Any]:
        return await self._decide(content, "approve")

    async def cmd_deny(self, content: dict[str, Any]) -> dict[str, Any]:
        return await self._decide(content, "deny")
