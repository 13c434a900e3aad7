"""WebSocket routes. The operator feed adds its consumers here."""

from django.urls import path

from agents.consumers import PingConsumer

websocket_urlpatterns = [
    path("ws/ping/", PingConsumer.as_asgi()),
]
