"""Celery tasks of the agents app: interfaces that take ids and call one service."""

from __future__ import annotations

from celery import shared_task

from agents import services


@shared_task(name="agents.knowledge_document_index", acks_late=True, time_limit=3600,
             soft_time_limit=3500)
def knowledge_document_index_task(document_id: int) -> bool:
    """Index one uploaded document (claims it; a redelivery does nothing)."""
    return services.knowledge_document_index(document_id=document_id)


@shared_task(name="agents.webhook_delivery_attempt", acks_late=True, ignore_result=True)
def webhook_delivery_attempt_task(delivery_id: int) -> str | None:
    """One attempt of a webhook delivery (claims it; a redelivered message does nothing)."""
    return services.webhook_delivery_attempt(delivery_id=delivery_id)
