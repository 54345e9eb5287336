"""Read tools: what a run can see, in the shapes the scripted model parses.

Both merchants are seeded in every test, so each scope check has a neighbour
to leak to if it were wrong.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agent.tools import ToolError
from deskhand.domain.desk.models import Order, Refund, Ticket
from tests.tools.helpers import call, result, start_run


@pytest.fixture
def nw1(seeded):
    """A run on NW-1: Dana Whitfield, whose order is NW-1042."""
    return start_run("NW-1")


@pytest.fixture
def lu2(seeded):
    """A run on LU-2: Saoirse Quinn, charged twice (LU-2310, LU-2311)."""
    return start_run("LU-2")


def test_search_kb_finds_the_refund_policy(nw1):
    out = result(call(nw1, "search_kb", {"query": "refund window for stale beans zzzqqq"}))
    assert out["query"] == "refund window for stale beans zzzqqq"
    assert out["results"][0]["slug"] == "refund-policy"
    assert out["results"][0]["title"] == "Refund policy"
    assert "14 days after delivery" in out["results"][0]["body"]
    assert set(out["results"][0]) == {"slug", "version", "title", "body"}
    assert len(out["results"]) <= 5


def test_search_kb_records_the_version_it_read_so_a_replay_names_what_was_quoted(nw1):
    from deskhand.domain.desk.knowledge import Draft, article_save
    from deskhand.domain.desk.models import KbArticle

    article = KbArticle.objects.get(merchant__slug="northwind", slug="refund-policy")
    article_save(
        merchant=article.merchant,
        draft=Draft(article.title, article.body + "\n\nStale beans: 30 days.", "markdown"),
        by_name="owner@northwind.test",
        article=article,
    )
    out = result(call(nw1, "search_kb", {"query": "refund window stale beans"}))
    first = out["results"][0]
    assert (first["slug"], first["version"]) == ("refund-policy", 2)
    assert "30 days" in first["body"]


def test_search_kb_never_returns_another_merchants_articles(nw1, lu2):
    assert result(call(nw1, "search_kb", {"query": "warranty headband"})) == {
        "query": "warranty headband",
        "results": [],
    }
    lumen = result(call(lu2, "search_kb", {"query": "warranty headband"}))
    assert [r["slug"] for r in lumen["results"]] == ["warranty"]


def test_a_search_with_no_words_is_a_tool_error(nw1):
    with pytest.raises(ToolError, match="at least one word"):
        call(nw1, "search_kb", {"query": "?! -- ..."})


def test_search_syntax_in_a_query_is_just_words(nw1):
    out = result(call(nw1, "search_kb", {"query": "shipping & !late | (tracking):*"}))
    assert out["results"][0]["slug"] == "shipping-times"


def test_get_ticket_shows_the_thread_and_the_customer(nw1):
    out = result(call(nw1, "get_ticket", {"reference": "NW-1"}))
    assert set(out) == {
        "reference",
        "subject",
        "status",
        "priority",
        "tags",
        "assignee",
        "opened",
        "customer",
        "messages",
    }
    assert out["reference"] == "NW-1"
    assert out["subject"] == "Beans arrived stale"
    assert (out["status"], out["priority"], out["tags"], out["assignee"]) == (
        "open",
        "normal",
        [],
        None,
    )
    assert out["opened"] == timezone.now().astimezone(dt.UTC).strftime("%Y-%m-%d")
    assert out["customer"] == {"name": "Dana Whitfield", "email": "d***@e***.com"}
    [message] = out["messages"]
    assert message["kind"] == "customer"
    assert "NW-1042" in message["body"]
    dt.datetime.strptime(message["at"], "%Y-%m-%d %H:%M")


def test_get_ticket_accepts_the_reference_as_people_write_it(nw1):
    assert result(call(nw1, "get_ticket", {"reference": " #nw-1 "}))["reference"] == "NW-1"


def test_a_run_cannot_read_another_ticket(nw1):
    with pytest.raises(ToolError, match="only read or change its own ticket") as info:
        call(nw1, "get_ticket", {"reference": "NW-2"})
    assert "Omar" not in str(info.value)


def test_get_order_reports_what_is_left_to_refund(nw1):
    out = result(call(nw1, "get_order", {"reference": "NW-1042"}))
    assert out["reference"] == "NW-1042"
    assert (out["status"], out["currency"], out["total_cents"]) == ("delivered", "USD", 4800)
    assert (out["refunded_cents"], out["refundable_cents"], out["refunds"]) == (0, 4800, [])
    assert out["days_since_delivery"] == 6
    assert out["days_since_placed"] == 12
    assert out["cancelled_at"] is None
    assert out["customer"] == {"name": "Dana Whitfield", "email": "d***@e***.com"}
    assert out["items"] == [
        {
            "sku": "BEAN-ETH-12",
            "description": "Ethiopia Guji, 12oz whole bean",
            "quantity": 2,
            "unit_price_cents": 1900,
            "line_cents": 3800,
        },
        {
            "sku": "SHIP-STD",
            "description": "Standard shipping",
            "quantity": 1,
            "unit_price_cents": 1000,
            "line_cents": 1000,
        },
    ]
    delivered = Order.objects.get(reference="NW-1042").delivered_at
    assert out["delivered_at"] == delivered.astimezone(dt.UTC).strftime("%Y-%m-%d")


def test_get_order_counts_refunds_already_made(nw1):
    order = Order.objects.get(reference="NW-1042")
    Refund.objects.create(
        merchant=order.merchant, order=order, amount_cents=1000, reason="Postage back"
    )
    out = result(call(nw1, "get_order", {"reference": "NW-1042"}))
    assert (out["refunded_cents"], out["refundable_cents"]) == (1000, 3800)
    assert [(r["amount_cents"], r["reason"]) for r in out["refunds"]] == [(1000, "Postage back")]


def test_an_undelivered_order_has_no_delivery_age(lu2):
    out = result(call(lu2, "get_order", {"reference": "LU-2311"}))
    assert (out["status"], out["delivered_at"], out["days_since_delivery"]) == (
        "placed",
        None,
        None,
    )
    assert out["days_since_placed"] == 1
    assert result(call(lu2, "get_order", {"reference": "LU-2310"}))["days_since_placed"] == 1


def test_a_run_cannot_read_another_customers_order(nw1):
    with pytest.raises(ToolError) as info:
        call(nw1, "get_order", {"reference": "NW-1077"})
    assert str(info.value) == "order NW-1077 does not belong to the customer on this ticket"
    assert "Omar" not in str(info.value) and "3200" not in str(info.value)


def test_read_tools_cannot_reach_another_merchant(nw1, lu2):
    with pytest.raises(ToolError) as info:
        call(nw1, "get_order", {"reference": "LU-2201"})
    assert str(info.value) == "no order 'LU-2201' for this merchant"
    with pytest.raises(ToolError, match="no ticket 'NW-1' for this merchant"):
        call(lu2, "get_ticket", {"reference": "NW-1"})
    with pytest.raises(ToolError, match="not the email of the customer on this ticket"):
        call(lu2, "get_customer", {"email": "dana.whitfield@example.com"})


def test_get_customer_is_limited_to_the_tickets_customer(nw1):
    with pytest.raises(ToolError) as other:
        call(nw1, "get_customer", {"email": "omar.reyes@example.com"})
    with pytest.raises(ToolError) as nobody:
        call(nw1, "get_customer", {"email": "nobody@example.com"})
    # Same sentence either way: the error cannot be used to find out who shops here.
    assert str(other.value).replace("omar.reyes", "X") == str(nobody.value).replace("nobody", "X")


def test_get_customer_shows_orders_with_exact_times(lu2):
    out = result(call(lu2, "get_customer", {"email": "Saoirse.Quinn@example.com"}))
    assert (out["name"], out["email"]) == ("Saoirse Quinn", "s***@e***.com")
    assert [o["reference"] for o in out["orders"]] == ["LU-2311", "LU-2310"]
    assert {o["total_cents"] for o in out["orders"]} == {17900}
    first, second = (dt.datetime.fromisoformat(o["placed_at_iso"]) for o in reversed(out["orders"]))
    assert second - first == dt.timedelta(minutes=1)
    assert out["tickets"] == [{"reference": "LU-2", "subject": "Charged twice", "status": "open"}]


def test_list_refunds_covers_only_this_customer_and_the_window(nw1):
    dana = Order.objects.get(reference="NW-1042")
    ben = Order.objects.get(reference="NW-1101")
    Refund.objects.create(merchant=dana.merchant, order=dana, amount_cents=500, reason="Recent")
    old = Refund.objects.create(merchant=dana.merchant, order=dana, amount_cents=700, reason="Old")
    Refund.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=40))
    Refund.objects.create(merchant=ben.merchant, order=ben, amount_cents=900, reason="Someone else")

    month = result(call(nw1, "list_refunds", {"since_days": 30}))
    assert month["since_days"] == 30
    assert month["total_cents"] == 500
    assert [(r["order_reference"], r["amount_cents"], r["reason"]) for r in month["refunds"]] == [
        ("NW-1042", 500, "Recent")
    ]
    assert result(call(nw1, "list_refunds", {"since_days": 365}))["total_cents"] == 1200


def test_messages_are_listed_oldest_first_with_notes(nw1):
    ticket = Ticket.objects.get(reference="NW-1")
    call(nw1, "add_internal_note", {"reference": "NW-1", "body": "Looking into it."})
    out = result(call(nw1, "get_ticket", {"reference": ticket.reference}))
    assert [m["kind"] for m in out["messages"]] == ["customer", "note"]
    assert out["messages"][1]["body"] == "Looking into it."
