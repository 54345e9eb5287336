from django.apps import AppConfig


class EdgeConfig(AppConfig):
    """The web edge: malformed requests refused, sign-in throttled, a database outage as a 503.

    Its one model, ``LoginFailure``, keeps failed sign-ins in Postgres so every web
    process (and a restarted one) sees the same count.
    """

    name = "deskhand.infra.edge"
    label = "edge"
    verbose_name = "Web edge"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from deskhand.infra.edge import throttle

        throttle.connect_signals()
