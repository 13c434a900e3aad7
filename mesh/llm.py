"""The narrow LLM interface tools may use, and its one concrete client.

An :data:`LLM` is ``async (system, prompt) -> LLMReply``. Agents run in their own processes, so
they build it from a small serialisable :data:`LLMSpec`::

    {"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "api_key": "...",
     "model": "my-agent-slug", "timeout": 60, "max_tokens": 256}

``kind == "openai"`` calls an OpenAI-compatible ``POST {base_url}/chat/completions``
(https://platform.openai.com/docs/api-reference/chat/create) with httpx. ``LLMReply.tokens`` is
the response's ``usage.total_tokens`` (0 when the server reports no usage).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["LLM", "LLMError", "LLMReply", "LLMSpec", "OpenAIChatLLM", "llm_from_spec"]

LLMSpec = dict[str, Any]


@dataclass(frozen=True, slots=True)
class LLMReply:
    text: str
    tokens: int


LLM = Callable[[str, str], Awaitable[LLMReply]]


class LLMError(Exception):
    """The LLM call failed (transport error, HTTP error or an unusable body)."""


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


def llm_from_spec(spec: LLMSpec | None) -> OpenAIChatLLM | None:
    """Build the LLM a spec describes; ``None`` means the deterministic tools.

    Raises ``ValueError`` for an unknown ``kind`` or a missing ``base_url``/``model``.
    """
    if not spec:
        return None
    kind = spec.get("kind", "openai")
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
