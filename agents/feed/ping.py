"""``/ws/ping``'s consumer: the wiring check (a round trip through the channel layer)."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer


class PingConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        await self.accept()
        await self.send_json({"event": "connected"})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # Round-trip through the channel layer so a broken layer shows here.
        await self.channel_layer.send(self.channel_name, {"type": "agents.pong", "echo": content})

    async def agents_pong(self, message: dict[str, Any]) -> None:
        await self.send_json({"event": "pong", "echo": message["echo"]})
