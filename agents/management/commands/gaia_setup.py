from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandParser

from agents.models import ApiKey
from agents.services import Actor, agents_import, api_key_create

DEFAULTS = Path(__file__).resolve().parents[2] / "defaults.yaml"


class Command(BaseCommand):
    help = "Create missing default agents and, once, a development API key (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-key", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        # Only what is missing: an agent an admin has changed (or re-pointed) stays as it is.
        report = agents_import(data=yaml.safe_load(DEFAULTS.read_text()), create_only=True)
        if report.created:
            self.stdout.write("Default agents created: " + ", ".join(report.created))
        if options["no_key"]:
            return
        existing = ApiKey.objects.filter(name="development", revoked_at__isnull=True).first()
        if existing:
            self.stdout.write(
                f"Development API key: {existing.prefix}… (created earlier; its secret was "
                "shown then). New one: .venv/bin/gaia keys create --name NAME"
            )
            return
        key, secret = api_key_create(name="development",  # audited, as `gaia keys create` is
                                     actor=Actor(label="cli", channel="cli"))
        self.stdout.write("")
        self.stdout.write(f"Development API key (shown once, keep it): {secret}")
