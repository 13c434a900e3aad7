"""factory_boy factories for the agents app."""

from __future__ import annotations

import factory

from agents.models import Agent, Provider


class ProviderFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Provider
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"provider-{n}")
    kind = Provider.Kind.FAKE
    default_model = "fake-model"
    timeout_seconds = 30.0
    max_concurrency = 64
    options = factory.LazyFunction(dict)


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"agent-{n}")
    display_name = factory.LazyAttribute(lambda o: o.slug.title())
    description = "A test agent."
    instructions = "Be brief."
    provider = factory.SubFactory(ProviderFactory)
    max_input_tokens = 8192
    max_output_tokens = 1024
