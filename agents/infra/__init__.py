"""Infrastructure under every layer: database threads, the in-process worker, the turn's raw
row writes and migration helpers."""
