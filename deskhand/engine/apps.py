from django.apps import AppConfig


class EngineConfig(AppConfig):
    """DBOS's engine: registers the workflows and schedules, owns ``worker`` and ``move_runs``."""

    name = "deskhand.engine"
    label = "engine"
    verbose_name = "Durable engine (DBOS)"

    def ready(self) -> None:
        # Register the workflows and schedules with DBOS in every process (decorators run
        # at import), so a worker and the in-process test executor agree on them. Launching
        # DBOS is the worker's job alone (deskhand.engine.bootstrap).
        from deskhand.engine import (  # noqa: F401
            intake,
            payment_events,
            schedules,
            shopify_webhooks,
            workflow,
        )
