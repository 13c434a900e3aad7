"""``/a2a``: every listed agent as an A2A agent (issue 39), on the official ``a2a-sdk``."""
