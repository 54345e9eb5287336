from django.apps import AppConfig


class MailConfig(AppConfig):
    name = "deskhand.domain.mail"
    label = "mail"
    verbose_name = "Inbound mail"
    default_auto_field = "django.db.models.BigAutoField"
