from django.apps import AppConfig


class FleetConfig(AppConfig):
    """The workers: who executes runs, whether they are alive, and who took over the dead.

    Its one model, ``Worker``, is the registry every worker writes while it holds the
    session advisory lock of its executor id (``deskhand.infra.fleet.lease``). The lowest
    layer: it knows Django and Postgres, no app.
    """

    name = "deskhand.infra.fleet"
    label = "fleet"
    verbose_name = "Worker fleet"
    default_auto_field = "django.db.models.BigAutoField"
