"""Text completion (``/v1/completions``): a prompt to continue, and for fill-in-the-middle the
text after the cursor (``suffix``).

A completion travels as any turn's request does (:class:`agents.kernel.llm.LLMRequest`: its one user
message is the prompt, so the thread, the feed and usage treat it as a turn), marked by
``extra["completion"]`` = ``{"prompt": ..., "suffix": ...}``. A backend that completes text
itself says so (``completes``: the ``local`` kind, and an ``openai`` provider whose
``options.completions`` is true, which forwards to its upstream's ``/v1/completions``); every
other provider is asked as a chat model, by :func:`completion_as_chat` (one place,
:func:`agents.backends.backend_stream`, whatever the provider chain holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.kernel.llm import LLMRequest, Message, TextPart

COMPLETION = "completion"  # the LLMRequest.extra key

CONTINUE_INSTRUCTIONS = (
    "You are a text completion engine. Continue the user's text exactly where it stops. "
    "Answer with the continuation only: no explanation, no repetition of the text, no code "
    "fences.")
FILL_INSTRUCTIONS = (
    "You are a fill-in-the-middle completion engine. The user's message holds the text "
    "before the cursor, then the marker <CURSOR>, then the text after it. Answer with only "
    "the text that belongs at <CURSOR>, so that before + your answer + after reads as one: "
    "no explanation, no repetition of the surrounding text, no code fences.")
CURSOR = "<CURSOR>"


@dataclass(frozen=True)
class Completion:
    prompt: str
    suffix: str = ""


def completion_extra(prompt: str, suffix: str | None) -> dict[str, Any]:
    """What marks a request as a completion (``LLMRequest.extra``)."""
    return {COMPLETION: {"prompt": prompt, "suffix": suffix or ""}}


def completion_of(request: LLMRequest) -> Completion | None:
    """The completion ``request`` asks for, ``None`` for a chat turn."""
    value = request.extra.get(COMPLETION)
    if not isinstance(value, dict):
        return None
    return Completion(str(value.get("prompt") or ""), str(value.get("suffix") or ""))


def completion_as_chat(request: LLMRequest) -> LLMRequest:
    """``request`` as a chat model's turn: instructions to continue the prompt (or to fill
    the gap between prompt and suffix), the text as the one user message. The agent's own
    instructions and tools are not for this (a completion engine answers text only)."""
    completion = completion_of(request)
    if completion is None:
        return request
    if completion.suffix:
        system, text = FILL_INSTRUCTIONS, completion.prompt + CURSOR + completion.suffix
    else:
        system, text = CONTINUE_INSTRUCTIONS, completion.prompt
    extra = {k: v for k, v in request.extra.items() if k != COMPLETION}
    return request.replace(system=system, messages=[Message("user", (TextPart(text),))],
                           tools=[], extra=extra)


def completion_params(request: LLMRequest, completion: Completion) -> dict[str, Any]:
    """The body of an upstream's ``/v1/completions`` request (streamed, with usage)."""
    params: dict[str, Any] = {"model": request.model, "prompt": completion.prompt,
                              "stream": True, "stream_options": {"include_usage": True}}
    if completion.suffix:
        params["suffix"] = completion.suffix
    return {**params, **sampling_params(request, extra=("seed", "frequency_penalty",
                                                         "presence_penalty"))}


def sampling_params(request: LLMRequest, *, max_tokens_param: str = "max_tokens",
                    extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """What an OpenAI-compatible upstream is told of the output's length and sampling, the
    same for /v1/chat/completions and /v1/completions (``extra``: the request's extra fields
    that endpoint takes, passed when set)."""
    params: dict[str, Any] = {}
    if request.max_output_tokens:
        params[max_tokens_param] = request.max_output_tokens
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.top_p is not None:
        params["top_p"] = request.top_p
    if request.stop:
        params["stop"] = request.stop[:4]
    if request.user:
        params["user"] = request.user
    params.update({name: request.extra[name] for name in extra
                   if request.extra.get(name) is not None})
    return params


def fim_prompt(completion: Completion, tokens: tuple[str, str, str] | None) -> str:
    """The raw text a base model continues: with fill-in-the-middle tokens ``(prefix,
    suffix, middle)`` when the model has them, ``<pre>prompt<suf>suffix<mid>``; without,
    the prompt alone (the suffix cannot be told to such a model)."""
    if tokens is None or not completion.suffix:
        return completion.prompt
    pre, suf, mid = tokens
    return f"{pre}{completion.prompt}{suf}{completion.suffix}{mid}"
