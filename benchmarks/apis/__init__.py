"""The benchmarks REST API under ``/api/v1/benchmarks/`` (DRF), a module per resource: runs of
every kind (:mod:`.runs`), a replay's cases side by side (:mod:`.replays`), suites
(:mod:`.suites`); what they share (:mod:`.base`: access, the run a path names, the JSON 404)
and the shapes they answer with (:mod:`.shapes`).

Who may call it: API keys with the ``benchmarks`` or the ``operator`` scope
(``Authorization: Bearer`` or ``X-API-Key``), or a staff session. Errors are the operator
API's (:mod:`agents.http.rest`, the shared edge): ``{"detail": "...", "code": "invalid", "param":
"limit", "errors": {...}}``; a 400 names the bad field in ``param``.
"""
