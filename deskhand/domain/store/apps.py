from django.apps import AppConfig


class StoreConfig(AppConfig):
    name = "deskhand.domain.store"
    label = "store"
    verbose_name = "Store platforms"
    default_auto_field = "django.db.models.BigAutoField"
