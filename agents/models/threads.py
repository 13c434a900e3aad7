"""The threads clients hold with agents, and their messages."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.db.models import Q

from agents.kernel import llm
from agents.models.agents import Agent
from agents.models.keys import ApiKey

# What a turn's error says when something other than its agent stopped it: its client went
# away, the agent that called it stopped waiting, its server process stopped. Its thread ends
# ``error`` (the reply is not whole), but the agent did not fail: its state light and its
# "latest error" leave such turns out (:func:`stopped_from_outside`; issue 43: cancelling a
# benchmark run turned the agent it used red until its next turn).
DISCONNECTED_ERROR = "The client disconnected before the reply was complete."
CALLER_GONE_ERROR = "The calling agent's turn ended before this reply was complete."
INTERRUPTED_ERROR = ("The turn was interrupted: the server process running it stopped before "
                     "the reply was complete.")


def stopped_from_outside() -> Q:
    """Threads whose last turn something other than their agent stopped (see above)."""
    return Q(status="error", last_error__in=(DISCONNECTED_ERROR, CALLER_GONE_ERROR,
                                             INTERRUPTED_ERROR))


class Thread(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        COMPLETED = "completed"
        ERROR = "error"
        KILLED = "killed"
        WAITING = "waiting"  # a turn's tool call waits for an operator's approval

    # A thread at work: its turn runs, or waits for an approval (the dashboard's "active
    # threads" and the organism's count: one rule for the API, the feed and the pages).
    RUNNING = (Status.ACTIVE, Status.WAITING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="threads")
    session_key = models.CharField(max_length=300)
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="threads"
    )
    user = models.CharField("client user", max_length=300, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.ACTIVE)
    title = models.CharField(max_length=200, blank=True)
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    workspace_root = models.CharField(max_length=1000, blank=True)
    message_count = models.PositiveIntegerField(default=0)
    # Bumped by a database trigger whenever messages of the thread are deleted (migration
    # 0021): a process keeping the conversation in memory (agents.selectors.history) reads
    # it afresh when this changed, rather than counting the thread's rows every turn.
    messages_removed = models.PositiveIntegerField(default=0, editable=False)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    usage_estimated = models.BooleanField(
        default=False, help_text="Some token counts are estimates (the provider gave none)."
    )
    # Chain digest of the conversation so far: a client resending its history is matched to
    # the thread in one indexed query (see agents.services.thread_resolve).
    history_digest = models.CharField(max_length=64, editable=False)
    # Cross-process turn lease: one turn at a time per thread.
    lock_token = models.CharField(max_length=32, blank=True, editable=False)
    lock_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True)
    # The reply of the turn holding the lease, as far as it had streamed at its last
    # checkpoint (agents.turns.checkpoint): what an interrupted turn's message keeps when its
    # process died. Emptied when the turn is recorded.
    partial_reply = models.TextField(blank=True, editable=False)
    # What its running turn holds against budgets ({"<budget id>": [amount, "<period>"]}),
    # written with the lease and cleared with it: a turn whose process died gives them back
    # when its lease is found expired (agents.services.budgets).
    budget_holds = models.JSONField(null=True, blank=True, editable=False)
    route = models.JSONField(
        null=True, blank=True,
        help_text="How a request for a virtual model (auto, team/...) reached this thread's "
        "agent, and why.",
    )
    # The benchmark run whose work this thread is (its id: the core knows no benchmarks
    # app); such threads are left out of the default thread list, one filter away.
    run_id = models.PositiveIntegerField(
        null=True, blank=True, db_index=True,
        help_text="The benchmark run this thread's turns were for, if any.",
    )
    # A thread another agent's turn started (it delegated through its agent:<slug> tool): the
    # call's message in the parent thread.
    parent_message = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="child_threads",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        # Resolving a turn's thread: by digest within a session, and the session's latest.
        # Both stay direct lookups however many threads share a session key (identical
        # first messages without a session id all do).
        indexes = [
            models.Index(fields=["session_key", "history_digest"], name="thread_session_digest"),
            models.Index(fields=["session_key", "-updated_at"], name="thread_session_recent"),
            # Which threads of an agent hold a live lease (its state, for operators).
            models.Index(fields=["agent", "lock_expires_at"], name="thread_agent_lease"),
            # The thread lists, most recent first (selectors.thread_list: benchmark threads
            # apart, by status, by agent; an agent's last activity): each page is a walk
            # along an index, not a sort of every thread (issue 27).
            # Partial: PostgreSQL orders by an index only after equality conditions, and
            # ``run_id IS NULL`` is not one (with run_id leading, it sorted 100,000 rows).
            models.Index(fields=["-updated_at", "id"], name="thread_recent",
                         condition=models.Q(run_id__isnull=True)),
            # Every thread (the admin's list: benchmark threads too).
            models.Index(fields=["-updated_at", "-id"], name="thread_all_recent"),
            models.Index(fields=["status", "-updated_at"], name="thread_status_recent"),
            models.Index(fields=["agent", "-updated_at"], name="thread_agent_recent"),
        ]

    def __str__(self) -> str:
        return self.title or str(self.id)


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"
        SYSTEM = "system"  # an instruction given mid-conversation

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    # The thread's agent, copied onto its messages (a thread never changes agent) so that an
    # agent's newest messages are one index's seek (``message_agent_recent``), not a walk
    # through everyone's newest until enough are the agent's (issue 27: 11,000 rows read for
    # 50 at a million messages). Set by whoever stores the row, else by a database trigger
    # (migration 0022); deleted with the thread, hence no constraint of its own.
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.DO_NOTHING,
                              db_constraint=False, db_index=False, editable=False,
                              related_name="+")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=20, choices=Role.choices)
    content = models.TextField(blank=True)
    parts = models.JSONField(null=True, blank=True, help_text="Non-text parts (images).")
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    reasoning = models.TextField(blank=True, help_text="The agent's own steps, not its words.")
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    usage_estimated = models.BooleanField(default=False)
    # What the turn cost in USD, by the price its source names (agents.services.prices);
    # null: no price is known for its model (cost_source says "unknown"), never a silent 0.
    # Both nullable without a default: SQLite adds such a column in place, where any other
    # would remake the table, and a remade table loses its FTS and tally triggers.
    cost = models.DecimalField(max_digits=20, decimal_places=9, null=True, blank=True)
    cost_source = models.CharField(max_length=60, null=True, blank=True)  # noqa: DJ001
    finish_reason = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True, help_text="Why this reply failed, if it did.")
    note = models.CharField(
        max_length=500, blank=True,
        help_text="What Gaia did to serve this turn (e.g. the oldest turns it trimmed to fit "
        "the model's window).",
    )
    dropped_tools = models.JSONField(
        null=True, blank=True, help_text="Hosted tools the client sent that no tool of the "
        "agent provides, left out of what reached the model (agents.tools.hosted).")
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    ttft_ms = models.PositiveIntegerField("time to first token (ms)", null=True, blank=True)
    dialect = models.CharField(max_length=20, blank=True)
    response_id = models.CharField(max_length=100, blank=True, db_index=True)
    provider = models.CharField(
        max_length=100, blank=True, help_text="The provider that produced this reply."
    )
    # Who spoke to whom; blank: derived from the role (the client and the thread's agent). A
    # round of tool calls names each tool it calls once, cut to fit (agents.turns.loop).
    sender = models.CharField(max_length=300, blank=True)
    recipient = models.CharField(max_length=300, blank=True)
    internal = models.BooleanField(
        default=False, help_text="An agent's own work (a team's inner messages, the tool calls "
        "it ran itself), not part of the conversation the client holds.",
    )
    passages = models.JSONField(
        null=True, blank=True, help_text="Knowledge-base passages given to the model for "
        "this reply (source, chunk id, score).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["thread", "seq"]
        # Every thread's messages, newest first (selectors.message_list).
        indexes = [models.Index(fields=["-created_at", "-id"], name="message_recent"),
                   models.Index(fields=["agent", "-created_at", "-id"],
                                name="message_agent_recent")]
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="message_thread_seq_unique")
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"

    def to_llm(self) -> llm.Message:
        """This stored message as the runtime's canonical message (what a provider gets)."""
        return self.llm_of(self.role, self.content, self.parts, self.tool_calls,
                           self.tool_call_id)

    # The columns :meth:`llm_of` takes, for reads that skip building model instances.
    LLM_FIELDS = ("role", "content", "parts", "tool_calls", "tool_call_id")

    @staticmethod
    def llm_of(role: str, content: str, parts: list[dict[str, Any]] | None,
               tool_calls: list[dict[str, Any]] | None, tool_call_id: str) -> llm.Message:
        """A stored message's columns (:attr:`LLM_FIELDS`) as the runtime's message."""
        out: list[llm.Part] = []
        if content:
            out.append(llm.TextPart(content))
        for p in parts or ():
            out.append(llm.ImagePart(url=p.get("url"), data=p.get("data"),
                                     media_type=p.get("media_type")))
        calls = tuple(llm.ToolCall(c["id"], c["name"], c["arguments"])
                      for c in tool_calls or ())
        return llm.Message(role=role, parts=tuple(out),  # type: ignore[arg-type]
                           tool_calls=calls, tool_call_id=tool_call_id or None)

    @classmethod
    def from_llm(cls, message: llm.Message, *, thread_id: uuid.UUID, seq: int,
                 dialect: str, agent_id: int | None = None) -> Message:
        """An unsaved row for ``message`` at position ``seq`` of the thread (of the agent
        ``agent_id``: else the database reads it off the thread)."""
        images = [{"url": p.url, "data": p.data, "media_type": p.media_type}
                  for p in message.parts if isinstance(p, llm.ImagePart)]
        return cls(
            thread_id=thread_id, agent_id=agent_id, seq=seq, role=message.role,
            content=message.text,
            parts=images or None,
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments}
                        for c in message.tool_calls] or None,
            tool_call_id=message.tool_call_id or "", dialect=dialect,
        )


