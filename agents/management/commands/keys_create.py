from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from agents.models import Agent, ApiKey
from agents.services import Actor, api_key_create


class Command(BaseCommand):
    help = "Create an API key and print its secret (shown this once only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--scope", action="append", choices=ApiKey.Scope.values,
                            help="repeatable; default: chat")
        parser.add_argument("--agent", action="append", default=[],
                            help="agent slug this key may use (repeatable; default: all)")
        parser.add_argument("--rpm", type=int, default=0, help="requests per minute (0 = no limit)")
        parser.add_argument("--tpm", type=int, default=0,
                            help="tokens per minute, in and out (0 = no limit)")
        parser.add_argument("--budget-exempt", action="store_true",
                            help="exempt the key from every budget (audited)")
        parser.add_argument("--expires-days", type=int, default=None,
                            help="days until the key expires (at least 1; default: never)")

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["expires_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-days must be at least 1 (leave it out for a key "
                               "that never expires).")
        agents = []
        for slug in options["agent"]:
            agent = Agent.objects.filter(slug=slug).first()
            if agent is None:
                raise CommandError(f"No agent {slug!r}.")
            agents.append(agent)
        expires = None
        if days is not None:
            expires = timezone.now() + timedelta(days=days)
        key, secret = api_key_create(
            name=options["name"], scopes=options["scope"] or [ApiKey.Scope.CHAT],
            agents=agents, expires_at=expires, requests_per_minute=options["rpm"],
            tokens_per_minute=options["tpm"], budget_exempt=options["budget_exempt"],
            actor=Actor(label="cli", channel="cli"),  # audited; may give admin, as staff may
        )
        self.stderr.write(f"Created key {key.prefix} ({key.name}). The secret is shown once:")
        self.stdout.write(secret)
