"""The narrow LLM interface tools may use, and its one concrete client.

An :data:`LLM` is ``async (system, prompt) -> LLMReply``. Agents run in their own processes, so
they build it from a small serialisable :data:`LLMSpec`::

    {"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "api_key": "...",
     "model": "my-agent-slug", "timeout": 60, "max_tokens": 256}

``kind == "openai"`` calls an OpenAI-compatible ``POST {base_url}/chat/completions``
(https://platform.openai.com/docs/api-reference/chat/create) with httpx. ``LLMReply.tokens`` is
the response's ``usage.total_tokens`` (0 when the server reports no usage).

``kind == "host"`` asks the process that started the agent (``--serve`` only; the
:class:`mesh.run.AgentPool` answers with its ``llm_host``), over the agent's own stdio, one
JSON line each way (:class:`HostLLM`). A benchmark run's worker answers through Gaia's turn
runtime this way, with no server of its own to reach.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["LLM", "HostLLM", "LLMCall", "LLMError", "LLMReply", "LLMSpec", "OpenAIChatLLM",
           "llm_from_spec"]

LLMSpec = dict[str, Any]


@dataclass(frozen=True, slots=True)
class LLMReply:
    text: str
    tokens: int


LLM = Callable[[str, str], Awaitable[LLMReply]]


class LLMError(Exception):
    """The LLM call failed (transport error, HTTP error or an unusable body)."""


@dataclass(frozen=True, slots=True)
class LLMCall:
    """One call as the host hears of it: the calling tool's ``system`` and ``prompt``."""

    system: str
    prompt: str


class HostLLM:
    """An :data:`LLM` answered by the process that started this agent.

    A call writes ``{"llm": {"id": N, "system": ..., "prompt": ...}}`` as one line to
    ``out`` (the agent's stdout) and waits for the line ``{"llm_reply": {"id": N, "text": ...,
    "tokens": ...}}`` or ``{"llm_error": {"id": N, "error": ...}}`` on its stdin, which the
    process's stdin reader hands to :meth:`deliver`. ``timeout`` bounds each call."""

    def __init__(self, out: Any, *, timeout: float = 60.0) -> None:
        self._out = out
        self._timeout = timeout
        self._next = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}

    async def __call__(self, system: str, prompt: str) -> LLMReply:
        self._next += 1
        call_id = self._next
        waiting = self._waiting[call_id] = asyncio.get_running_loop().create_future()
        try:
            self._out.write(json.dumps({"llm": {"id": call_id, "system": system,
                                                "prompt": prompt}}) + "\n")
            self._out.flush()
            async with asyncio.timeout(self._timeout):
                answer = await waiting
        except TimeoutError as exc:
            raise LLMError(f"the host did not answer within {self._timeout:g} s") from exc
        except OSError as exc:
            raise LLMError(f"the host is gone: {exc}") from exc
        finally:
            self._waiting.pop(call_id, None)
        if "error" in answer:
            raise LLMError(str(answer["error"]))
        return LLMReply(text=str(answer.get("text") or ""), tokens=int(answer.get("tokens") or 0))

    def deliver(self, message: dict[str, Any]) -> bool:
        """Hand over a line read from stdin; ``False`` if it is not an answer to a call."""
        answer = message.get("llm_reply") or message.get("llm_error")
        if not isinstance(answer, dict):
            return False
        waiting = self._waiting.get(answer.get("id"))  # type: ignore[arg-type]
        if waiting is not None and not waiting.done():
            waiting.set_result(answer)
        return True


class OpenAIChatLLM:
    """An :data:`LLM` over an OpenAI-compatible chat completions endpoint."""

    def __init__(self, *, base_url: str, model: str, api_key: str = "",
                 timeout: float = 60.0, max_tokens: int | None = None,
                 temperature: float = 0.0) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        import httpx  # lazy: agents without an LLM never load it

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient = httpx.AsyncClient(timeout=timeout, headers=headers)

    async def __call__(self, system: str, prompt: str) -> LLMReply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": prompt},
            ],
            "temperature": self.temperature,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        import httpx

        try:
            response = await self._client.post(self.url, json=body)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise LLMError(f"{self.url}: {exc}") from exc
        try:
            text = data["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{self.url}: no choices[0].message.content") from exc
        usage = data.get("usage") or {}
        tokens = usage.get("total_tokens")
        if not isinstance(tokens, int):
            prompt_tokens = usage.get("prompt_tokens", 0)
            completion_tokens = usage.get("completion_tokens", 0)
            tokens = int(prompt_tokens or 0) + int(completion_tokens or 0)
        return LLMReply(text=str(text), tokens=tokens)

    async def aclose(self) -> None:
        await self._client.aclose()


def llm_from_spec(spec: LLMSpec | None, *, host_out: Any = None
                  ) -> OpenAIChatLLM | HostLLM | None:
    """Build the LLM a spec describes; ``None`` means the deterministic tools. A ``host``
    spec writes its calls to ``host_out`` (the serving agent's stdout).

    Raises ``ValueError`` for an unknown ``kind``, a missing ``base_url``/``model``, or a
    ``host`` spec without ``host_out``.
    """
    if not spec:
        return None
    kind = spec.get("kind", "openai")
    if kind == "host":
        if host_out is None:
            raise ValueError("a host LLM spec needs an agent started by a pool (--serve)")
        return HostLLM(host_out, timeout=float(spec.get("timeout", 60.0)))
    if kind != "openai":
        raise ValueError(f"unknown LLM kind {kind!r}")
    if not spec.get("base_url") or not spec.get("model"):
        raise ValueError("an openai LLM spec needs base_url and model")
    return OpenAIChatLLM(
        base_url=str(spec["base_url"]),
        model=str(spec["model"]),
        api_key=str(spec.get("api_key", "")),
        timeout=float(spec.get("timeout", 60.0)),
        max_tokens=int(spec["max_tokens"]) if spec.get("max_tokens") else None,
    )
