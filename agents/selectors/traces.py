"""A thread's turns, each as the tree of its steps on one time axis (issue 43, "delegation
cannot be followed"): ``GET /api/v1/threads/{id}/turns[/{n}]`` and the thread page's trace.

A turn is a message of the thread's client (a ``user`` message not of an agent's own work: a
client's or an operator's inject) and everything after it up to the next one: the model's
calls, the tools run for it (the agent's own, or the client's), the approvals they waited for,
and the agents they called (``agent:<slug>``: a child thread hanging off the call's message).

Everything comes from what a turn already stores, read in four queries (the thread's messages,
its approvals, its child threads, their messages); no timing is made up:

* the turn starts when its request came (its reply's ``created_at`` less its ``latency_ms``)
  or when its message was stored, the earlier; it ends when its last reply was stored;
* a model call runs from the turn's start, or the end of the tool round before it, to the
  storing of what it answered (a round's call message, or the reply); tokens are counted for
  the whole turn (one ``Usage`` for all its calls), so a call's own are known only when it is
  the turn's only one, and so is its time to first token;
* a tool call of the agent starts when its round's call message was stored and lasts its
  measured ``latency_ms`` (approval wait included); where a step inside it (an approval's
  decision, the child's turn) was stored a few milliseconds later than that measured end, its
  end is moved out to hold it (``ended_at`` never precedes its children's);
* a client's tool call runs from the reply that asked for it to the storing of the client's
  result (the client's own time included);
* an approval runs from its request to its decision; ``decided_at`` null: undecided.

Arguments and results are shown as the thread API shows them (:func:`message_public`: the
stored text, which a tool's secrets were already redacted from when it was stored).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from agents.kernel.exceptions import NotFound
from agents.models import Approval, Message, Thread
from agents.selectors.threads import client_label, iso, message_public

MESSAGE_FIELDS = ("id", "thread_id", "seq", "role", "content", "parts", "tool_calls",
                  "tool_call_id", "reasoning", "input_tokens", "output_tokens",
                  "usage_estimated", "cost", "finish_reason", "error", "note", "latency_ms",
                  "ttft_ms", "response_id", "provider", "sender", "recipient", "internal",
                  "created_at", "dialect", "passages", "dropped_tools")


def _ms(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return max(0, round((end - start).total_seconds() * 1000))


def _span(node: dict[str, Any], start: datetime | None, end: datetime | None) -> dict[str, Any]:
    node["started_at"], node["ended_at"], node["duration_ms"] = iso(start), iso(end), _ms(
        start, end)
    node["_start"], node["_end"] = start, end
    return node


def tool_server(name: str) -> str:
    """Whose tool the model's ``name`` is (:func:`agents.tools.toolbox_for`'s names): an MCP
    server's label, ``agents`` (another agent), an A2A agent's ``a2a``, else Gaia's own."""
    if name.startswith("mcp__") and name.count("__") >= 2:
        return name.split("__")[1]
    if name.startswith("agent__"):
        return "agents"
    if name.startswith("a2a__"):
        return "a2a"
    return "gaia"


def _split(rows: list[Message]) -> list[list[Message]]:
    """The thread's messages, cut into turns (see the module docstring); what comes before
    its first client message (a system prompt) belongs to the first turn."""
    turns: list[list[Message]] = []
    for row in rows:
        if (row.role == Message.Role.USER and not row.internal) or not turns:
            if turns and not any(r.role == Message.Role.USER and not r.internal
                                 for r in turns[-1]):
                turns[-1].append(row)  # the system prompt's turn: this is its message
                continue
            turns.append([row])
        else:
            turns[-1].append(row)
    return turns


def _replies(turn: list[Message]) -> list[Message]:
    return [r for r in turn if r.role == Message.Role.ASSISTANT and not r.internal]


