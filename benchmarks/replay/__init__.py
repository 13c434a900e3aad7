"""Evaluating agents on real conversations: suites made from stored threads (or JSONL in the
OpenAI Evals shape), replayed against any agents through the turn runtime on the benchmark
queue, scored against the replies the conversations had, and compared.

* :mod:`.suites`: conversation suites (from threads, JSONL in and out, versions);
* :mod:`.runs`: replay runs and their parts (create, claim, heartbeat, record, finish,
  resume, recover);
* :mod:`.execute`: what a worker does with a replay's parts;
* :mod:`.scoring`: exact match, token F1, ROUGE-L, embedding similarity, the judge;
* :mod:`.reads`: summaries, cases side by side, a suite's trend.
"""
