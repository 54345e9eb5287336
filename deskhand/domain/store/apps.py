from django.apps import AppConfig


class StoreConfig(AppConfig):
    name = "deskhand.domain.store"
    label = "store"
    verbose_name = "Store platforms"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The desk reads orders through one interface; Shopify's source plugs in from here.
        from deskhand.domain.store import mirror

        mirror.register()
