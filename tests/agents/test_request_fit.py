"""A request far over the model's window is bounded before it is tokenized (issue 26 item 8):
an 18.5 MB, 1,999-message request to the embedded agent held a core for 75 s, counting the
whole prompt once per dropped turn. Now: messages are estimated once, the prompt is cut to
what could fit, and the exact count bisects over the turns."""

from __future__ import annotations

import asyncio

import pytest

from agents.kernel import llm
from agents.kernel.exceptions import ContextTooLong
from agents.turns.requests import _turn_cuts, request_fit


class Counting:
    """A backend with a window and an exact count of one token per 3 characters, recording
    the size of every prompt it was asked to count."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.counted: list[int] = []

    def input_window(self) -> int:
        return self.window

    def count_tokens(self, request: llm.LLMRequest) -> tuple[int, bool]:
        chars = len(request.system) + sum(len(m.text) + 12 for m in request.messages)
        self.counted.append(chars)
        return chars // 3, False


class Agent:
    slug = "local"
    max_input_tokens = 0

    def __init__(self, overflow: str) -> None:
        self.context_overflow = overflow


def conversation(n: int, chars: int) -> llm.LLMRequest:
    messages = [llm.Message("user" if i % 2 == 0 else "assistant",
                            (llm.TextPart(f"{i} " + "x" * chars),)) for i in range(n)]
    return llm.LLMRequest(model="m", system="Be brief.", messages=messages,
                          max_output_tokens=100)


def test_an_18_mb_request_is_trimmed_with_a_few_bounded_counts() -> None:
    request = conversation(1_999, 9_250)  # 18.5 MB
    backend = Counting(window=8192)
    fitted = asyncio.run(request_fit(Agent("trim_oldest"), backend, request))
    assert fitted.input_tokens is not None
    assert fitted.input_tokens <= 8192 - 100
    assert fitted.request.messages[-1] == request.messages[-1]
    assert fitted.trimmed == 1_999 - len(fitted.request.messages)
    # the fewest turns dropped: one more turn would not fit
    more = request.replace(messages=request.messages[fitted.trimmed - 2:])
    assert backend.count_tokens(more)[0] > 8192 - 100
    backend.counted.pop()
    assert len(backend.counted) <= 12  # bisection, not a count per dropped turn
    assert max(backend.counted) <= (8192 - 100) * llm.MAX_CHARS_PER_TOKEN  # never all of it


def test_without_trimming_a_prompt_past_the_bound_is_refused_uncounted() -> None:
    backend = Counting(window=8192)
    with pytest.raises(ContextTooLong):
        asyncio.run(request_fit(Agent("error"), backend, conversation(1_999, 9_250)))
    assert backend.counted == []


@pytest.mark.parametrize("roles", ["uauauau", "uaaatt", "uattuatt", "ua", "u", "tt", "uuu",
                                   "atatu"])
def test_turn_cuts_are_the_turns_dropped_one_after_another(roles: str) -> None:
    names = {"u": "user", "a": "assistant", "t": "tool"}
    messages = [llm.Message(names[r], (llm.TextPart(str(i)),)) for i, r in enumerate(roles)]
    # the rule, one turn at a time: the next user message, else the call the latest results
    # answer, else the latest message alone
    expected, at = [], 0
    while True:
        rest = messages[at:]
        starts = [i for i, m in enumerate(rest) if i and m.role == "user"]
        calls = [i for i, m in enumerate(rest) if m.role == "assistant"]
        cut = starts[0] if starts else (calls[-1] if rest and rest[-1].role == "tool"
                                        and calls else len(rest) - 1)
        if cut <= 0:
            break
        at += cut
        expected.append(at)
    assert _turn_cuts(messages) == expected
