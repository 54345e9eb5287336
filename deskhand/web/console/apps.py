from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The support console: thin views, the live feed (SSE) and the approvals inbox.

    It has no models; it reads through the apps' selectors and writes through their
    services, and it is the top layer (nothing imports it).
    """

    name = "deskhand.web.console"
    label = "console"
    verbose_name = "Support console"
