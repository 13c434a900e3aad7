"""What one ``/v1`` create view needs of a dialect (Chat Completions, Responses, Messages):
how it parses a request, names its reply, spells its fields in errors, renders a JSON reply
and streams one. :class:`openai_api.apis.ModelCreateApi` is configured with one of these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents import turns
from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from openai_api.sse import Frames


@dataclass
class Parsed:
    """A request as its dialect read it: the dialect's own model of it (``body``), Gaia's
    canonical request, whether to stream, and what else the dialect needs to answer."""

    body: Any
    request: llm.LLMRequest
    stream: bool
    previous_response_id: str | None = None
    conversation_id: str | None = None  # the Responses API's ``conversation``
    extra: dict[str, Any] = field(default_factory=dict)


class Dialect:
    name = ""  # the turn's dialect (stored on its messages): chat, responses, messages
    errors = "openai"  # the error envelope (openai_api.errors): openai or anthropic
    images_param = "messages"  # the field that carries images, as the dialect spells it
    params: dict[str, str] = {}  # Gaia's name of a request field -> the dialect's

    def new_id(self) -> str:
        """A new reply's id, in the dialect's own shape."""
        raise NotImplementedError

    def parse(self, data: dict[str, Any]) -> Parsed:
        """``data`` (a JSON object) as a request; raises :class:`InvalidRequest`."""
        raise NotImplementedError

    def rename(self, exc: InvalidRequest) -> None:
        """Name the field an error of the turn's opening is about as this dialect spells it."""
        if exc.code == "images_not_supported":
            exc.param = self.images_param
        elif exc.code == "unsupported_parameter" and exc.param in self.params:
            spelled = self.params[exc.param]
            exc.message = exc.message.replace(f"'{exc.param}'", f"'{spelled}'")
            exc.param = spelled

    def render(self, parsed: Parsed, turn: turns.TurnLike, result: Any) -> dict[str, Any]:
        """The JSON reply of a turn that has ended with ``result``."""
        raise NotImplementedError

    async def frames(self, parsed: Parsed, turn: turns.TurnLike) -> Frames:
        """How an opened turn's reply streams (before its first token is known)."""
        raise NotImplementedError
