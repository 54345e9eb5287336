from django.apps import AppConfig


class AgentConfig(AppConfig):
    """The agent: runs, the step log, the ledger, the loop and everything a run does.

    The workflow that runs the loop durably is the engine's (``deskhand.dbos.engine``).
    """

    name = "agent"
    default_auto_field = "django.db.models.BigAutoField"
