"""What the ``local`` kind does besides chat: raw text completion (``/v1/completions``) on its
GGUF, and embeddings (``/v1/embeddings``) from an embedding model shipped in a package.

* Completion: the model continues the prompt as raw text (no chat template). A model whose
  vocabulary has fill-in-the-middle tokens (llama.cpp's ``fim_pre``/``fim_suf``/``fim_mid``:
  StarCoder, Qwen2.5-Coder, CodeLlama...) is given ``<pre>prompt<suf>suffix<mid>``; one without
  (the embedded SmolLM2-135M) the prompt alone.
* Embeddings: WordLlama's ``l2_supercat`` (256 dimensions, a static token-embedding table
  averaged over the text's tokens and normalised), whose weights and tokenizer ship inside the
  ``wordllama`` wheel (already a dependency: the replay scorer uses it). It loads offline in
  about 0.5 s once per process, on a thread; one input costs well under a millisecond. The
  table was trained for Matryoshka truncation, so ``dimensions`` (1-256) keeps the first
  ones, normalised again. No llama.cpp embedding GGUF ships in a PyPI package we could find;
  this model is the package-shipped one (``options.embedding_model`` names none other).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agents.backends.completion import Completion, fim_prompt

EMBEDDING_MODEL = "wordllama-l2-supercat"
EMBEDDING_DIMENSIONS = 256

_embedder: Any = None
_embedder_lock = threading.Lock()


def completion_text(llama: Any, completion: Completion) -> str:
    """The raw prompt of ``completion`` for this model (``llama``: a ``llama_cpp.Llama``, the
    vocabulary-only one will do)."""
    import llama_cpp

    vocab = llama._model.vocab
    ids = (llama_cpp.llama_vocab_fim_pre(vocab), llama_cpp.llama_vocab_fim_suf(vocab),
           llama_cpp.llama_vocab_fim_mid(vocab))
    model = llama._model
    tokens = None if -1 in ids else tuple(model.token_get_text(t) for t in ids)
    return fim_prompt(completion, tokens)  # type: ignore[arg-type]


def embedder() -> Any:
    """The WordLlama model, loaded once per process from the files its wheel ships (its
    tokenizer under ``tokenizers/`` of its own directory; downloads are off). Blocking: call
    it on a thread."""
    global _embedder
    if _embedder is None:
        with _embedder_lock:
            if _embedder is None:
                import wordllama
                from wordllama import WordLlama

                _embedder = WordLlama.load(config="l2_supercat", dim=EMBEDDING_DIMENSIONS,
                                           cache_dir=Path(wordllama.__file__).parent,
                                           disable_download=True)
    return _embedder


def embed_texts(texts: list[str], dimensions: int | None) -> tuple[list[list[float]], int]:
    """``(unit vectors, tokens read)`` for ``texts`` (none empty). Blocking, CPU-bound
    (numpy releases the GIL for most of it): run on a thread, with the input bounded first."""
    import numpy as np

    model = embedder()
    with _embedder_lock:  # the tokenizer's padding state is the model's, shared
        encoded = model.tokenize(texts)
    table = model.embedding[:, :dimensions or EMBEDDING_DIMENSIONS]
    vectors, read = [], 0
    for e in encoded:  # one text at a time: a padded batch would hold len x longest x dims
        n = sum(e.attention_mask)
        ids = np.clip(np.asarray(e.ids[:n], dtype=np.int64), 0, table.shape[0] - 1)
        pooled = table[ids].mean(axis=0) if n else np.zeros(table.shape[1], np.float32)
        norm = float(np.linalg.norm(pooled))
        vectors.append((pooled / norm if norm > 0 else pooled).astype(float).tolist())
        read += n
    return vectors, read


class LocalExtras:
    """The ``local`` backend's completion and embedding capabilities (a mixin of
    :class:`agents.backends.local.LocalBackend`)."""

    completes = True  # raw completion on the GGUF (LocalModel.prompt)
    embedding_dimensions = EMBEDDING_DIMENSIONS

    async def embed(self, inputs: list[str], *, dimensions: int | None
                    ) -> tuple[list[list[float]], int]:
        import asyncio

        return await asyncio.to_thread(embed_texts, inputs, dimensions)
