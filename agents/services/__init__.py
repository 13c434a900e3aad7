"""Writes, one module per entity (HackSoft's services); ``from agents import services``
reaches every one of them."""

from __future__ import annotations

from agents.services.api_keys import (
    KEY_PREFIX,
    NeedsDatabase,
    api_key_authenticate,
    api_key_create,
    api_key_revoke,
    api_key_throttle,
    request_authorize,
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
from agents.services.knowledge import (
    BATCH,
    knowledge_base_reindex,
    knowledge_document_add,
    knowledge_document_index,
    knowledge_document_index_schedule,
)
from agents.services.threads import (
    EMPTY_DIGEST,
    FAILED_FINISHES,
    INTERRUPTED_ERROR,
    InnerMessage,
    TurnResult,
    TurnStart,
    digest_chain,
    session_key_fallback,
    team_messages_store,
    thread_leases_renew,
    thread_leases_sweep,
    thread_turn_begin,
    thread_turn_finish,
)

__all__ = [
    "AGENT_FIELDS",
    "AGENT_PAUSED_RETRY_AFTER",
    "BATCH",
    "EMPTY_DIGEST",
    "FAILED_FINISHES",
    "INTERRUPTED_ERROR",
    "ImportReport",
    "InnerMessage",
    "KEY_PREFIX",
    "KNOWLEDGE_BASE_FIELDS",
    "NeedsDatabase",
    "PROVIDER_FIELDS",
    "TEAM_FIELDS",
    "TurnResult",
    "TurnStart",
    "agent_changed_announce",
    "agent_set_paused",
    "agents_export",
    "agents_import",
    "api_key_authenticate",
    "api_key_create",
    "api_key_revoke",
    "api_key_throttle",
    "config_changed",
    "digest_chain",
    "knowledge_base_reindex",
    "knowledge_document_add",
    "knowledge_document_index",
    "knowledge_document_index_schedule",
    "organism_reload",
    "request_authorize",
    "session_key_fallback",
    "team_messages_store",
    "thread_kill",
    "thread_leases_renew",
    "thread_leases_sweep",
    "thread_turn_begin",
    "thread_turn_finish",
]
