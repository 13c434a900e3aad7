"""What a schedule's tick does once claimed: an agent's turn (through the door,
:func:`agents.turns.door.turn_scheduled`) or a replay run (the runner the benchmarks app
registered), recorded on the schedule however it ends (:func:`agents.services.schedule_run_finish`:
a failure is the feed's ``schedule_failed``)."""

from __future__ import annotations

import asyncio
import logging

from agents import services
from agents.models import Schedule
from agents.outlet import realtime
from agents.tools import mcp_close_all
from agents.turns.door import Answer, turn_scheduled
from agents.turns.ending import as_gaia_error

log = logging.getLogger("gaia.schedules")


def _ask(schedule: Schedule) -> Answer:
    """The schedule's turn, from a worker's thread: on the server's loop when this process
    serves (embedded), else on a loop of its own that closes its tool connections."""
    agent = schedule.agent
    if agent is None:
        from agents.kernel.exceptions import AgentNotFound

        raise AgentNotFound("The schedule's agent was deleted.", param="agent")
    thread_id = (str(schedule.thread_id) if schedule.thread_mode == Schedule.ThreadMode.CONTINUE
                 and schedule.thread_id else None)
    session_key = f"schedule:{schedule.pk}" + (
        "" if schedule.thread_mode == Schedule.ThreadMode.CONTINUE
        else f":{schedule.last_fired_for.isoformat() if schedule.last_fired_for else ''}")

    async def main() -> Answer:
        try:
            return await turn_scheduled(agent=agent.slug, prompt=schedule.prompt,
                                        schedule=schedule.name, session_key=session_key,
                                        thread_id=thread_id)
        finally:
            if realtime.serving_loop() is None:
                await mcp_close_all()

    serving = realtime.serving_loop()
    if serving is not None and serving.is_running():
        return asyncio.run_coroutine_threadsafe(main(), serving).result()
    return realtime.run_and_flush(main())


def schedule_run(*, schedule_id: int) -> str:
    """Run the schedule's claimed tick; record the outcome. Returns its status (``ok`` or
    ``failed``; ``gone`` for a schedule deleted meanwhile). Never raises for the run's own
    failure: that is the schedule's to show."""
    schedule = Schedule.objects.select_related("agent").filter(pk=schedule_id).first()
    if schedule is None:
        return "gone"
    thread_id = run_id = None
    error = ""
    try:
        if schedule.kind == Schedule.Kind.AGENT:
            answer = _ask(schedule)
            thread_id = answer.thread_id
            error = answer.error or ("" if answer.text or answer.finish_reason
                                     not in services.FAILED_FINISHES
                                     else f"The turn ended: {answer.finish_reason}.")
        else:
            run_id = services.schedule_replay_start(schedule=schedule)
    except Exception as exc:
        error = as_gaia_error(exc).message
        thread_id = getattr(exc, "thread_id", None)
        log.warning("schedule %s (%s) failed: %s", schedule.pk, schedule.name, error)
    services.schedule_run_finish(schedule_id=schedule.pk, error=error, thread_id=thread_id,
                                 run_id=run_id)
    return "failed" if error else "ok"
