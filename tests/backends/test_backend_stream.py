"""backend_stream's provider timeout: on the first event and on every gap between events,
counted while the stream is waited for, not while its reader holds an event."""

from __future__ import annotations

import asyncio

import pytest

from agents.backends import backend_stream
from agents.kernel.exceptions import BackendTimeout
from agents.kernel.llm import TextDelta

from .conftest import ask, collect, drain


def texts(events):
    return [e.text for e in events if isinstance(e, TextDelta)]


async def test_a_gap_longer_than_the_timeout_is_a_backend_timeout(new_provider):
    provider = new_provider("fake", timeout_seconds=0.3,
                            options={"reply": "a b c", "delay_ms": 900})
    seen = []
    with pytest.raises(BackendTimeout) as caught:
        await asyncio.wait_for(drain(backend_stream(provider, ask()), seen), 5)
    assert caught.value.status == 504
    assert "did not answer within 0.3 s" in caught.value.message
    assert texts(seen) == ["a"]


async def test_a_first_event_later_than_the_timeout_is_a_backend_timeout(new_provider):
    provider = new_provider("fake", timeout_seconds=0.3,
                            options={"reply": "a b", "ttft_ms": 900})
    with pytest.raises(BackendTimeout):
        await asyncio.wait_for(collect(backend_stream(provider, ask())), 5)


async def test_a_stream_longer_than_the_timeout_with_short_gaps_completes(new_provider):
    provider = new_provider("fake", timeout_seconds=0.4,
                            options={"reply": "a b c d e f", "delay_ms": 120})
    events = await asyncio.wait_for(collect(backend_stream(provider, ask())), 5)
    assert texts(events) == ["a", " b", " c", " d", " e", " f"]  # 0.6 s of gaps in all


async def test_time_the_reader_spends_on_an_event_does_not_count(new_provider):
    provider = new_provider("fake", timeout_seconds=0.2, options={"reply": "a b c"})
    seen = []
    async for event in backend_stream(provider, ask()):
        seen.append(event)
        await asyncio.sleep(0.5)  # the reader is busy: the provider is not late
    assert texts(seen) == ["a", " b", " c"]


async def test_a_cancelled_reader_is_cancelled_not_timed_out(new_provider):
    provider = new_provider("fake", timeout_seconds=0.3,
                            options={"reply": "a b", "delay_ms": 5000})
    task = asyncio.ensure_future(collect(backend_stream(provider, ask())))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_the_redactor_finds_a_secret_split_across_pieces_and_holds_nothing_else() -> None:
    from agents.backends.upstream import REDACTED, Redactor

    secret = "sk-live-0123456789"
    redactor = Redactor([secret, "short", ""])
    assert redactor.secrets == [secret]  # "short" is no credential (SECRET_MIN_CHARS)
    text = f"a {secret} b {secret[:5]}|{secret[5:]} c {secret[:7]}"
    for cut in range(1, len(text)):
        pieces = [text[:cut], text[cut:]]
        out = [redactor.feed("t", p) for p in pieces] + [t for _, t in redactor.flush()]
        joined = "".join(out)
        assert secret not in joined
        assert joined == f"a {REDACTED} b {secret[:5]}|{secret[5:]} c {secret[:7]}"
    assert redactor.feed("t", "nothing like it") == "nothing like it"  # not delayed
