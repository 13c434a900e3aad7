"""The built-in kinds of benchmark run, registered (:mod:`benchmarks.registry`) on import (the
app's ``ready`` imports this package):

* :mod:`.mesh`: HotpotQA questions through the mesh relay (:mod:`.mesh_execute`: a worker's
  part of it, the whole run);
* :mod:`.replay`: a conversation suite replayed against agents, in parts that workers share
  (:mod:`benchmarks.replay.execute`).

A new kind is one more module here: a :class:`benchmarks.registry.RunKind` passed to
``kind_register``; the submit API, the executor, the pages and the admin find it there.
"""

from benchmarks.kinds import mesh, replay

__all__ = ["mesh", "replay"]