def _turn_times(turn: list[Message]) -> tuple[datetime, datetime | None]:
    replies = _replies(turn)
    start = turn[0].created_at
    if replies and replies[0].latency_ms is not None:
        start = min(start, replies[0].created_at - timedelta(milliseconds=replies[0].latency_ms))
    return start, replies[-1].created_at if replies else None


def _status(turn: list[Message], *, last: bool, thread: Thread) -> str:
    replies = _replies(turn)
    if not replies:
        return thread.status if last and thread.status in ("active", "waiting") else "incomplete"
    final = replies[-1]
    if final.finish_reason == "killed":
        return "killed"
    if final.error:
        return "error"
    if final.tool_calls:
        # the client's tools: its results continue the turn in its next request
        return thread.status if last and thread.status in ("active", "waiting") else (
            "client_tools")
    return "completed"


def _summary(turn: list[Message], *, index: int, last: bool, thread: Thread) -> dict[str, Any]:
    """A turn's own line: its message, times, status and usage (the replies' sums)."""
    start, end = _turn_times(turn)
    replies = _replies(turn)
    opening = next((r for r in turn if r.role == Message.Role.USER and not r.internal), turn[0])
    costs = [r.cost for r in replies if r.cost is not None]
    node = {"kind": "turn", "index": index, "thread_id": str(thread.pk),
            "message_id": opening.pk, "reply_id": replies[-1].pk if replies else None,
            "input": opening.content[:500],
            "output": replies[-1].content[:500] if replies else None,
            "status": _status(turn, last=last, thread=thread),
            "error": next((r.error for r in reversed(replies) if r.error), None),
            "ttft_ms": replies[0].ttft_ms if replies else None,
            "usage": {"input_tokens": sum(r.input_tokens or 0 for r in replies),
                      "output_tokens": sum(r.output_tokens or 0 for r in replies),
                      "estimated": any(r.usage_estimated for r in replies),
                      "cost": str(sum(costs)) if costs else None}}
    return _span(node, start, end)


def _public(row: Message, thread: Thread) -> dict[str, Any]:
    return message_public(row, agent=thread.agent.slug,
                          client=client_label(user=thread.user, api_key=thread.api_key))


def _model_call(start: datetime | None, end: datetime | None, row: Message, *, model: str
                ) -> dict[str, Any]:
    return _span({"kind": "model_call", "message_id": row.pk, "model": model or None,
                  "provider": None, "input_tokens": None, "output_tokens": None,
                  "ttft_ms": None, "finish_reason": None, "children": []}, start, end)


