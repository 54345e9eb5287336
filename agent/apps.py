from django.apps import AppConfig


class AgentConfig(AppConfig):
    """The agent: runs, the step log, the ledger, the loop and everything a run does.

    The workflow that runs the loop durably is the engine's (``deskhand.engine``).
    """

    name = "agent"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A customer's new message wakes the run waiting for it, or opens one (agent.customer).
        from agent.customer.route import on_customer_wrote
        from deskhand.domain.desk.thread import customer_wrote

        customer_wrote.connect(on_customer_wrote, dispatch_uid="agent.customer.route")
