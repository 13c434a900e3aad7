"""WebSocket consumers. The operator feed lands here in a later issue; ``PingConsumer`` proves
the Channels wiring (and the channel layer) end to end."""

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
