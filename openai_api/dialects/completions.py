"""OpenAI's legacy Completions API (``POST /v1/completions``): a prompt to continue, with
``suffix`` for fill-in-the-middle (autocomplete clients: Continue's tab completion,
LlamaIndex's default ``OpenAI`` class). https://platform.openai.com/docs/api-reference/completions

A completion is a turn of the agent like a chat request (keys, usage, the feed, a stored
thread of its own: two messages, the prompt and the continuation), marked as a completion
(:mod:`agents.backends.completion`) so that the provider continues the text rather than
chats: raw completion on the ``local`` kind, the upstream's own ``/v1/completions`` on an
``openai`` provider that has one, else the chat model told to continue or fill in. One prompt
and one choice per request (``n``, ``best_of``: 1); token-array prompts, ``logprobs`` and
``logit_bias`` are refused with a 400 naming them, never dropped.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from agents.turns import COMPLETION_CURSOR as CURSOR
from agents.turns import completion_extra
from openai_api.dialects.base import Dialect, Parsed
from openai_api.dialects.chat import StreamOptionsIn, usage_out
from openai_api.dialects.common import validate
from openai_api.errors import openai_error_body
from openai_api.sse import SSE_DONE, Frames, sse_data

FINISH = {"stop": "stop", "length": "length", "content_filter": "content_filter"}
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this API


class CompletionRequestIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    prompt: Any = None  # a string, or a list of one string (checked in parse_request)
    suffix: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    n: int | None = Field(default=None, ge=1, le=1)
    best_of: int | None = Field(default=None, ge=1, le=1)
    stream: bool | None = False
    stream_options: StreamOptionsIn | None = None
    logprobs: int | None = Field(default=None, ge=0, le=0)
    echo: bool | None = False
    stop: str | list[str] | None = Field(default=None)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, Any] | None = None
    seed: int | None = None
    user: str | None = None


def prompt_text(value: Any) -> str:
    """The one prompt of a request: a string, or a list holding one string. A list of
    several prompts, or token ids, is refused (400)."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return value[0]
    if isinstance(value, str):
        return value
    if value is None:
        raise InvalidRequest("'prompt' is required.", param="prompt")
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        raise InvalidRequest("One prompt per request: send each of these as its own request.",
                             param="prompt", code="unsupported_value")
    if isinstance(value, list) and value and all(
            isinstance(x, int) or isinstance(x, list) for x in value):
        raise InvalidRequest("Token-id prompts are not supported: send the prompt as text.",
                             param="prompt", code="unsupported_value")
    raise InvalidRequest("'prompt' must be a string (or a list of one string).",
                         param="prompt")


def parse_request(data: dict[str, Any]) -> tuple[CompletionRequestIn, llm.LLMRequest]:
    req: CompletionRequestIn = validate(CompletionRequestIn, data)
    prompt = prompt_text(req.prompt)
    if not prompt and not req.suffix:
        raise InvalidRequest("'prompt' must not be empty.", param="prompt")
    if req.logit_bias:
        raise InvalidRequest("'logit_bias' is not supported on /v1/completions.",
                             param="logit_bias", code="unsupported_parameter")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stop) > 4:
        raise InvalidRequest("At most 4 stop sequences.", param="stop")
    extra: dict[str, Any] = completion_extra(prompt, req.suffix)
    for name in ("seed", "frequency_penalty", "presence_penalty"):
        value = getattr(req, name)
        if value:  # zero penalties change nothing: not a field a provider must honour
            extra[name] = value
    # The thread keeps what the client sent: the prompt, and the suffix after a cursor mark.
    text = prompt + CURSOR + req.suffix if req.suffix else prompt
    canonical = llm.LLMRequest(
        model=req.model, system="", messages=[llm.Message("user", (llm.TextPart(text),))],
        max_output_tokens=req.max_tokens or DEFAULT_MAX_TOKENS, temperature=req.temperature,
        top_p=req.top_p, stop=stop, user=req.user, extra=extra)
    return req, canonical


def _choice(text: str, finish: str | None) -> dict[str, Any]:
    return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}


def _finish(reason: str) -> str:
    return FINISH.get(reason, "stop")


class CompletionChunks:
    """Canonical events as ``text_completion`` SSE chunks."""

    def __init__(self, *, response_id: str, model: str, echo: str, include_usage: bool
                 ) -> None:
        self.head = {"id": response_id, "object": "text_completion",
                     "created": int(time.time()), "model": model}
        self.echo, self.include_usage = echo, include_usage

    def _chunk(self, text: str, finish: str | None = None) -> bytes:
        return sse_data({**self.head, "choices": [_choice(text, finish)],
                         "system_fingerprint": None})

    def start(self) -> bytes:
        return self._chunk(self.echo) if self.echo else b""

    def event(self, event: llm.Event) -> bytes:
        if isinstance(event, llm.TextDelta):
            return self._chunk(event.text) if event.text else b""
        if isinstance(event, llm.Finish):
            return self._chunk("", _finish(event.reason))
        return b""  # reasoning, tool activity: a completion is its text only

    def usage(self, usage: llm.Usage) -> bytes:
        if not self.include_usage:
            return b""
        return sse_data({**self.head, "choices": [], "usage": usage_out(usage),
                         "system_fingerprint": None})


class Completions(Dialect):
    """``POST /v1/completions``."""

    name = "completions"

    def new_id(self) -> str:
        return f"cmpl-{uuid.uuid4().hex[:24]}"

    def parse(self, data: dict[str, Any]) -> Parsed:
        req, canonical = parse_request(data)
        return Parsed(req, canonical, bool(req.stream),
                      extra={"echo": prompt_text(req.prompt) if req.echo else ""})

    def render(self, parsed: Parsed, turn: Any, result: Any) -> dict[str, Any]:
        return {
            "id": turn.spec.response_id, "object": "text_completion",
            "created": int(time.time()), "model": turn.model,
            "choices": [_choice(parsed.extra["echo"] + result.text,
                                _finish(result.finish_reason))],
            "usage": usage_out(turn.usage), "system_fingerprint": None,
        }

    async def frames(self, parsed: Parsed, turn: Any) -> Frames:
        options = parsed.body.stream_options
        chunks = CompletionChunks(response_id=turn.spec.response_id, model=turn.model,
                                  echo=parsed.extra["echo"],
                                  include_usage=bool(options and options.include_usage))
        return Frames(start=chunks.start(), render=chunks.event,
                      finish=lambda: chunks.usage(turn.usage),
                      fail=lambda exc: sse_data(openai_error_body(exc)), done=SSE_DONE)


DIALECT = Completions()
