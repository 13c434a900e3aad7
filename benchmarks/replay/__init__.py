"""Evaluating agents on real conversations: suites made from stored threads (or JSONL in the
OpenAI Evals shape), replayed against any agents through the turn runtime on the benchmark
queue, scored against the replies the conversations had, and compared.

* :mod:`.suites`: conversation suites (from threads, JSONL in and out, versions);
* :mod:`.execute`: what a worker does with a claimed part of a replay (the ``replay`` kind,
  :mod:`benchmarks.kinds.replay`, makes the runs; the one lifecycle,
  :mod:`benchmarks.services.runs`, claims, heartbeats, records, finishes, resumes and
  recovers them as it does every kind's);
* :mod:`.scoring`: exact match, token F1, ROUGE-L, embedding similarity, the judge;
* :mod:`.reads`: summaries, cases side by side, a suite's trend.
"""
