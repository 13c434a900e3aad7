"""The mesh: a multi-agent relay with pluggable wire protocols, honest byte counts,
EM/ROUGE-L evaluation and archived artifacts.

Imports nothing from Django. The public API::

    from mesh import RunConfig, load_suite, run_question, run_suite
"""

from __future__ import annotations

from mesh.network import MeshEvent, MeshNetwork
from mesh.run import RunConfig, RunResult, run_question, run_suite
from mesh.suite import Question, load_suite

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
