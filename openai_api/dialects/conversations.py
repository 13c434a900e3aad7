"""OpenAI Conversations API: its input (metadata, items, the list's paging) and its objects
(a conversation, its items, a page of them).

https://platform.openai.com/docs/api-reference/conversations. A conversation is a Gaia thread;
its items are the thread's messages (less the agent's inner work). An item's id names its
message: a reply of the Responses API keeps the ids its response gave it (``msg_X``, ``rs_X``,
``fc_X_N`` for ``resp_X``: :func:`openai_api.dialects.responses_output.item_ids`), any other
message is named by its row (``msg_<16 hex>``; a tool result ``fco_<16 hex>``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from agents.models import Conversation, Message
from openai_api.dialects.responses import parse_input
from openai_api.dialects.responses_output import (
    function_call_item,
    item_ids,
    reasoning_item,
    text_part,
)

MAX_ITEMS = 20  # items a request may add (OpenAI's limit)
MAX_METADATA = 16  # OpenAI's metadata: 16 pairs, keys of 64 characters, values of 512
MAX_KEY, MAX_VALUE = 64, 512
INCOMPLETE = ("length", "error", "client_disconnected", "interrupted", "cancelled")
# What ``include`` may ask for (the SDK's ResponseIncludable); none changes Gaia's items.
INCLUDABLE = frozenset({
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url",
    "code_interpreter_call.outputs", "reasoning.encrypted_content",
    "message.output_text.logprobs"})
_ITEM_ID = re.compile(r"^(msg|rs|fc|fco)_([0-9a-f]{16}|[0-9a-f]{32})(?:_(\d{1,4}))?$")


# -- input --------------------------------------------------------------------------------------

def metadata_of(value: Any, *, param: str = "metadata") -> dict[str, str]:
    """OpenAI's metadata (``None``: none): at most 16 string pairs, keys of at most 64
    characters, values of at most 512."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequest("'metadata' must be an object of strings.", param=param,
                             code="invalid_value")
    if len(value) > MAX_METADATA:
        raise InvalidRequest(f"'metadata' holds at most {MAX_METADATA} pairs.", param=param,
                             code="invalid_value")
    for key, text in value.items():
        if len(key) > MAX_KEY or not isinstance(text, str) or len(text) > MAX_VALUE:
            raise InvalidRequest(f"'metadata' keys are strings of at most {MAX_KEY} "
                                 f"characters, its values of at most {MAX_VALUE}.",
                                 param=f"{param}.{key[:MAX_KEY]}", code="invalid_value")
    return dict(value)


def items_of(value: Any, *, param: str = "items", required: bool = False
             ) -> list[llm.Message]:
    """Input items (the Responses API's: messages of any role, ``function_call`` and
    ``function_call_output``) as the messages to store, in order; at most 20. The items a
    reply records of its own work (``reasoning``, MCP items) add nothing, as in a turn."""
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise InvalidRequest(f"'{param}' must be a non-empty list of items.", param=param,
                             code="invalid_value")
    if len(value) > min(MAX_ITEMS, settings.GAIA_MAX_MESSAGES):
        raise InvalidRequest(f"At most {MAX_ITEMS} items may be added at a time; this request "
                             f"has {len(value)}.", param=param, code="too_many_items")
    out: list[llm.Message] = []
    for i, item in enumerate(value):
        here = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest("Items must be objects.", param=here, code="invalid_value")
        try:
            system, messages = parse_input([item])
        except InvalidRequest as exc:
            if exc.param:
                exc.param = exc.param.replace("input[0]", here, 1)
            raise
        out.extend(llm.Message("system", (llm.TextPart(text),)) for text in system)
        out.extend(messages)
    return out


def include_of(values: list[str]) -> list[str]:
    for value in values:
        if value not in INCLUDABLE:
            raise InvalidRequest(f"Unknown 'include' value {value[:100]!r}.", param="include",
                                 code="invalid_value")
    return values


