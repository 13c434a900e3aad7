"""``gaia agents import FILE`` (``manage.py agents_import``): providers, agents, knowledge
bases and their documents from YAML; idempotent.

A document it adds is indexed in the background, by whoever indexes here: a Celery worker when
``REDIS_URL`` is set, else the embedded worker of the process that added it
(:mod:`agents.infra.background`), which is this command's own. So without a broker the command
waits for its worker before it returns: the documents are ``ready`` (or ``error``, saying
why), not left ``queued`` by a process that exited with the work in memory. Documents an
earlier run left queued are indexed with them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.infra.background import embedded_worker
from agents.kernel.exceptions import InvalidRequest
from agents.models import KnowledgeDocument
from agents.services import agents_import, knowledge_document_index_schedule


class Command(BaseCommand):
    help = "Create or update providers and agents from a YAML file (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="YAML file with 'providers' and 'agents' lists")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CommandError(f"Cannot read {path}: {exc}") from exc
        try:
            report = agents_import(data=data)
        except InvalidRequest as exc:
            raise CommandError(exc.message) from exc
        for label in report.created:
            self.stdout.write(f"created   {label}")
        for label in report.updated:
            self.stdout.write(f"updated   {label}")
        for label in report.unchanged:
            self.stdout.write(f"unchanged {label}")
        if not settings.REDIS_URL:
            self._index_here()

    def _index_here(self) -> None:
        """Without a broker: index every queued document on this process's embedded worker
        (those the import added are on it already; scheduling one twice is harmless, the
        first claim wins) and wait until it has done them all."""
        queued = KnowledgeDocument.objects.filter(status=KnowledgeDocument.Status.QUEUED)
        ids = list(queued.values_list("pk", flat=True))
        if not ids:
            return
        for pk in ids:
            knowledge_document_index_schedule(document_id=pk)
        self.stdout.write(f"indexing  {len(ids)} document(s)...")
        done = threading.Event()
        worker = embedded_worker()
        worker.submit(done.set)  # its jobs run in order: this one comes after theirs
        while not done.wait(1.0):
            if not worker.is_alive():
                raise CommandError("The indexing worker stopped; run the import again.")
        for name, status, error in (KnowledgeDocument.objects.filter(pk__in=ids)
                                    .order_by("pk").values_list("name", "status", "error")):
            self.stdout.write(f"{status:<9} document:{name}" + (f" ({error})" if error else ""))
