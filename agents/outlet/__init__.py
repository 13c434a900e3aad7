"""The event outlet: every change an operator can see leaves Gaia here (realtime), as one of
the declared event types (events). Services and the turn runtime publish; the feed
(:mod:`agents.feed`) carries the events to operators' sockets."""
