"""``python manage.py import_orders --merchant SLUG FILE.csv``: a back catalogue of pushed
orders, all stored or none (``deskhand.domain.desk.order_import``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.utils import timezone

from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.order_import import COLUMNS, ImportRefused, orders_import


class Command(DeskhandCommand):
    help = (
        "Import the store's orders from a CSV file as pushed orders, in one transaction: a bad "
        f"line stores nothing. Columns: {', '.join(COLUMNS)}."
    )
    not_done = "no order was imported"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--merchant", required=True, help="the merchant's slug")
        parser.add_argument("file", help="the CSV file (UTF-8), one row per order line")

    def handle(self, *args: Any, **opts: Any) -> None:
        merchant = Merchant.objects.filter(slug=opts["merchant"]).first()
        if merchant is None:
            raise CliError(f"There is no merchant {opts['merchant']!r}.", code="not_found")
        path = Path(opts["file"])
        try:
            with path.open(encoding="utf-8-sig", newline="") as f:
                done = orders_import(merchant_id=merchant.pk, lines=f, now=timezone.now())
        except OSError as exc:
            raise CliError(f"Cannot read {path}: {exc.strerror}.", code="invalid") from None
        except UnicodeDecodeError:
            raise CliError(
                f"{path} is not UTF-8 text; nothing was imported.", code="invalid"
            ) from None
        except ImportRefused as exc:
            raise CliError(f"{path}, {exc} Nothing was imported.", code="refused") from None
        self.stdout.write(
            f"Imported {done.created + done.updated + done.unchanged} orders for {merchant.name}: "
            f"{done.created} new, {done.updated} replaced by a newer version, "
            f"{done.unchanged} unchanged."
        )
