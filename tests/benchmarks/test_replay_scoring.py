"""Scoring a replayed reply: the embedding model loads with the network unreachable, the
judge's verdict is read strictly, and the word diff says what changed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.replay import scoring
from benchmarks.replay.reads import word_diff
from tests.conftest import ROOT

# Run in a fresh interpreter whose every socket connection and name lookup fails: loading the
# model (and scoring) must not need the network at all.
OFFLINE = """
import socket
def unreachable(*args, **kwargs):
    raise OSError("network unreachable (test)")
socket.socket.connect = unreachable
socket.socket.connect_ex = unreachable
socket.getaddrinfo = unreachable
socket.create_connection = unreachable
from benchmarks.replay.scoring import similarity
near = similarity("The capital of France is Paris.", "Paris is the capital city of France.")
far = similarity("The capital of France is Paris.", "I like green apples.")
print(near, far)
"""


def test_the_embedding_model_loads_with_the_network_unreachable() -> None:
    done = subprocess.run([sys.executable, "-c", OFFLINE], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                       "HF_HUB_OFFLINE": "0", "HOME": "/tmp"})
    assert done.returncode == 0, done.stderr[-3000:]
    near, far = (float(x) for x in done.stdout.split())
    assert near > 0.8
    assert far < 0.3


@pytest.mark.parametrize(("text", "expected"), [
    ('{"score": 0.5, "verdict": "worse", "reason": "Misses the date."}',
     (0.5, "worse", "Misses the date.")),
    ('```json\n{"score": 1, "verdict": "better", "reason": "More precise."}\n```',
     (1.0, "better", "More precise.")),
])
def test_a_judges_verdict(text: str, expected: tuple[float, str, str]) -> None:
    assert scoring.judge_parse(text) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("Looks good!", "did not answer JSON"),
    ("[1, 2]", "not an object"),
    ('{"score": 7, "verdict": "same", "reason": "x"}', "not a number from 0 to 1"),
    ('{"score": true, "verdict": "same", "reason": "x"}', "not a number from 0 to 1"),
    ('{"score": 0.2, "verdict": "meh", "reason": "x"}', "not better/same/worse"),
    ('{"score": 0.2, "verdict": "same"}', "gave no reason"),
])
def test_a_judges_garbage_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        scoring.judge_parse(text)


def test_scores_and_word_diff() -> None:
    got = scoring.score("The answer is 2.", "The answer is 2.")
    assert (got.exact_match, got.f1, got.rouge_l) == (1.0, 1.0, 1.0)
    assert got.similarity == pytest.approx(1.0, abs=1e-3)
    assert scoring.score("", "x").similarity is None
    assert word_diff("a b c d", "a x c d e") == [["=", "a"], ["-", "b"], ["+", "x"],
                                                ["=", "c d"], ["+", "e"]]
    assert scoring.outcome(0.9, 0.7) == "win"
    assert scoring.outcome(0.71, 0.7) == "tie"
    assert scoring.outcome(None, 0.7) is None
