from typing import Any

import yaml
from django.core.management.base import BaseCommand

from agents.services import agents_export


class Command(BaseCommand):
    help = "Print every provider and agent as YAML (secrets are never exported)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(yaml.safe_dump(agents_export(), sort_keys=False, allow_unicode=True))
