from django.apps import AppConfig


class AgentConfig(AppConfig):
    """The agent runtime: runs, the step log, the ledger, the loop and the workflow."""

    name = "agent"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the workflow with DBOS in every process (decorators run at
        # import), so the worker and the in-process test executor agree on it.
        # Launching DBOS is the worker's job alone: see deskhand/dbos_setup.py.
        from agent import workflow  # noqa: F401
