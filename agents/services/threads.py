"""Writes of threads: resolving a conversation, taking the turn's lease, recording its messages
(the client's, the reply, a team's inner work) and what the feed hears of them."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents import selectors
from agents.infra.rows import rows_insert, rows_update
from agents.kernel import llm
from agents.kernel.exceptions import NotFound
from agents.models import Agent, ApiKey, Message, Thread
from agents.outlet import events, realtime
from agents.selectors.history import FAILED_FINISHES  # noqa: F401 - services re-export it
from agents.services.budgets import HoldStatement
from agents.services.digests import digest_chain
from agents.services.leases import lease_free, thread_record_abandoned
from agents.services.turn_statements import (
    NotOneStatement,
    single_statements,
    thread_continue_one,
    thread_create_one,
)


@dataclass
class TurnStart:
    """What a turn works with once it holds the thread's lease."""

    thread_id: uuid.UUID
    lock_token: str
    history: list[llm.Message]  # what the backend gets, system prompt aside
    base_digest: str  # the thread's digest once the new messages are stored
    next_seq: int  # the reply's position in the thread
    client: str = "anonymous"  # who speaks for the client (selectors.client_label)
    message_ids: tuple[int, ...] = ()  # the ids of the messages this turn stored
    agent_id: int = 0
    agent_slug: str = ""
    found: str = "new"  # how: new, forked, continued (history matched), stateful (log line)
    key_id: int = 0  # the API key's id (0: none), for the usage roll-up


def _said_by(row: Message, sender: str) -> Message:
    """A new user message said by ``sender`` (an operator's inject: ``operator:<who>``), not
    by the thread's client."""
    if sender and row.role == Message.Role.USER:
        row.sender = sender[:100]
    return row


