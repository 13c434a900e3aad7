"""Gaia's tasks in the A2A protocol's own types (``a2a.types``, the normative ``a2a.proto``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InvalidParamsError,
    InvalidRequestError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from a2a_api.models import Task
from a2a_api.store import Snapshot

STATES = {
    Task.State.WORKING: pb.TaskState.TASK_STATE_WORKING,
    Task.State.INPUT_REQUIRED: pb.TaskState.TASK_STATE_INPUT_REQUIRED,
    Task.State.COMPLETED: pb.TaskState.TASK_STATE_COMPLETED,
    Task.State.FAILED: pb.TaskState.TASK_STATE_FAILED,
    Task.State.CANCELED: pb.TaskState.TASK_STATE_CANCELED,
}
STATE_NAMES = {v: k for k, v in STATES.items()}
MAX_DATA_CHARS = 200_000  # a data part as the agent reads it (JSON), past which it is refused


def reply_artifact_id(task_id: Any) -> str:
    return f"{task_id}-reply"


def message_text(message: pb.Message) -> str:
    """The client's message as the agent reads it: its text parts, and its data parts as
    JSON. Raises for a part Gaia's agents cannot read (a file, raw bytes, a URL)."""
    texts = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            data = json.dumps(MessageToDict(part.data), ensure_ascii=False)
            if len(data) > MAX_DATA_CHARS:
                raise InvalidParamsError(message=f"A data part may be at most {MAX_DATA_CHARS} "
                                                 "characters as JSON.")
            texts.append(data)
        else:
            raise ContentTypeNotSupportedError(
                message=f"Gaia's agents read text and data parts; a {kind or 'empty'} part "
                        "is not supported.")
    text = "\n\n".join(t for t in texts if t)
    if not text.strip():
        raise InvalidParamsError(message="The message has no text: send a text or data part.")
    return text


def _stamp(when: datetime | None = None) -> Any:
    stamp = Timestamp()
    stamp.FromDatetime((when or datetime.now(UTC)).astimezone(UTC))
    return stamp


def agent_message(text: str, *, task_id: Any, context_id: Any, message_id: str) -> pb.Message:
    return pb.Message(message_id=message_id, context_id=str(context_id), task_id=str(task_id),
                      role=pb.Role.ROLE_AGENT, parts=[pb.Part(text=text)])


def status(state: str, *, reason: str = "", task_id: Any = "", context_id: Any = "",
           when: datetime | None = None) -> pb.TaskStatus:
    message = None
    if reason:
        message = agent_message(reason, task_id=task_id, context_id=context_id,
                                message_id=f"{task_id}-status")
    return pb.TaskStatus(state=STATES[state], message=message, timestamp=_stamp(when))


def task_proto(snapshot: Snapshot, *, history_length: int | None = None) -> pb.Task:
    """The task as the protocol shows it: its state (with the reason it failed or was
    canceled), the reply as its artifact, the exchange as its history (the last
    ``history_length`` messages; ``None``: all), Gaia's agent and token usage as metadata."""
    task = snapshot.task
    ids = {"task_id": task.id, "context_id": task.thread_id}
    history = [pb.Message(message_id=task.message_id or f"{task.id}-in",
                          context_id=str(task.thread_id), task_id=str(task.id),
                          role=pb.Role.ROLE_USER, parts=[pb.Part(text=task.text)])]
    artifacts = []
    if snapshot.reply:
        artifacts.append(pb.Artifact(artifact_id=reply_artifact_id(task.id), name="reply",
                                     parts=[pb.Part(text=snapshot.reply)]))
        if task.done:
            history.append(agent_message(snapshot.reply, message_id=f"{task.id}-out", **ids))
    if history_length is not None:
        history = history[len(history) - history_length:] if history_length > 0 else []
    out = pb.Task(id=str(task.id), context_id=str(task.thread_id),
                  status=status(task.state, reason=task.reason, when=task.updated_at, **ids),
                  artifacts=artifacts, history=history)
    out.metadata.update({"agent": task.agent.slug, "usage": {
        "input_tokens": task.input_tokens, "output_tokens": task.output_tokens}})
    return out


def history_length_of(params: Any) -> int | None:
    holder = getattr(params, "configuration", params)
    try:
        return holder.history_length if holder.HasField("history_length") else None
    except ValueError:  # no such field
        return None


def as_a2a_error(exc: Any) -> A2AError:
    """A Gaia refusal (:class:`agents.kernel.exceptions.GaiaError`) as the protocol's error."""
    status_code = getattr(exc, "status", 500)
    message = getattr(exc, "message", str(exc))
    if status_code in (400, 404, 413):
        return InvalidParamsError(message=message)
    if status_code in (401, 403):
        return InvalidRequestError(message=message)
    return UnsupportedOperationError(message=message)  # paused, busy, overloaded: not now
