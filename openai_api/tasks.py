"""Celery tasks of the /v1 interface: they take ids and call the code that claims the work."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="openai_api.background_response_run", acks_late=True,
             reject_on_worker_lost=False, ignore_result=True)
def background_response_run(response_id: str) -> str | None:
    """Run one background response (``POST /v1/responses`` with ``background: true``). A
    redelivered message finds it claimed and does nothing; one whose worker died is queued
    again by the periodic check (:func:`agents.services.background_responses_recover_stale`),
    not by redelivery. Run eagerly, it is the web process's embedded worker's."""
    from openai_api.background_run import background_response_execute, worker_name

    request = background_response_run.request
    worker = worker_name() + (":embedded" if request.is_eager else "")
    return background_response_execute(response_id=response_id, worker=worker)
