"""The operators' live feed: the fan-out of the outlet's events to sockets (fanout), and the
WebSocket consumer, by concern: connect and auth (consumers), commands (commands), sending
(sending), and what it reads of a socket (input)."""
