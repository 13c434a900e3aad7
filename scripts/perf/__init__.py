"""Measurements that print figures. Run one from the repository's root as
``.venv/bin/python -m scripts.perf.NAME``; what they share lives in ``scripts.perf.harness``."""
