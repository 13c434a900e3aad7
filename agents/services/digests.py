"""What identifies a conversation: the chain of digests of its messages (a client resending
its history is matched to the thread that stored it, in one indexed query) and the session
key of a client that names none."""

from __future__ import annotations

import hashlib
import json

from agents.kernel import llm

EMPTY_DIGEST = hashlib.sha256(b"gaia-thread").hexdigest()


def digest_chain(messages: list[llm.Message], start: str = EMPTY_DIGEST) -> list[str]:
    """``[d0, d1, ..., dn]``: ``d_i`` identifies the first ``i`` messages."""
    out = [start]
    for m in messages:
        blob = json.dumps(m.fingerprint(), separators=(",", ":"), ensure_ascii=False)
        # surrogatepass: a lone surrogate (a model's tool arguments can hold one) hashes too
        out.append(hashlib.sha256((out[-1] + blob).encode("utf-8", "surrogatepass"))
                   .hexdigest())
    return out


def session_key_fallback(*, model: str, user: str | None, messages: list[llm.Message]) -> str:
    first = next((m.text for m in messages if m.role == "user"), "")
    blob = json.dumps([model, user or "anonymous", first], ensure_ascii=False)
    return "hash:" + hashlib.sha256(blob.encode()).hexdigest()
