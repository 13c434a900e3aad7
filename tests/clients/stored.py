"""What Gaia stored of a client's run, as the client tests read it."""

from __future__ import annotations

from agents.models import Thread
from tests.clients.conftest import TOOL_WORD


def only_thread(slug: str) -> Thread:
    """The agent's one thread: a tool round trip continues the thread, never forks it."""
    threads = list(Thread.objects.filter(agent__slug=slug))
    assert len(threads) == 1, threads
    return threads[0]


def assert_stored_tool_turn(slug: str) -> None:
    """The agent's thread holds the question, the call, the tool's result (the tests' tool
    word) and the answer, in that order."""
    thread = only_thread(slug)
    roles = list(thread.messages.filter(internal=False).order_by("seq")
                 .values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert thread.messages.get(role="tool", internal=False).content.strip() == TOOL_WORD
