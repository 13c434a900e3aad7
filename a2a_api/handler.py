"""The A2A methods, on Gaia's turns: the ``a2a-sdk``'s JSON-RPC dispatcher parses and answers
the protocol, this :class:`Handler` does the work (the SDK's ``RequestHandler`` interface).

A task is a turn; its ``contextId`` is the turn's thread (a message naming one continues that
thread of the key's; another key's is an error, as on ``/v1``). ``SendMessage`` waits for the
task to end or to need input (a tool call waiting for an operator's approval:
``TASK_STATE_INPUT_REQUIRED``) unless ``returnImmediately``; ``SendStreamingMessage`` streams
the reply as artifact updates and ends where ``SendMessage`` would; ``SubscribeToTask`` follows
a task from any process. ``CancelTask`` stops the turn wherever it runs (the operators' kill).
Push notifications are not offered (the card says so).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from a2a_api import protocol, runs, store
from a2a_api.models import Task
from agents.infra.database import run_db
from agents.kernel.exceptions import GaiaError
from agents.models import Agent

POLL_SECONDS = 0.5  # how often a task another process runs is read while a client follows it
FOLLOW_SECONDS = 3600.0  # the longest a subscription follows a task


def _key_and_agent(context: Any) -> tuple[Any, Agent]:
    """The key and the agent the edge authorized (:func:`a2a_api.server.a2a_application`);
    raises what it found that refuses a new message (a paused agent)."""
    refusal = context.state.get("gaia.refusal")
    if refusal is not None:
        raise protocol.as_a2a_error(refusal)
    return context.state["gaia.key"], context.state["gaia.agent"]


def _key(context: Any) -> Any:
    return context.state["gaia.key"]


async def _task(params_id: str, context: Any) -> store.Snapshot:
    found = await run_db(store.task_get, task_id=params_id, api_key=_key(context))
    if found is None or found.task.agent.slug != context.state["gaia.slug"]:
        raise TaskNotFoundError(message=f"No task '{params_id}' for this key.")
    return found


class Handler(RequestHandler):
    async def _start(self, params: pb.SendMessageRequest, context: Any) -> runs.Running:
        key, agent = _key_and_agent(context)
        message = params.message
        text = protocol.message_text(message)
        if message.task_id:
            # Gaia's tasks need no input from the client once started (an approval is an
            # operator's): a message continues a conversation by its contextId
            raise UnsupportedOperationError(
                message=f"Task '{message.task_id}' takes no further messages; send a new "
                        "message with its contextId to continue the conversation.")
        context_id = message.context_id or None
        if context_id and not await run_db(store.thread_of_key, thread_id=context_id,
                                           api_key=key):
            raise InvalidParamsError(message=f"No context '{context_id}' for this key.")
        try:
            return await runs.start(agent=agent, api_key=key, text=text, context_id=context_id,
                                    message_id=message.message_id,
                                    participant=context.state.get("gaia.participant"))
        except GaiaError as exc:
            raise protocol.as_a2a_error(exc) from exc

    async def on_message_send(self, params: pb.SendMessageRequest, context: Any) -> pb.Task:
        run = await self._start(params, context)
        if params.configuration.return_immediately:
            await run.persist()
        else:
            queue = run.listen()
            try:
                while True:
                    kind, state, *_ = await queue.get()
                    if kind == "end" or state == Task.State.INPUT_REQUIRED:
                        break
            finally:
                run.listeners.discard(queue)
        return protocol.task_proto(run.snapshot(),
                                   history_length=protocol.history_length_of(params))

    async def _proto(self, task_id: str, context: Any, history_length: int | None) -> pb.Task:
        return protocol.task_proto(await _task(task_id, context), history_length=history_length)

    async def on_message_send_stream(self, params: pb.SendMessageRequest, context: Any
                                     ) -> AsyncGenerator[Any]:
        run = await self._start(params, context)
        queue = run.listen()
        first = run.snapshot()  # what it said before it was listened to: in the task itself
        try:
            await run.persist()
            yield protocol.task_proto(first, history_length=protocol.history_length_of(params))
            async for event in _follow_local(run, queue, resumed=bool(first.reply)):
                yield event
        finally:
            run.listeners.discard(queue)

    async def on_subscribe_to_task(self, params: pb.SubscribeToTaskRequest, context: Any
                                   ) -> AsyncGenerator[Any]:
        found = await _task(params.id, context)
        if found.task.done:
            raise UnsupportedOperationError(
                message=f"Task '{params.id}' has ended ({found.task.state}): GetTask reads it.")
        run = runs.running(params.id)
        if run is not None:
            queue = run.listen()
            first = run.snapshot()
            try:
                yield protocol.task_proto(first)
                async for event in _follow_local(run, queue, resumed=bool(first.reply)):
                    yield event
            finally:
                run.listeners.discard(queue)
            return
        yield protocol.task_proto(found)
        async for event in self._follow_stored(found, context):
            yield event

    async def _follow_stored(self, found: store.Snapshot, context: Any) -> AsyncGenerator[Any]:
        """A task another process runs, read every :data:`POLL_SECONDS`: each change of
        state, and at its end the reply."""
        task = found.task
        ids = {"task_id": str(task.id), "context_id": str(task.thread_id)}
        state = task.state
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FOLLOW_SECONDS
        while loop.time() < deadline:
            await asyncio.sleep(POLL_SECONDS)
            now = await _task(ids["task_id"], context)
            if now.task.state == state:
                continue
            state = now.task.state
            if now.task.done and now.reply:
                yield pb.TaskArtifactUpdateEvent(**ids, artifact=pb.Artifact(
                    artifact_id=protocol.reply_artifact_id(task.id), name="reply",
                    parts=[pb.Part(text=now.reply)]), last_chunk=True)
            yield pb.TaskStatusUpdateEvent(**ids, status=protocol.status(
                state, reason=now.task.reason, **ids))
            if now.task.done or state == Task.State.INPUT_REQUIRED:
                return

    async def on_get_task(self, params: pb.GetTaskRequest, context: Any) -> pb.Task:
        return await self._proto(params.id, context, protocol.history_length_of(params))

    async def on_list_tasks(self, params: pb.ListTasksRequest, context: Any
                            ) -> pb.ListTasksResponse:
        key = _key(context)
        agent = context.state["gaia.agent"] or await run_db(Agent.objects.get,
                                                              slug=context.state["gaia.slug"])
        state = protocol.STATE_NAMES.get(params.status, "") if params.status else ""
        page, following, total = await run_db(
            store.task_list, api_key=key, agent=agent, context_id=params.context_id,
            state=state, page_size=params.page_size, after=params.page_token)
        history = protocol.history_length_of(params)
        tasks = [protocol.task_proto(s, history_length=history) for s in page]
        if not params.include_artifacts:
            for task in tasks:
                del task.artifacts[:]
        return pb.ListTasksResponse(tasks=tasks, next_page_token=following,
                                    page_size=len(tasks), total_size=total)

    async def on_cancel_task(self, params: pb.CancelTaskRequest, context: Any) -> pb.Task:
        await _task(params.id, context)  # this key's, of this agent
        found, cancelled = await run_db(store.task_cancel, task_id=params.id,
                                        api_key=_key(context))
        assert found is not None
        if not cancelled:
            raise TaskNotCancelableError(
                message=f"Task '{params.id}' has ended ({found.task.state}).")
        return protocol.task_proto(found)

    async def on_create_task_push_notification_config(self, params: Any, context: Any) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params: Any, context: Any) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params: Any, context: Any) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params: Any, context: Any) -> None:
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params: Any, context: Any) -> Any:
        raise ExtendedAgentCardNotConfiguredError()


async def _follow_local(run: runs.Running, queue: asyncio.Queue[tuple[Any, ...]], *,
                        resumed: bool = False) -> AsyncGenerator[Any]:
    """A task this process runs, as stream events: the reply's text as it comes (one
    artifact, appended to; ``resumed``: the task the client was given holds its beginning),
    each change of state; it ends when the task ends or needs input."""
    ids = {"task_id": run.task_id, "context_id": run.context_id}
    artifact_id = protocol.reply_artifact_id(run.task_id)
    started = resumed
    while True:
        kind, *rest = await queue.get()
        if kind == "text":
            yield pb.TaskArtifactUpdateEvent(**ids, append=started, artifact=pb.Artifact(
                artifact_id=artifact_id, name="reply", parts=[pb.Part(text=rest[0])]))
            started = True
            continue
        state, reason = rest
        yield pb.TaskStatusUpdateEvent(**ids, status=protocol.status(state, reason=reason,
                                                                      **ids))
        if kind == "end" or state == Task.State.INPUT_REQUIRED:
            return
