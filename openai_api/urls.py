from django.urls import path, re_path

from openai_api import apis, conversations
from openai_api.dialects import chat, completions, messages, responses

urlpatterns = [
    path("models", apis.ModelListApi.as_view(), name="v1-models"),
    re_path(r"^models/(?P<model_id>.+)$", apis.ModelDetailApi.as_view(), name="v1-model"),
    path("chat/completions", apis.ModelCreateApi.as_view(dialect=chat.DIALECT),
         name="v1-chat"),
    path("completions", apis.ModelCreateApi.as_view(dialect=completions.DIALECT),
         name="v1-completions"),
    path("embeddings", apis.EmbeddingCreateApi.as_view(), name="v1-embeddings"),
    path("responses", apis.ModelCreateApi.as_view(dialect=responses.DIALECT),
         name="v1-responses"),
    re_path(r"^responses/(?P<response_id>[^/]+)$", apis.ResponseDetailApi.as_view(),
            name="v1-response"),
    re_path(r"^responses/(?P<response_id>[^/]+)/cancel$", apis.ResponseCancelApi.as_view(),
            name="v1-response-cancel"),
    path("messages", apis.ModelCreateApi.as_view(dialect=messages.DIALECT), name="v1-messages"),
    path("messages/count_tokens", apis.MessageCountTokensApi.as_view(),
         name="v1-messages-count-tokens"),
    path("conversations", conversations.ConversationCreateApi.as_view(),
         name="v1-conversations"),
    re_path(r"^conversations/(?P<conversation_id>[^/]+)$",
            conversations.ConversationDetailApi.as_view(), name="v1-conversation"),
    re_path(r"^conversations/(?P<conversation_id>[^/]+)/items$",
            conversations.ConversationItemsApi.as_view(), name="v1-conversation-items"),
    re_path(r"^conversations/(?P<conversation_id>[^/]+)/items/(?P<item_id>[^/]+)$",
            conversations.ConversationItemDetailApi.as_view(), name="v1-conversation-item"),
    re_path(r"^[\s\S]*$", apis.NotFoundApi.as_view()),
]