class MessageTally(models.Model):
    """How many messages are stored, in ``SHARDS`` rows (their sum), kept by database triggers
    on every insert and delete of a message (migration 0014): counting a million rows for
    every dashboard read took 70 ms and grew with the data (issue 27); summing these is one
    small read. The count is split so that concurrent turns rarely wait for one row's lock."""

    SHARDS = 64

    shard = models.PositiveSmallIntegerField(primary_key=True)
    n = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "message tally"
        # Kept by the triggers alone: Django's flush (tests, ``manage.py flush``) leaves it
        # out, since on SQLite it deletes tables in no set order, and a tally cleared before
        # its table's rows were deleted went negative through their triggers.
        managed = False

    def __str__(self) -> str:
        return f"shard {self.shard}: {self.n}"


class AgentMessageTally(models.Model):
    """How many messages each agent's threads hold, in up to ``MessageTally.SHARDS`` rows an
    agent, kept by the same kind of triggers (migration 0023): summing the agent's threads'
    ``message_count`` read every thread of the agent (8.7 ms for 12,500 on PostgreSQL, and
    growing, issue 27). An agent deleted leaves rows that sum to zero."""

    agent = models.ForeignKey(Agent, on_delete=models.DO_NOTHING, db_constraint=False,
                              db_index=False, related_name="+")
    shard = models.PositiveSmallIntegerField()
    n = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "agent message tally"
        # Kept by the triggers alone: Django's flush (tests, ``manage.py flush``) leaves it
        # out, since on SQLite it deletes tables in no set order, and a tally cleared before
        # its table's rows were deleted went negative through their triggers.
        managed = False
        constraints = [models.UniqueConstraint(fields=["agent", "shard"],
                                               name="agent_message_tally_unique")]

    def __str__(self) -> str:
        return f"agent {self.agent_id} shard {self.shard}: {self.n}"