@dataclass(frozen=True)
class ItemRef:
    """What an item id names: a message by its row (``pk``) or the reply ``response_id``,
    and which of its items (``part``: message, reasoning, call; ``index``: the call's)."""

    part: str
    pk: int | None = None
    response_id: str | None = None
    index: int = 0


def item_ref(item_id: str) -> ItemRef | None:
    """The message an item id names (``None``: no item has such an id)."""
    match = _ITEM_ID.match(item_id)
    if match is None:
        return None
    prefix, name, index = match.groups()
    if (prefix == "fc") != (index is not None):
        return None
    part = {"msg": "message", "rs": "reasoning", "fc": "call", "fco": "message"}[prefix]
    if len(name) == 16:
        return ItemRef(part, pk=int(name, 16), index=int(index or 0))
    return ItemRef(part, response_id=f"resp_{name}", index=int(index or 0))


# -- output -------------------------------------------------------------------------------------

def conversation_out(conversation: Conversation) -> dict[str, Any]:
    return {"id": conversation.pk, "object": "conversation",
            "created_at": int(conversation.created_at.timestamp()),
            "metadata": conversation.metadata or {}}


def deleted_out(conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


def _ids(row: Message) -> tuple[str, str, str]:
    """``(message id, reasoning id, call id prefix)`` of a stored message's items."""
    if row.role == Message.Role.ASSISTANT and row.response_id.startswith("resp_") and \
            len(row.response_id) == 37:
        return item_ids(row.response_id)
    name = f"{row.pk:016x}"
    return (f"fco_{name}" if row.role == Message.Role.TOOL else f"msg_{name}",
            f"rs_{name}", f"fc_{name}")


def _image(part: dict[str, Any]) -> dict[str, Any]:
    url = part.get("url") or f"data:{part.get('media_type') or 'image/png'};base64," \
                             f"{part.get('data') or ''}"
    return {"type": "input_image", "detail": "auto", "image_url": url, "file_id": None}


def row_items(row: Message) -> list[tuple[ItemRef, dict[str, Any]]]:
    """A stored message as conversation items, with what each id names."""
    msg_id, rs_id, fc_prefix = _ids(row)
    if row.role == Message.Role.TOOL:
        return [(ItemRef("message", pk=row.pk), {
            "id": msg_id, "type": "function_call_output", "call_id": row.tool_call_id,
            "output": row.content, "status": "completed"})]
    if row.role != Message.Role.ASSISTANT:
        content: list[dict[str, Any]] = (
            [{"type": "input_text", "text": row.content}] if row.content else [])
        content += [_image(p) for p in row.parts or ()]
        return [(ItemRef("message", pk=row.pk), {
            "id": msg_id, "type": "message", "role": row.role, "status": "completed",
            "content": content})]
    status = "incomplete" if row.finish_reason in INCOMPLETE else "completed"
    out: list[tuple[ItemRef, dict[str, Any]]] = []
    if row.reasoning:
        out.append((ItemRef("reasoning", pk=row.pk), reasoning_item(rs_id, row.reasoning)))
    calls = row.tool_calls or []
    if row.content or not calls:
        out.append((ItemRef("message", pk=row.pk), {
            "id": msg_id, "type": "message", "role": "assistant", "status": status,
            "content": [text_part(row.content)] if row.content else []}))
    for i, call in enumerate(calls):
        out.append((ItemRef("call", pk=row.pk, index=i), function_call_item(
            f"{fc_prefix}_{i}", llm.ToolCall(call["id"], call["name"], call["arguments"]))))
    return out


def item_find(row: Message, ref: ItemRef) -> dict[str, Any] | None:
    """The item of ``row`` that ``ref`` names."""
    return next((item for found, item in row_items(row)
                 if found.part == ref.part and found.index == ref.index), None)


def item_list_out(items: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": items,
            "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None, "has_more": has_more}
