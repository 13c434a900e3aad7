"""The mesh: a multi-agent relay with pluggable wire protocols, honest byte counts,
EM/ROUGE-L evaluation and archived artifacts.

Imports nothing from Django. The public API::

    from mesh import RunConfig, load_suite, run_question, run_suite
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mesh.network import MeshEvent, MeshNetwork
    from mesh.run import RunConfig, RunResult, run_question, run_suite
    from mesh.suite import Question, load_suite

# Lazy (PEP 562), so an agent process importing ``mesh.agent`` does not pay for the evaluator.
_EXPORTS = {
    "MeshEvent": "mesh.network",
    "MeshNetwork": "mesh.network",
    "Question": "mesh.suite",
    "RunConfig": "mesh.run",
    "RunResult": "mesh.run",
    "load_suite": "mesh.suite",
    "run_question": "mesh.run",
    "run_suite": "mesh.run",
}

__all__ = [
    "MeshEvent",
    "MeshNetwork",
    "Question",
    "RunConfig",
    "RunResult",
    "load_suite",
    "run_question",
    "run_suite",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'mesh' has no attribute {name!r}")