def _steps(turn: list[Message], thread: Thread, approvals: dict[str, list[Approval]],
           children: dict[int, list[dict[str, Any]]], start: datetime) -> list[dict[str, Any]]:
    """The turn's steps in order (see the module docstring for each one's times)."""
    model = thread.agent.model_name if thread.agent.provider_id else ""
    steps: list[dict[str, Any]] = []
    open_calls: dict[str, dict[str, Any]] = {}
    cursor: datetime | None = start
    model_calls: list[dict[str, Any]] = []
    for row in turn[1:]:
        if row.role == Message.Role.ASSISTANT:
            call = _model_call(cursor, row.created_at, row, model=model)
            if not row.internal:
                call.update(provider=row.provider or None, finish_reason=row.finish_reason
                            or None)
            steps.append(call)
            model_calls.append(call)
            cursor = row.created_at if not row.internal else None
            origin = "agent" if row.internal else "client"
            shown = _public(row, thread)
            for c in shown["payload"].get("tool_calls") or ():
                node = _span({"kind": "tool_call", "call_id": c.get("id"), "name": c.get("name"),
                              "server": tool_server(str(c.get("name") or "")) if origin == "agent"
                              else "client", "origin": origin, "arguments": c.get("arguments"),
                              "result": None, "is_error": None, "message_id": row.pk,
                              "result_message_id": None, "latency_ms": None, "children": []},
                             row.created_at, None)
                waited = approvals.get(str(c.get("id"))) or []
                if waited and waited[0].created_at >= row.created_at:
                    a = waited.pop(0)
                    node["children"].append(_approval(a))
                    node["server"] = a.server or node["server"]
                node["children"].extend(children.get(row.pk, ()) if len(
                    shown["payload"]["tool_calls"]) == 1 else ())
                open_calls[str(c.get("id"))] = node
                steps.append(node)
            if len(shown["payload"].get("tool_calls") or ()) > 1:
                _children_by_task(children.get(row.pk, ()), open_calls)
        elif row.role == Message.Role.TOOL:
            node = open_calls.pop(row.tool_call_id, None)
            shown = _public(row, thread)
            if node is None:  # a result whose call is not in this turn
                node = _span({"kind": "tool_call", "call_id": row.tool_call_id or None,
                              "name": None, "server": None, "origin": shown["payload"].get(
                                  "origin"), "arguments": None, "children": []},
                             None, row.created_at)
                steps.append(node)
            node.update(result=shown["payload"]["content"], is_error=bool(row.error),
                        result_message_id=row.pk, latency_ms=row.latency_ms)
            if node["origin"] == "agent" and row.latency_ms is not None and node["_start"]:
                end = node["_start"] + timedelta(milliseconds=row.latency_ms)
            else:
                end = row.created_at
            inner = [c["_end"] for c in node["children"] if c.get("_end") is not None]
            _span(node, node["_start"], max([end, *inner]))
            cursor = max(cursor or row.created_at, row.created_at)
        else:  # a team's inner task, a mid-conversation instruction: a point on the axis
            shown = _public(row, thread)
            steps.append(_span({"kind": "message", "message_id": row.pk, "role": row.role,
                                "from": shown["from"], "to": shown["to"],
                                "content": row.content[:500]}, row.created_at, row.created_at))
    if len(model_calls) == 1:  # the turn's only call: its usage and first token are its own
        replies = _replies(turn)
        if replies:
            model_calls[0].update(input_tokens=replies[-1].input_tokens,
                                  output_tokens=replies[-1].output_tokens,
                                  ttft_ms=replies[-1].ttft_ms)
    return steps


def _children_by_task(kids: Any, calls: dict[str, dict[str, Any]]) -> None:
    """A round that called several agents: each child thread joins the call whose task it
    was given (its first message), in order."""
    for kid in kids:
        for node in calls.values():
            if node["name"] != f"agent__{kid['agent']}" or any(
                    c["kind"] == "delegation" for c in node["children"]):
                continue
            node["children"].append(kid)
            break


def _approval(a: Approval) -> dict[str, Any]:
    node = {"kind": "approval", "id": str(a.pk), "status": a.status, "tool": a.tool,
            "server": a.server or None, "requested_at": iso(a.created_at),
            "decided_at": iso(a.decided_at), "decided_by": a.decided_by or None,
            "by_client": a.decided_by_client, "reason": a.reason or None,
            "wait_ms": _ms(a.created_at, a.decided_at)}
    return _span(node, a.created_at, a.decided_at)


def _delegation(child: Thread, rows: list[Message]) -> dict[str, Any]:
    """A child thread (an ``agent:<slug>`` call's), with its own first turn's line."""
    turns = _split(rows)
    node: dict[str, Any] = {"kind": "delegation", "agent": child.agent.slug,
                            "thread_id": str(child.pk), "thread_url": f"/threads/{child.pk}/",
                            "api_url": f"/api/v1/threads/{child.pk}/turns/0",
                            "status": child.status, "turn": None}
    if not turns:
        return _span(node, child.created_at, None)
    summary = _summary(turns[0], index=0, last=len(turns) == 1, thread=child)
    node["turn"] = {k: v for k, v in summary.items() if not k.startswith("_")}
    return _span(node, summary["_start"], summary["_end"])


