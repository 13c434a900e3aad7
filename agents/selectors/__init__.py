"""Reads, one module per entity (HackSoft's selectors); ``from agents import selectors``
reaches every one of them."""

from __future__ import annotations

from agents.selectors.access import (
    access_cache,
    access_cache_current,
    access_cache_drop,
    agent_cached,
    agent_provider_chain_load,
    api_key_agent_check,
    api_key_cached,
    api_keys_load,
    config_version,
    config_version_nowait,
)
from agents.selectors.agents import (
    agent_get,
    agent_leased_thread,
    agent_list_public,
    agent_public_get,
    model_list,
    queue_depth,
    turn_waiting,
)
from agents.selectors.approvals import (
    approval_get,
    approval_list,
    approval_public,
)
from agents.selectors.config import (
    INJECT_PAYLOAD_SCHEMA,
    REDACTED,
    agent_config,
    agent_schema,
    organism_config,
    provider_config,
)
from agents.selectors.console import (
    audit_list,
    audit_public,
    key_get,
    key_list,
    key_public,
    key_state,
    provider_get,
    provider_list,
    provider_public,
)
from agents.selectors.health import (
    health_report,
    organism_info,
)
from agents.selectors.history import (
    thread_history,
)
from agents.selectors.knowledge import (
    knowledge_retrieve,
    passages_prompt,
)
from agents.selectors.memory import (
    MAX_SCOPE_FACTS,
    memory_list,
    memory_public,
    memory_recall,
)
from agents.selectors.threads import (
    agent_last_error,
    client_label,
    iso,
    message_list,
    message_public,
    message_public_row,
    stored_reply_get,
    thread_admin_search,
    thread_branch_for_response,
    thread_get,
    thread_list,
    thread_list_active,
    thread_messages_page,
    thread_public,
    thread_public_row,
)
from agents.selectors.usage import (
    usage_filters_resolve,
    usage_summary,
    usage_window,
)

__all__ = [
    "thread_admin_search",
    "thread_history",
    "agent_last_error",
    "audit_list",
    "audit_public",
    "key_get",
    "key_list",
    "key_public",
    "key_state",
    "provider_get",
    "provider_list",
    "provider_public",
    "usage_filters_resolve",
    "usage_summary",
    "usage_window",
    "INJECT_PAYLOAD_SCHEMA",
    "MAX_SCOPE_FACTS",
    "REDACTED",
    "access_cache",
    "access_cache_current",
    "access_cache_drop",
    "api_key_agent_check",
    "agent_cached",
    "agent_config",
    "agent_get",
    "agent_leased_thread",
    "agent_list_public",
    "agent_provider_chain_load",
    "agent_public_get",
    "agent_schema",
    "api_key_cached",
    "api_keys_load",
    "approval_get",
    "approval_list",
    "approval_public",
    "client_label",
    "config_version",
    "config_version_nowait",
    "health_report",
    "iso",
    "knowledge_retrieve",
    "memory_list",
    "memory_public",
    "memory_recall",
    "message_list",
    "thread_messages_page",
    "message_public",
    "message_public_row",
    "model_list",
    "organism_config",
    "organism_info",
    "passages_prompt",
    "provider_config",
    "queue_depth",
    "stored_reply_get",
    "thread_branch_for_response",
    "thread_get",
    "thread_list",
    "thread_list_active",
    "thread_public",
    "thread_public_row",
    "turn_waiting",
]
