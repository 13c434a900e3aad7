"""The one door into a turn: interfaces (the ``/v1`` dialects, the operator API and feed,
benchmark runs) import this package, never its modules.

* :mod:`~agents.turns.door`: :func:`authorize`, :func:`turn_open`, :func:`turn_ask` and the
  model catalogue's reads;
* :mod:`~agents.turns.inject`: every rule of an operator's inject;
* :mod:`~agents.turns.embed`: :func:`embeddings_create` (``/v1/embeddings``: no thread, counted
  as a turn is); a text completion (``/v1/completions``) is a turn whose request
  :func:`completion_extra` marks (:mod:`agents.backends.completion`);
* :mod:`~agents.turns.spec`: :class:`TurnSpec` and :class:`TurnLike`;
* :mod:`~agents.turns.runtime` (one agent's :class:`Turn`; how it ends, whichever way it
  stops: :mod:`~agents.turns.ending`), :mod:`~agents.turns.teams`
  (``team/<slug>``), :mod:`~agents.turns.auto` (``auto``), :mod:`~agents.turns.catalogue`
  (which models exist), :mod:`~agents.turns.requests` (an agent as a provider request),
  :mod:`~agents.turns.reply` (a reply as it streams), :mod:`~agents.turns.registry` (the turns
  in flight: leases, kill, drain), :mod:`~agents.turns.loop` (an agent's own tools, run for its
  model), :mod:`~agents.turns.approvals` (a call that waits for an operator),
  :mod:`~agents.turns.delegate` (an agent that asks another).

:func:`tools_close` ends the current event loop's tool connections (MCP servers): a server
process calls it as it stops, a benchmark worker at the end of a run's loop.
"""

from agents.backends.completion import CURSOR as COMPLETION_CURSOR
from agents.backends.completion import completion_extra
from agents.tools import mcp_close_all as tools_close
from agents.turns import delegate as _delegate  # noqa: F401 - agents may call agents
from agents.turns.catalogue import AUTO, is_virtual, model_entry, model_entry_anthropic
from agents.turns.door import (
    Answer,
    authorize,
    authorize_stored,
    input_tokens_count,
    model_get,
    model_list,
    stored_reply,
    turn_ask,
    turn_open,
    turn_replay,
    turn_scheduled,
)
from agents.turns.embed import Embedded, embeddings_create
from agents.turns.ending import as_gaia_error
from agents.turns.inject import (
    Inject,
    InjectBody,
    Injected,
    inject,
    inject_parse,
    inject_payload_text,
    inject_prepare,
    turn_inject,
)
from agents.turns.registry import (
    background_keep,
    drain_begin,
    drain_interrupt,
    drain_wait,
    inflight_turns,
    snapshots_request,
    thread_kill_local,
)
from agents.turns.runtime import KEEPALIVE
from agents.turns.scheduled import schedule_run
from agents.turns.spec import TurnLike, TurnSpec

__all__ = [
    "AUTO",
    "COMPLETION_CURSOR",
    "KEEPALIVE",
    "Answer",
    "Embedded",
    "Inject",
    "InjectBody",
    "Injected",
    "TurnLike",
    "TurnSpec",
    "as_gaia_error",
    "completion_extra",
    "authorize",
    "authorize_stored",
    "background_keep",
    "drain_begin",
    "drain_interrupt",
    "drain_wait",
    "embeddings_create",
    "inflight_turns",
    "inject",
    "inject_parse",
    "inject_payload_text",
    "inject_prepare",
    "input_tokens_count",
    "is_virtual",
    "model_entry",
    "model_entry_anthropic",
    "model_get",
    "model_list",
    "stored_reply",
    "snapshots_request",
    "thread_kill_local",
    "tools_close",
    "turn_ask",
    "turn_inject",
    "turn_open",
    "turn_replay",
    "turn_scheduled",
    "schedule_run",
]
