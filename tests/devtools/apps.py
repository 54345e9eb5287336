from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    """Evals, crash sweep and doubles: development code, installed from a checkout only."""

    name = "tests.devtools"
    label = "devtools"
    verbose_name = "Development tools"
