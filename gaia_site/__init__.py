from gaia_site.celery import app as celery_app  # noqa: I001 - the order matters (below)

# Before anything imports prometheus-client, which picks its way of keeping values once, when
# first imported: agents.infra.metrics first says where this process's workers share theirs
# (after gaia_site.celery, which says it for a Celery worker's pool).
import agents.infra.metrics  # noqa: E402, F401

__all__ = ["celery_app"]
