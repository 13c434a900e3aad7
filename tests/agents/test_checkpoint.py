"""A streaming reply's checkpoints (agents/turns/checkpoint.py) are bounded: one write per
GAIA_REPLY_CHECKPOINT_CHARS characters or GAIA_REPLY_CHECKPOINT_SECONDS at most, never per
token, none when switched off. (That they reach the database and survive a kill -9 is tested
against real servers in test_crash_leftovers.py.)"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from agents import services
from agents.kernel import llm
from agents.turns.checkpoint import Checkpoint
from agents.turns.reply import Reply


def a_turn() -> SimpleNamespace:
    return SimpleNamespace(start=SimpleNamespace(thread_id=uuid.uuid4()), lease_token="t",
                           reply=Reply())


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    texts: list[str] = []

    def keep(*, thread_id: uuid.UUID, lock_token: str, text: str) -> bool:
        texts.append(text)
        return True

    monkeypatch.setattr(services, "thread_reply_checkpoint", keep)
    return texts


async def stream(turn: SimpleNamespace, checkpoint: Checkpoint, tokens: int) -> None:
    for i in range(tokens):
        event = llm.TextDelta(f"w{i % 10} ")  # 3 characters
        turn.reply.absorb(event)
        checkpoint.offer(turn, event)
        await asyncio.sleep(0)  # the event loop turns between tokens, as with a provider
    while checkpoint._writing is not None and not checkpoint._writing.done():
        await asyncio.sleep(0.01)


async def test_checkpoints_come_per_chars_not_per_token(settings, written):
    settings.GAIA_REPLY_CHECKPOINT_SECONDS = 3600
    settings.GAIA_REPLY_CHECKPOINT_CHARS = 300
    turn, checkpoint = a_turn(), Checkpoint()
    await stream(turn, checkpoint, 1000)  # 3,000 characters
    assert 1 <= len(written) <= 10
    assert checkpoint.writes == len(written)
    text = "".join(turn.reply.text)
    assert all(text.startswith(w) for w in written)
    assert all(len(b) - len(a) >= 300 for a, b in zip(written, written[1:], strict=False))


async def test_checkpoints_come_per_interval_on_a_slow_stream(settings, written):
    settings.GAIA_REPLY_CHECKPOINT_SECONDS = 0.05
    settings.GAIA_REPLY_CHECKPOINT_CHARS = 10**6
    turn, checkpoint = a_turn(), Checkpoint()
    for _ in range(4):
        await stream(turn, checkpoint, 3)
        await asyncio.sleep(0.06)
    await stream(turn, checkpoint, 1)
    # One after each pause longer than the interval; never one per token (13 of them).
    assert 4 <= len(written) <= 8


async def test_checkpoints_off(settings, written):
    settings.GAIA_REPLY_CHECKPOINT_SECONDS = 0
    turn, checkpoint = a_turn(), Checkpoint()
    await stream(turn, checkpoint, 1000)
    assert written == []


async def test_no_checkpoint_before_the_turn_holds_its_thread(settings, written):
    settings.GAIA_REPLY_CHECKPOINT_CHARS = 1
    turn, checkpoint = a_turn(), Checkpoint()
    turn.start = None  # a derived session's turn is stored while its provider answers
    await stream(turn, checkpoint, 10)
    assert written == []
    turn.start = SimpleNamespace(thread_id=uuid.uuid4())
    await stream(turn, checkpoint, 1)
    assert written == ["".join(turn.reply.text)]  # all of it, once it can
