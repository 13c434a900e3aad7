"""Writes of benchmark suites: HotpotQA suites for the mesh (validated, size-limited), and the
versioning every suite shares (a name that exists gets its next version; a version never
changes once made). Conversation suites are made in :mod:`benchmarks.replay.suites`."""

from __future__ import annotations

import json
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from agents.kernel.exceptions import Conflict, InvalidRequest
from agents.models import ApiKey
from benchmarks.models import BenchmarkSuite

MAX_SUITE_QUESTIONS = 2000
MAX_SUITE_BYTES = 10 * 1024 * 1024
MAX_QUESTION_PARAGRAPHS = 200

@transaction.atomic
def suite_create(*, name: str, questions: Any, description: str = "", source: str = "",
                 licence: str = "", created_by: ApiKey | None = None,
                 builtin: bool = False) -> BenchmarkSuite:
    """Validate ``questions`` (HotpotQA shape, size limits) and store a suite.

    Raises :class:`InvalidRequest` naming the bad field; a taken name gets a new version."""
    from mesh.suite import parse_suite

    size = len(json.dumps(questions))
    if size > MAX_SUITE_BYTES:
        raise InvalidRequest(f"questions: {size} bytes is over the {MAX_SUITE_BYTES} limit.",
                             param="questions", code="too_large")
    if isinstance(questions, list) and len(questions) > MAX_SUITE_QUESTIONS:
        raise InvalidRequest(f"questions: at most {MAX_SUITE_QUESTIONS} per suite.",
                             param="questions", code="too_large")
    try:
        parsed = parse_suite(questions)
    except ValueError as exc:
        raise InvalidRequest(f"questions: {exc}", param="questions", code="invalid") from exc
    for q in parsed:
        if len(q.paragraphs) > MAX_QUESTION_PARAGRAPHS:
            raise InvalidRequest(
                f"questions: item {q.index} has over {MAX_QUESTION_PARAGRAPHS} paragraphs.",
                param="questions", code="too_large")
        if not q.question.strip() or not q.paragraphs:
            raise InvalidRequest(f"questions: item {q.index} needs a question and a context.",
                                 param="questions", code="invalid")
    # A name that exists gets its next version: runs keep naming the version they used.
    suite = BenchmarkSuite(name=name, description=description, source=source, licence=licence,
                           questions=questions, question_count=len(parsed), builtin=builtin,
                           created_by=created_by)
    suite.full_clean(validate_constraints=False)  # the version is suite_version_save's
    return suite_version_save(suite)


SUITE_VERSION_TRIES = 8


def suite_version_save(suite: BenchmarkSuite) -> BenchmarkSuite:
    """Save ``suite`` as the next version of its name (call inside a transaction).

    Two requests that make the same name at once (two imports of one suite) each get a
    version of their own: the unique ``(name, version)`` constraint decides, and the one that
    lost the race takes the next version, in a savepoint so that its transaction goes on.
    :class:`Conflict` (409 ``suite_busy``) if it keeps losing."""
    for _ in range(SUITE_VERSION_TRIES):
        latest = BenchmarkSuite.objects.filter(name=suite.name).aggregate(v=Max("version"))["v"]
        suite.version = (latest or 0) + 1
        try:
            with transaction.atomic():
                suite.save(force_insert=True)
        except IntegrityError:
            suite.pk = None
            if not BenchmarkSuite.objects.filter(name=suite.name,
                                                 version=suite.version).exists():
                raise  # not the version's race: a real error
            continue
        return suite
    raise Conflict(f"Suite {suite.name!r} is being made by other requests right now; try "
                   "again.", param="name", code="suite_busy")
