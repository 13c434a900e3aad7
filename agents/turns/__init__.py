"""The one door into a turn (see :mod:`agents.turns.door`)."""

from agents.turns.catalogue import model_entry, model_entry_anthropic

__all__ = ["model_entry", "model_entry_anthropic"]
