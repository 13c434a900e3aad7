"""``/v1/conversations``: OpenAI's Conversations API over Gaia's threads.

Each view parses (:mod:`openai_api.dialects.conversations`), authorizes the key as every /v1
route does (:func:`agents.turns.authorize`: 401, then its rate limit), calls one service or
selector of the core on a database thread, and renders. A key sees only its own
conversations: another key's is a 404 like an unknown id. A turn in a conversation is
``POST /v1/responses`` with ``conversation`` (:class:`openai_api.apis.ModelCreateApi`).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from agents import selectors, services, turns
from agents.http.authentication import raw_api_key
from agents.infra.database import run_db
from agents.kernel.exceptions import InvalidRequest, NotFound
from agents.models import ApiKey, Conversation, Message
from openai_api.apis import V1View, json_response, request_body
from openai_api.dialects import conversations as dialect
from openai_api.dialects.common import parse_json

DEFAULT_LIMIT, MAX_LIMIT = 20, 100


async def _key(request: HttpRequest) -> ApiKey | None:
    key, _ = await turns.authorize(raw_key=raw_api_key(request))
    return key


async def _body(request: HttpRequest) -> tuple[ApiKey | None, dict[str, Any]]:
    """The key, then the JSON body (a 401 comes before a malformed body's 400)."""
    key = await _key(request)
    body = request_body(request)
    return key, parse_json(body) if body.strip() else {}


async def _conversation(conversation_id: str, key: ApiKey | None) -> Conversation:
    return await run_db(selectors.conversation_get, conversation_id=conversation_id,
                        api_key=key)


def _items(rows: list[Message]) -> list[dict[str, Any]]:
    return [item for row in rows for _, item in dialect.row_items(row)]


def _include(request: HttpRequest) -> list[str]:
    return dialect.include_of(request.GET.getlist("include") + request.GET.getlist("include[]"))


class ConversationCreateApi(V1View):
    """``POST /v1/conversations``: a new conversation, with ``metadata`` and first
    ``items``."""

    http_method_names = ["post", "options"]

    async def post(self, request: HttpRequest) -> HttpResponse:
        key, data = await _body(request)
        metadata = dialect.metadata_of(data.get("metadata"))
        messages = dialect.items_of(data.get("items"))
        conversation, _ = await run_db(services.conversation_create, api_key=key,
                                       metadata=metadata, messages=messages)
        return json_response(dialect.conversation_out(conversation))


class ConversationDetailApi(V1View):
    """``GET``, ``POST`` (its metadata) and ``DELETE /v1/conversations/{id}``."""

    http_method_names = ["get", "post", "delete", "options"]

    async def get(self, request: HttpRequest, conversation_id: str) -> HttpResponse:
        conversation = await _conversation(conversation_id, await _key(request))
        return json_response(dialect.conversation_out(conversation))

    async def post(self, request: HttpRequest, conversation_id: str) -> HttpResponse:
        key, data = await _body(request)
        if "metadata" not in data:
            raise InvalidRequest("'metadata' is required.", param="metadata",
                                 code="missing_required_parameter")
        metadata = dialect.metadata_of(data["metadata"])
        conversation = await _conversation(conversation_id, key)
        conversation = await run_db(services.conversation_update, conversation=conversation,
                                    metadata=metadata)
        return json_response(dialect.conversation_out(conversation))

    async def delete(self, request: HttpRequest, conversation_id: str) -> HttpResponse:
        conversation = await _conversation(conversation_id, await _key(request))
        await run_db(services.conversation_delete, conversation=conversation)
        return json_response(dialect.deleted_out(conversation_id))


def _limit(request: HttpRequest) -> int:
    raw = request.GET.get("limit")
    if raw is None:
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {MAX_LIMIT}.",
                             param="limit", code="invalid_value")
    return limit


def _item_row(conversation: Conversation, item_id: str, *, param: str = "item_id"
              ) -> tuple[Message, dialect.ItemRef]:
    """The message holding the item ``item_id`` of the conversation, and the reference."""
    ref = dialect.item_ref(item_id)
    row = None if ref is None else selectors.conversation_message_get(
        conversation=conversation, pk=ref.pk, response_id=ref.response_id)
    item = None if row is None or ref is None else dialect.item_find(row, ref)
    if row is None or ref is None or item is None or item["id"] != item_id:
        raise NotFound(f"Item with id '{item_id[:100]}' not found.", param=param,
                       code="item_not_found")
    return row, ref


def _page(conversation: Conversation, *, after: str | None, descending: bool, limit: int
          ) -> tuple[list[dict[str, Any]], bool]:
    """A page of the conversation's items (after the item ``after``) and whether more
    follow. Every message is at least one item: ``limit + 2`` messages from the one holding
    ``after`` give enough."""
    after_seq = None
    if after is not None:
        row, _ = _item_row(conversation, after, param="after")
        after_seq = row.seq
    rows = selectors.conversation_message_page(conversation=conversation, after_seq=after_seq,
                                               descending=descending, rows=limit + 2)
    items = [item for row in rows
             for _, item in (reversed(dialect.row_items(row)) if descending
                             else dialect.row_items(row))]
    if after is not None:
        at = next(i for i, item in enumerate(items) if item["id"] == after)
        items = items[at + 1:]
    return items[:limit], len(items) > limit


class ConversationItemsApi(V1View):
    """``GET /v1/conversations/{id}/items`` (a page: ``limit``, ``after``, ``order``,
    ``include``) and ``POST`` (add ``items``)."""

    http_method_names = ["get", "post", "options"]

    async def get(self, request: HttpRequest, conversation_id: str) -> HttpResponse:
        key = await _key(request)
        limit, order, after = _limit(request), request.GET.get("order", "desc"), \
            request.GET.get("after")
        if order not in ("asc", "desc"):
            raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order",
                                 code="invalid_value")
        _include(request)
        conversation = await _conversation(conversation_id, key)
        items, more = await run_db(_page, conversation, after=after,
                                   descending=order == "desc", limit=limit)
        return json_response(dialect.item_list_out(items, has_more=more))

    async def post(self, request: HttpRequest, conversation_id: str) -> HttpResponse:
        key, data = await _body(request)
        _include(request)
        messages = dialect.items_of(data.get("items"), required=True)
        conversation = await _conversation(conversation_id, key)
        rows = await run_db(services.conversation_items_add, conversation=conversation,
                            messages=messages)
        return json_response(dialect.item_list_out(_items(rows), has_more=False))


class ConversationItemDetailApi(V1View):
    """``GET`` and ``DELETE /v1/conversations/{id}/items/{item_id}`` (a delete answers
    with the conversation)."""

    http_method_names = ["get", "delete", "options"]

    async def get(self, request: HttpRequest, conversation_id: str, item_id: str
                  ) -> HttpResponse:
        key = await _key(request)
        _include(request)
        conversation = await _conversation(conversation_id, key)
        row, ref = await run_db(_item_row, conversation, item_id)
        return json_response(dialect.item_find(row, ref))

    async def delete(self, request: HttpRequest, conversation_id: str, item_id: str
                     ) -> HttpResponse:
        conversation = await _conversation(conversation_id, await _key(request))
        row, ref = await run_db(_item_row, conversation, item_id)
        await run_db(services.conversation_item_remove, conversation=conversation, row=row,
                     part=ref.part, index=ref.index)
        return json_response(dialect.conversation_out(conversation))
