"""A tool call that must be approved waits here, in its turn: stored (``approval_requested``
on the feed, ``GET /api/v1/approvals``), the thread ``waiting``, until an operator decides
(``POST /api/v1/approvals/{id}``, the feed's ``approve``/``deny`` commands, the thread page's
buttons: any process) or the agent's ``approval_timeout_seconds`` pass, a denial.

The waiting turn holds no database thread (it awaits a future on its event loop; its stream
keeps sending keep-alives meanwhile). The decision reaches it by a control message to every
process; the future is registered before the approval is stored, so no decision can come
first, and the turn reads the stored outcome at the end whatever woke it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from agents import services
from agents.infra.database import run_db
from agents.kernel.exceptions import GaiaError
from agents.models import Approval
from agents.outlet import realtime

_waiting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}


@realtime.on_control("approval_decided")
def approval_decided_local(message: dict[str, Any]) -> None:
    """Wake the turn of this process that waits for ``message["approval_id"]``, if any."""
    held = _waiting.get(str(message.get("approval_id")))
    if held is not None:
        loop, future = held
        loop.call_soon_threadsafe(lambda: future.done() or future.set_result(None))


async def approval_wait(turn: Any, spec: Any, call_id: str, arguments: str) -> str | None:
    """Wait for the decision on this call: ``None`` if approved, else why it was not run (the
    model's error result; at once if its thread has too many calls waiting already)."""
    start = await turn.started()
    agent = turn.agent
    timeout = float(getattr(agent, "approval_timeout_seconds", 300))
    approval_id = uuid.uuid4()
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    _waiting[str(approval_id)] = (loop, future)
    refused: str | None = None
    stopped = False  # the turn stopped while it waited (a client gone, a kill)
    try:
        try:
            await run_db(services.approval_request, approval_id=approval_id,
                         thread_id=start.thread_id, agent=agent,
                         response_id=turn.spec.response_id, call_id=call_id, tool=spec.name,
                         server=spec.server, arguments=arguments, timeout=timeout)
        except GaiaError as exc:  # refused (too many waiting): nothing stored to wait for
            refused = f"{spec.name} was not run: {exc.message}"
        else:
            turn.waiting_for_approval(True)
            try:
                async with asyncio.timeout(timeout):
                    await future
            except TimeoutError:
                pass
    except asyncio.CancelledError:
        stopped = True
        raise
    finally:
        _waiting.pop(str(approval_id), None)
        turn.waiting_for_approval(False)
        if refused is None:
            approval = await asyncio.shield(run_db(services.approval_settle,
                                                   approval_id=approval_id, agent=agent,
                                                   stopped=stopped))
    if refused is not None:
        return refused
    if approval.status == Approval.Status.APPROVED:
        return None
    if approval.status == Approval.Status.EXPIRED:
        return f"{spec.name} was not run: nobody approved it within {timeout:g} s."
    why = f": {approval.reason}" if approval.reason else ""
    return f"{spec.name} was not run: {approval.decided_by or 'an operator'} denied it{why}."
