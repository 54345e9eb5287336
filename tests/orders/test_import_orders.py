"""``manage.py import_orders``: a back catalogue stored whole, or not at all.

Through the command's real argv path (exit code, the sentence on stderr); a bad line
anywhere in the file stores no order, not even those above it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from deskhand.domain.desk.models import Order, OrderItem, OrderSourceKind

pytestmark = pytest.mark.django_db(transaction=True)  # the command closes its connections
HEADER = (
    "reference,version,customer_email,customer_name,status,currency,total_cents,placed_at,"
    "delivered_at,payment_reference,sku,description,quantity,unit_price_cents\n"
)
GOOD = (
    "SO-100,3,rosa@example.org,Rosa Diaz,delivered,USD,4500,2026-10-01T09:00:00Z,"
    "2026-10-04T12:00:00Z,ch_1,BEANS,House blend 1 kg,1,3000\n"
    "SO-100,3,rosa@example.org,Rosa Diaz,delivered,USD,4500,2026-10-01T09:00:00Z,"
    "2026-10-04T12:00:00Z,ch_1,MUG,Stoneware mug,1,1500\n"
    "SO-101,1,sam@example.org,,placed,JPY,3300,2026-11-02T10:00:00+09:00,,,,,,\n"
)


def import_orders(tmp_path: Path, text: str, merchant: str = "northwind") -> tuple[int, str, str]:
    """``manage.py import_orders --merchant M FILE``: (exit, stdout, stderr)."""
    path = tmp_path / "orders.csv"
    path.write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    command = load_command_class(get_commands()["import_orders"], "import_orders")
    command.stdout._out = out  # type: ignore[attr-defined]
    command.stderr._out = err  # type: ignore[attr-defined]
    code = 0
    try:
        command.run_from_argv(["manage.py", "import_orders", "--merchant", merchant, str(path)])
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_a_good_file_stores_every_order_with_its_lines_as_pushed(tseeded, tmp_path):
    code, out, err = import_orders(tmp_path, HEADER + GOOD)
    assert code == 0, err
    assert "Imported 2 orders for Northwind Coffee: 2 new" in out
    so100 = Order.objects.get(merchant__slug="northwind", reference="SO-100")
    assert (so100.source, so100.version, so100.total_cents) == (OrderSourceKind.PUSHED, 3, 4500)
    assert sorted(so100.items.values_list("sku", "unit_price_cents")) == [
        ("BEANS", 3000),
        ("MUG", 1500),
    ]
    so101 = Order.objects.get(reference="SO-101")
    assert (so101.currency, so101.delivered_at, so101.items.count()) == ("JPY", None, 0)
    code, out, _ = import_orders(tmp_path, HEADER + GOOD)
    assert code == 0 and "2 unchanged" in out


@pytest.mark.parametrize(
    "bad, line, words",
    [
        (
            "SO-102,1,x@example.org,,placed,USD,19.99,2026-11-02T10:00:00Z,,,,,,\n",
            5,
            "whole number",
        ),
        ("SO-102,1,x@example.org,,placed,USD,100,2026-11-02 10:00,,,,,,\n", 5, "time zone"),
        ("SO-102,1,x@example.org,,lost,USD,100,2026-11-02T10:00:00Z,,,,,,\n", 5, "status"),
        ("SO-102,1,x@example.org,,placed,USD,100\n", 5, "columns"),
        (
            "SO-100,3,rosa@example.org,Rosa Diaz,delivered,USD,9999,2026-10-01T09:00:00Z,"
            "2026-10-04T12:00:00Z,ch_1,CUP,Cup,1,1\n",
            5,
            "total_cents differs from line 2",
        ),
    ],
)
def test_a_bad_line_is_named_and_nothing_is_stored(tseeded, tmp_path, bad, line, words):
    before = (Order.objects.count(), OrderItem.objects.count())
    code, out, err = import_orders(tmp_path, HEADER + GOOD + bad)
    assert code != 0 and out == ""
    assert f"line {line}:" in err and words in err, err
    assert "Nothing was imported" in err and "Traceback" not in err
    assert (Order.objects.count(), OrderItem.objects.count()) == before


def test_an_older_version_than_the_stored_one_refuses_the_whole_file(tseeded, tmp_path):
    assert import_orders(tmp_path, HEADER + GOOD)[0] == 0
    older = GOOD.replace("SO-100,3,", "SO-100,2,").replace("SO-101,1,", "SO-101,2,")
    code, _, err = import_orders(tmp_path, HEADER + older)
    assert code != 0 and "line 2:" in err and "older than the stored version 3" in err
    assert Order.objects.get(reference="SO-101").version == 1  # its newer line was not kept


def test_a_wrong_header_or_an_unknown_merchant_is_one_sentence(tseeded, tmp_path):
    code, _, err = import_orders(tmp_path, "reference,total\nSO-1,100\n")
    assert code != 0 and "line 1: the header lacks" in err
    code, _, err = import_orders(tmp_path, HEADER + GOOD, merchant="nobody")
    assert code != 0 and "no merchant 'nobody'" in err
    assert not Order.objects.filter(reference__startswith="SO-").exists()
