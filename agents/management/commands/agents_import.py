from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.exceptions import InvalidRequest
from agents.services import agents_import


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
