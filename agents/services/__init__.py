"""Writes, one module per entity (HackSoft's services); ``from agents import services``
reaches every one of them."""

from __future__ import annotations

from agents.services.api_keys import (
    KEY_PREFIX,
    NeedsDatabase,
    api_key_authenticate,
    api_key_create,
    api_key_recheck,
    api_key_revoke,
    api_key_throttle,
    api_key_update,
    counter_add,
    counter_read,
    request_authorize,
)
from agents.services.approvals import (
    CLIENT_REQUEST_PREFIX,
    DECISIONS,
    approval_answer,
    approval_client_request_id,
    approval_decide,
    approval_decider,
    approval_request,
    approval_settle,
)
from agents.services.audit import (
    Actor,
    actor_label,
    audit_actor,
    audit_actor_of_request,
    audit_record,
)
from agents.services.budget_admin import budget_delete, budget_save
from agents.services.budgets import (
    Held,
    Holds,
    HoldStatement,
    budget_holds_release,
    budget_refusal_announce,
    budget_reserve,
    budget_reserve_statement,
    budget_settle,
    budget_settle_statement,
    budget_settled,
)
from agents.services.config import (
    AGENT_FIELDS,
    KNOWLEDGE_BASE_FIELDS,
    PROVIDER_FIELDS,
    TEAM_FIELDS,
    ImportReport,
    agents_export,
    agents_import,
    config_changed,
)
from agents.services.control import (
    AGENT_PAUSED_RETRY_AFTER,
    agent_changed_announce,
    agent_set_paused,
    organism_reload,
    thread_kill,
)
from agents.services.digests import EMPTY_DIGEST, digest_chain, session_key_fallback
from agents.services.inner import InnerMessage, inner_messages_store
from agents.services.knowledge import (
    BATCH,
    KNOWLEDGE_INDEX_TASK,
    knowledge_base_reindex,
    knowledge_document_add,
    knowledge_document_index,
    knowledge_document_index_schedule,
)
from agents.services.leases import INTERRUPTED_ERROR, thread_leases_renew, thread_leases_sweep
from agents.services.memory import (
    memory_delete,
    memory_remember,
)
from agents.services.organism import (
    ORGANISM_STOPPED_RETRY_AFTER,
    STOP_GRACE_MAX,
    STOP_GRACE_SECONDS,
    organism_running_turns_kill,
    organism_set_stopped,
)
from agents.services.prices import (
    Price,
    price_delete,
    price_lookup,
    price_of,
    price_set,
    turn_cost,
)
from agents.services.providers import (
    provider_save,
    provider_secrets_kept,
)
from agents.services.replies import thread_reply_checkpoint
from agents.services.threads import (
    FAILED_FINISHES,
    TurnStart,
    thread_turn_begin,
)
from agents.services.tools import (
    MCP_FIELDS,
    SECRET_FIELDS,
    agent_tools_check,
    mcp_servers_export,
    mcp_servers_import,
)
from agents.services.turn_end import (
    TurnResult,
    thread_turn_finish,
)
from agents.services.turn_statements import single_statements
from agents.services.usage import (
    UsageTurn,
    usage_error_kind,
    usage_rebuild,
    usage_record,
    usage_record_many,
)
from agents.services.webhook_delivery import (
    webhook_deliveries_due_send,
    webhook_delivery_attempt,
    webhook_delivery_schedule,
    webhook_retry_delays,
)
from agents.services.webhooks import (
    webhook_delivery_redeliver,
    webhook_endpoint_delete,
    webhook_endpoint_save,
    webhook_event_send,
    webhook_secret_new,
)

__all__ = [
    "AGENT_FIELDS",
    "AGENT_PAUSED_RETRY_AFTER",
    "BATCH",
    "CLIENT_REQUEST_PREFIX",
    "DECISIONS",
    "EMPTY_DIGEST",
    "FAILED_FINISHES",
    "INTERRUPTED_ERROR",
    "ImportReport",
    "InnerMessage",
    "KEY_PREFIX",
    "KNOWLEDGE_BASE_FIELDS",
    "KNOWLEDGE_INDEX_TASK",
    "MCP_FIELDS",
    "NeedsDatabase",
    "ORGANISM_STOPPED_RETRY_AFTER",
    "STOP_GRACE_MAX",
    "STOP_GRACE_SECONDS",
    "organism_running_turns_kill",
    "organism_set_stopped",
    "PROVIDER_FIELDS",
    "SECRET_FIELDS",
    "TEAM_FIELDS",
    "TurnResult",
    "TurnStart",
    "agent_changed_announce",
    "agent_set_paused",
    "agent_tools_check",
    "agents_export",
    "agents_import",
    "api_key_authenticate",
    "api_key_create",
    "api_key_recheck",
    "api_key_revoke",
    "api_key_throttle",
    "counter_add",
    "counter_read",
    "Held",
    "Holds",
    "HoldStatement",
    "budget_delete",
    "budget_holds_release",
    "budget_refusal_announce",
    "budget_reserve",
    "budget_reserve_statement",
    "budget_save",
    "budget_settle",
    "budget_settle_statement",
    "budget_settled",
    "Price",
    "price_delete",
    "price_lookup",
    "price_set",
    "price_of",
    "turn_cost",
    "single_statements",
    "api_key_update",
    "Actor",
    "actor_label",
    "audit_actor",
    "audit_actor_of_request",
    "audit_record",
    "provider_save",
    "provider_secrets_kept",
    "approval_answer",
    "approval_client_request_id",
    "approval_decide",
    "approval_decider",
    "approval_request",
    "approval_settle",
    "config_changed",
    "digest_chain",
    "inner_messages_store",
    "knowledge_base_reindex",
    "knowledge_document_add",
    "knowledge_document_index",
    "knowledge_document_index_schedule",
    "mcp_servers_export",
    "mcp_servers_import",
    "memory_delete",
    "memory_remember",
    "organism_reload",
    "request_authorize",
    "session_key_fallback",
    "thread_kill",
    "thread_leases_renew",
    "thread_leases_sweep",
    "thread_reply_checkpoint",
    "thread_turn_begin",
    "thread_turn_finish",
    "usage_error_kind",
    "usage_rebuild",
    "usage_record",
    "usage_record_many",
    "UsageTurn",
    "webhook_deliveries_due_send",
    "webhook_delivery_attempt",
    "webhook_delivery_redeliver",
    "webhook_delivery_schedule",
    "webhook_endpoint_delete",
    "webhook_endpoint_save",
    "webhook_event_send",
    "webhook_retry_delays",
    "webhook_secret_new",
]
