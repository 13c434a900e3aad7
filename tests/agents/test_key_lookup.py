"""A known key prefix and an unknown one take the same path: no database read for either
once keys are in memory, so their timing cannot tell them apart (issue 17 item 12;
``scripts/perf/key_timing.py`` prints the figures)."""

from __future__ import annotations

import pytest

from agents import selectors, services
from agents.kernel.exceptions import AuthenticationFailed

pytestmark = pytest.mark.django_db


def test_unknown_and_known_prefixes_are_decided_in_memory(make_key,
                                                          django_assert_num_queries):
    key, secret = make_key()
    cache = selectors.access_cache()
    services.api_key_authenticate(raw=secret, cache=cache)  # loads every key
    wrong_secret = secret[:-4] + "abcd"
    unknown_prefix = "gaia_00000000_" + secret.split("_", 2)[2]
    with django_assert_num_queries(0):
        for raw in (wrong_secret, unknown_prefix):
            with pytest.raises(AuthenticationFailed):
                services.api_key_authenticate(raw=raw, cache=cache, cached_only=True)


def test_keys_made_later_are_found_after_the_configuration_stamp_moves(make_key):
    first, _ = make_key(name="first")
    cache = selectors.access_cache()
    assert selectors.api_key_cached(cache=cache, prefix=first.prefix) is not None
    second, secret = make_key(name="second")
    services.config_changed()  # what a key's save signal does
    assert services.api_key_authenticate(raw=secret).pk == second.pk
