from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        from benchmarks import (
            events,  # noqa: F401 - declares the run_* feed event types
            kinds,  # noqa: F401 - registers the built-in kinds of run
            schedules,
            worker,
        )

        schedules.register()  # replay schedules (agents/services/schedules.py)
        worker.embedded()  # the benchmarks queue's embedded worker, configured (not started)
