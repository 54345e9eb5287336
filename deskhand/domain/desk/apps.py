from django.apps import AppConfig


class DeskConfig(AppConfig):
    """The domain the agent works on: merchants, customers, orders, tickets, KB."""

    name = "deskhand.domain.desk"
    label = "desk"
    verbose_name = "Support desk"
    default_auto_field = "django.db.models.BigAutoField"