class ThreadTally(models.Model):
    """How many threads are stored (``n``) and how many of them are a benchmark run's
    (``runs``), in up to ``MessageTally.SHARDS`` rows (their sums), kept by triggers on every
    insert and delete of a thread and every change of its run (migration 0024): counting
    100,000 threads for every page of the thread list, its API and the admin's list took
    3 ms of their 14-22 on PostgreSQL, 4-5 on a machine half as fast (issue 27)."""

    shard = models.PositiveSmallIntegerField(primary_key=True)
    n = models.BigIntegerField(default=0)
    runs = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "thread tally"
        # Kept by the triggers alone: Django's flush (tests, ``manage.py flush``) leaves it
        # out, since on SQLite it deletes tables in no set order, and a tally cleared before
        # its table's rows were deleted went negative through their triggers.
        managed = False

    def __str__(self) -> str:
        return f"shard {self.shard}: {self.n} ({self.runs} of runs)"


class Approval(models.Model):
    """A tool call that waits for an operator's decision (an MCP server's or the agent's
    ``require_approval``), or, for a Responses client's own MCP tool, for the client's
    ``mcp_approval_response``. Undecided past ``expires_at`` it is denied."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"  # nobody decided in time: a denial

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="approvals")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    response_id = models.CharField(max_length=100, blank=True)
    call_id = models.CharField(max_length=200, blank=True)
    tool = models.CharField(max_length=200, help_text="The tool as the model sees it.")
    server = models.CharField(max_length=200, blank=True,
                              help_text="Its MCP server's name (or gaia, agents).")
    arguments = models.TextField(blank=True)
    # client: a Responses client's own MCP tool, decided by the client itself.
    decided_by_client = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    decided_by = models.CharField(max_length=300, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="approval_status_recent")]

    def __str__(self) -> str:
        return f"{self.tool} ({self.status})"