def thread_turn_begin(
    *,
    agent: Agent,
    api_key: ApiKey | None,
    session_key: str,
    thread_id: str | None,
    user: str | None,
    incoming: list[llm.Message],
    workspace_root: str | None,
    dialect: str,
    lease_seconds: float,
    exclusive: bool = True,
    title: str | None = None,
    sender: str = "",
    run_id: int | None = None,
    parent_message_id: int | None = None,
    before: Callable[[], dict[str, Any] | None] | None = None,
    hold: Callable[[], HoldStatement | None] | None = None,
    append: bool = False,
) -> TurnStart | None:
    """Find or create the thread for this conversation, take its lease and store the new messages.

    Returns ``None`` when another turn holds the thread (the caller waits and calls again).
    With ``exclusive=False`` (a session derived from the content, not named by the client) a
    busy thread is not waited for: the request gets a thread of its own.
    A client resending its history continues the thread whose stored history is a prefix of
    it; a history that diverges from every stored thread (an edited message) forks a new
    thread. With an explicit ``thread_id``, a request carrying only new messages (no assistant
    turns) continues the stored conversation statefully; with ``append`` (a conversation's
    turn, ``/v1/conversations``) every message is new, whatever it holds.

    ``title`` names a new thread (default: its first user text); ``run_id`` marks it as the
    work of that benchmark run, ``parent_message_id`` as another agent's call.

    Raises :class:`NotFound` for an explicit thread id this key does not own.

    ``before``: what the turn does first (its budget holds, kept on the thread with the
    lease: ``Thread.budget_holds``), in the transaction that stores it (SQLite: one commit,
    not two; a refusal stores nothing, a busy thread holds nothing). ``hold``: the same
    holds as a statement, for PostgreSQL's paths that store the turn in one statement (no
    round trip of their own): a statement that fails writes nothing, and the transaction
    takes over, with ``before``.
    """
    chain = digest_chain(incoming)
    now = timezone.now()
    token = uuid.uuid4().hex
    client = selectors.client_label(user=user, api_key=api_key)
    lease: dict[str, Any] = {"lock_token": token,
                             "lock_expires_at": now + timedelta(seconds=lease_seconds)}
    held = hold() if hold is not None and single_statements() else None
    if held is not None:
        lease["budget_holds"] = held.holds.stored()

    def create(parent: Thread | None, held: HoldStatement | None = None) -> TurnStart:
        # A new thread is born holding its lease and its messages: one statement on
        # PostgreSQL, two inserts on SQLite.
        new = Thread(
            agent=agent,
            session_key=parent.session_key if (thread_id and parent) else session_key,
            api_key=api_key, user=(user or "")[:300], forked_from=parent,
            title=(title if title is not None
                   else next((m.text for m in incoming if m.role == "user"), ""))[:200],
            history_digest=chain[-1], workspace_root=workspace_root or "",
            message_count=len(incoming), run_id=run_id,
            parent_message_id=parent_message_id, **lease,
        )
        rows = [_said_by(Message.from_llm(m, thread_id=new.pk, seq=i, dialect=dialect,
                                          agent_id=agent.pk), sender)
                for i, m in enumerate(incoming)]
        try:
            if held is None:
                _create_rows(new, rows)
            elif not rows:
                raise NotOneStatement("no messages")
            else:  # with its holds, all or nothing
                thread_create_one(new, rows, held)
        except NotOneStatement:  # a budget had no room: the transaction's hold names it
            with transaction.atomic():
                new.budget_holds = before() if before is not None else None
                _create_rows(new, rows)
        _announce_turn_begin(agent=agent, client=client, thread=new, rows=rows,
                             created=True)
        return TurnStart(new.pk, token, incoming, chain[-1], len(incoming), client,
                         message_ids=tuple(r.pk for r in rows), agent_id=agent.pk,
                         agent_slug=agent.slug, found="forked" if parent else "new",
                         key_id=api_key.pk if api_key else 0)

    if (not thread_id and not exclusive and single_statements()
            and not any(m.role == "assistant" for m in incoming)):
        return create(None, held)  # nothing to look up: its one statement is atomic

    found: Thread | None = None
    if thread_id and single_statements():
        # A thread named by id whose lease is free: one statement takes the lease and stores
        # the client's messages (a fork, a busy or abandoned lease: the transaction below).
        found = _thread_of_key(thread_id, api_key)
        if found.lock_expires_at is None and (append or found.history_digest in chain or not any(
                m.role == "assistant" for m in incoming)):
            stateful = append or found.history_digest not in chain
            rows, update = _continued(
                found, incoming, chain, stateful=stateful, now=now, lease=lease,
                workspace_root=workspace_root, dialect=dialect, sender=sender)
            with contextlib.suppress(NotOneStatement):
                if rows:
                    thread_continue_one(thread_id=found.pk, digest=found.history_digest,
                                        count=found.message_count, update=update, rows=rows,
                                        hold=held)
                    history = (selectors.thread_history(found.pk, before=found.message_count)
                               + incoming) if stateful else incoming
                    return _continue_start(agent=agent, client=client, thread=found,
                                           rows=rows, update=update, history=history,
                                           stateful=stateful, api_key=api_key)

    with transaction.atomic():
        if before is not None:
            lease["budget_holds"] = before()
        thread: Thread | None = None
        forked = stateful = False
        matched = 0
        if thread_id:
            # (read once: the one-statement path's read when it did not apply)
            thread = found or _thread_of_key(thread_id, api_key)
            if append:
                stateful = True
            elif thread.history_digest in chain:
                matched = chain.index(thread.history_digest)
            elif not any(m.role == "assistant" for m in incoming):
                stateful = True
            else:
                forked = True
        elif not exclusive and not any(m.role == "assistant" for m in incoming):
            # A first turn with no session id: nothing to continue (a retry after a failed
            # first turn starts afresh; the failed thread stays as the record of it).
            pass
        else:
            candidates = list(
                Thread.objects.filter(
                    api_key=api_key, session_key=session_key, agent=agent,
                    history_digest__in=chain,
                ).only("pk", "session_key", "history_digest", "message_count", "workspace_root",
                      "lock_expires_at")
                .order_by("-updated_at")[:20]
            )
            if candidates:
                by_len = {d: i for i, d in enumerate(chain)}
                thread = max(candidates, key=lambda t: by_len[t.history_digest])
                matched = by_len[thread.history_digest]
            elif any(m.role == "assistant" for m in incoming):
                # A history with earlier replies that no stored thread has: an edit, so the
                # new thread records the one it branched from. (A first turn is simply new.)
                thread = (
                    Thread.objects.filter(api_key=api_key, session_key=session_key, agent=agent)
                    .only("pk", "session_key").order_by("-updated_at").first()
                )
                forked = thread is not None

        if thread is None or forked:
            return create(thread)
        got = Thread.objects.filter(
            lease_free(now), pk=thread.pk, history_digest=thread.history_digest
        ).update(**lease)
        if got and thread.lock_expires_at is not None and thread.lock_expires_at < now:
            # The lease had expired without its turn finishing: the process running it died.
            thread.message_count = thread_record_abandoned(thread=thread, agent=agent,
                                                            now=now)
        if not got:
            if exclusive or stateful:
                if before is not None:
                    transaction.set_rollback(True)  # its holds too: taken again next time
                return None  # busy, or it moved on meanwhile: wait and resolve again
            # A derived session (no client session id) that is busy is a different person
            # who happened to start the same way: give them their own thread, don't queue.
            return create(None)
        # Client-held history is authoritative for what the backend sees.
        history = selectors.thread_history(thread.pk) + incoming if stateful else incoming
        rows, update = _continued(
            thread, incoming, chain, stateful=stateful, matched=matched, now=now, lease=None,
            workspace_root=workspace_root, dialect=dialect, sender=sender)
        rows_insert(rows)
        rows_update(Thread, where={"id": thread.pk}, values=update)
        return _continue_start(agent=agent, client=client, thread=thread, rows=rows,
                               update={**update, **lease}, history=history,
                               stateful=stateful, api_key=api_key)


