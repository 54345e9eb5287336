from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    """The consent gate: approvals, decisions, steering notes and the human-action audit."""

    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"
