"""WebSocket routes: the operator feed, and the ping consumer that checks the wiring."""

from django.urls import path

from agents.feed.consumers import FeedConsumer
from agents.feed.ping import PingConsumer

websocket_urlpatterns = [
    path("ws", FeedConsumer.as_asgi()),
    path("ws/", FeedConsumer.as_asgi()),
    path("ws/ping/", PingConsumer.as_asgi()),
]