def _clean(node: dict[str, Any]) -> dict[str, Any]:
    node.pop("_start", None)
    node.pop("_end", None)
    for child in node.get("children") or ():
        _clean(child)
    return node


def _thread_turns(thread: Thread) -> list[list[Message]]:
    rows = list(Message.objects.filter(thread_id=thread.pk).only(*MESSAGE_FIELDS)
                .order_by("seq"))
    return _split(rows)


def turn_list(*, thread: Thread) -> list[dict[str, Any]]:
    """The thread's turns in order, each its summary (no steps)."""
    turns = _thread_turns(thread)
    return [_clean(_summary(t, index=i, last=i == len(turns) - 1, thread=thread))
            for i, t in enumerate(turns)]


def turn_trace(*, thread: Thread, index: int) -> dict[str, Any]:
    """The thread's turn ``index`` (0-based) as a tree: the turn, its steps in order as
    ``children``, approvals and delegations under the tool call they belong to. Raises
    :class:`NotFound` for a turn the thread does not have."""
    turns = _thread_turns(thread)
    if not 0 <= index < len(turns):
        raise NotFound(f"Thread {thread.pk} has no turn {index} (it has {len(turns)}).",
                       code="turn_not_found", param="n")
    turn = turns[index]
    ids = [r.pk for r in turn]
    # call ids repeat from turn to turn: this turn's approvals are those asked during it
    asked = Approval.objects.filter(thread_id=thread.pk, created_at__gte=turn[0].created_at)
    if index + 1 < len(turns):
        asked = asked.filter(created_at__lt=turns[index + 1][0].created_at)
    approvals: dict[str, list[Approval]] = {}
    for a in asked.order_by("created_at", "pk"):
        approvals.setdefault(a.call_id, []).append(a)
    kids = list(Thread.objects.filter(parent_message_id__in=ids).select_related("agent")
                .order_by("created_at", "pk"))
    kid_rows: dict[Any, list[Message]] = {k.pk: [] for k in kids}
    if kids:
        for row in (Message.objects.filter(thread_id__in=list(kid_rows)).only(*MESSAGE_FIELDS)
                    .order_by("thread_id", "seq")):
            kid_rows[row.thread_id].append(row)
    children: dict[int, list[dict[str, Any]]] = {}
    for kid in kids:
        children.setdefault(kid.parent_message_id, []).append(_delegation(kid, kid_rows[kid.pk]))
    node = _summary(turn, index=index, last=index == len(turns) - 1, thread=thread)
    node["children"] = _steps(turn, thread, approvals, children, node["_start"])
    ends = [c["_end"] for c in node["children"] if c.get("_end") is not None]
    if node["_end"] is not None and ends:
        _span(node, node["_start"], max([node["_end"], *ends]))
    return _clean(node)


def turn_count_before(*, thread_id: Any, seq: int) -> int:
    """How many turns of the thread begin before its message ``seq``."""
    return Message.objects.filter(thread_id=thread_id, seq__lt=seq, role=Message.Role.USER,
                                  internal=False).count()


def thread_parent(*, thread: Thread) -> dict[str, Any] | None:
    """Who called this thread's agent (a child thread's caller): the parent thread, its
    agent, the calling message and which of its turns it was, else ``None``."""
    if thread.parent_message_id is None:
        return None
    row = (Message.objects.filter(pk=thread.parent_message_id)
           .select_related("thread__agent").only("pk", "seq", "thread_id", "thread__agent__slug",
                                                 "thread__title").first())
    if row is None:
        return None
    turn = Message.objects.filter(thread_id=row.thread_id, seq__lte=row.seq,
                                  role=Message.Role.USER, internal=False).count()
    return {"thread_id": str(row.thread_id), "agent": row.thread.agent.slug,
            "title": row.thread.title, "message_id": row.pk, "turn": max(0, turn - 1),
            "thread_url": f"/threads/{row.thread_id}/"}
