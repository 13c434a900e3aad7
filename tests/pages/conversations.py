"""Stored conversations for the replay pages' tests: threads with their messages, as the
turn runtime leaves them (a user asks, the agent answered: the reference)."""

from __future__ import annotations

from typing import Any

from agents.models import Message, Thread


def conversation(agent: Any, exchanges: list[tuple[str, str]], *, title: str = "") -> Thread:
    """A completed thread of ``agent``: each (user message, reply) in order."""
    thread = Thread.objects.create(agent=agent, session_key=f"s-{Thread.objects.count()}",
                                   status="completed", title=title or exchanges[-1][0],
                                   history_digest="d", message_count=2 * len(exchanges))
    seq = 0
    for asked, answered in exchanges:
        Message.objects.create(thread=thread, seq=seq, role="user", content=asked)
        Message.objects.create(thread=thread, seq=seq + 1, role="assistant", content=answered,
                               finish_reason="stop", output_tokens=len(answered.split()))
        seq += 2
    return thread


def support_threads(make_agent: Any) -> list[Thread]:
    """Four conversations of the agent ``support`` (``What is 2 plus i?`` answered ``The answer
    is 2+i.``; the last one after a greeting) and two of ``sales``."""
    support = make_agent(slug="support", provider__options={})
    sales = make_agent(slug="sales", provider__options={})
    threads = [conversation(support, [(f"What is 2 plus {i}?", f"The answer is {2 + i}.")])
               for i in range(3)]
    threads.append(conversation(support, [("Hello", "Hi! Ask me a sum."),
                                          ("What is 2 plus 3?", "The answer is 5.")]))
    threads += [conversation(sales, [("Do you sell boats?", "We sell boats.")]),
                conversation(sales, [("Do you sell cars?", "We do not sell cars.")])]
    return threads