def _create_rows(new: Thread, rows: list[Message]) -> None:
    if rows and single_statements():
        thread_create_one(new, rows)  # one round trip (outside a transaction: atomic)
    else:
        rows_insert([new])
        rows_insert(rows)


def _thread_of_key(thread_id: Any, api_key: ApiKey | None) -> Thread:
    try:
        return Thread.objects.get(pk=uuid.UUID(str(thread_id)), api_key=api_key)
    except (ValueError, Thread.DoesNotExist):
        raise NotFound(f"No thread {thread_id!r} for this API key.",
                       param="thread_id", code="thread_not_found") from None


def _continued(thread: Thread, incoming: list[llm.Message], chain: list[str], *,
               stateful: bool, now: Any, lease: dict[str, Any] | None,
               workspace_root: str | None, dialect: str, sender: str, matched: int = -1
               ) -> tuple[list[Message], dict[str, Any]]:
    """The rows of the client's new messages continuing ``thread`` and the thread's update
    that goes with them (with the ``lease`` taken, if given; its ``history_digest`` the new
    messages' last digest). Stateful: ``incoming`` is all new; else it is the whole
    conversation, of which the first ``matched`` (default: as many as the thread stores)
    are stored."""
    if stateful:
        new_messages, new_chain = incoming, digest_chain(incoming, start=thread.history_digest)
    else:
        matched = chain.index(thread.history_digest) if matched < 0 else matched
        new_messages, new_chain = incoming[matched:], chain[matched:]
    rows = [_said_by(Message.from_llm(m, thread_id=thread.pk, seq=thread.message_count + i,
                                      agent_id=thread.agent_id,
                                      dialect=dialect), sender)
            for i, m in enumerate(new_messages)]
    update: dict[str, Any] = {
        "message_count": thread.message_count + len(new_messages),
        "history_digest": new_chain[-1],
        "status": Thread.Status.ACTIVE,
        "updated_at": now,
        **(lease or {}),
    }
    if workspace_root and workspace_root != thread.workspace_root:
        update["workspace_root"] = workspace_root
    return rows, update


def _continue_start(*, agent: Agent, client: str, thread: Thread, rows: list[Message],
                    update: dict[str, Any], history: list[llm.Message], stateful: bool,
                    api_key: ApiKey | None) -> TurnStart:
    """The turn's start once its messages continuing ``thread`` are stored by ``update``."""
    thread.message_count, thread.status, thread.updated_at = (
        update["message_count"], Thread.Status.ACTIVE, update["updated_at"])
    _announce_turn_begin(agent=agent, client=client, thread=thread, rows=rows, created=False)
    return TurnStart(thread.pk, update["lock_token"], history, update["history_digest"],
                     update["message_count"], client, message_ids=tuple(r.pk for r in rows),
                     agent_id=agent.pk, agent_slug=agent.slug,
                     found="stateful" if stateful else "continued",
                     key_id=api_key.pk if api_key else 0)


def _announce_turn_begin(*, agent: Agent, client: str, thread: Thread, rows: list[Message],
                         created: bool) -> None:
    """The feed hears of a turn's thread, its new messages and its agent at work, once the
    turn's transaction commits."""
    if created:
        announced = [events.thread_created(thread, agent=agent.slug, client=client)]
    else:
        announced = [events.thread_updated(
            thread_id=thread.pk, agent=agent.slug, status=thread.status,
            message_count=thread.message_count, at=thread.updated_at)]
    announced += [events.message(row, agent=agent.slug, client=client) for row in rows]
    announced.append(events.agent_state(agent=agent.slug, agent_id=agent.pk,
                                        state="processing", current_thread=thread.pk))
    for e in announced:
        realtime.send_event_on_commit(e)
