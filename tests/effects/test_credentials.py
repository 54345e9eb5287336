"""Credentials come from the environment and go nowhere else: not a row, a log line, or an error.

Runs that use every credential — a refund at the payments double and an email through
the loopback SMTP server with a login, and a refund whose configured key the provider
refuses *and echoes back* — then every table (Django's and DBOS's checkpoints) and every
log record of the process is searched for each secret.
"""

from __future__ import annotations

import logging

import pytest
from django.db import connection

from agent.models import Run, Step
from deskhand.domain.desk.models import Merchant
from tests.durability.helpers import decide, start
from tests.effects.conftest import SMTP_PASSWORD
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.support.payments_api import charge_seeded_orders

pytestmark = pytest.mark.django_db(transaction=True)

PAYMENTS_KEY = "sk_test_LUMENsecret_51Hq9t2eZvKYlo2C"
WRONG_KEY = "sk_test_NORTHWINDwrong_8d7f6e5d4c3b2a19"


def approve_all(ticket: str, email: str, gates: int) -> Run:
    run = start(ticket, email)
    for _ in range(gates):
        wait_parked(str(run.id))
        decide(run, email)
    return wait_terminal(str(run.id))


def rows_containing(secret: str) -> list[str]:
    """Every table, in both schemas, with a row whose text holds ``secret``."""
    found = []
    with connection.cursor() as cur:
        cur.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema IN ('public', 'dbos') AND table_type = 'BASE TABLE'"
        )
        for schema, table in cur.fetchall():
            cur.execute(
                f'SELECT count(*) FROM "{schema}"."{table}" t WHERE t::text LIKE %s',
                [f"%{secret}%"],
            )
            if cur.fetchone()[0]:
                found.append(f"{schema}.{table}")
    return found


def test_no_credential_appears_in_any_row_log_line_approval_or_error(
    dbos_executor, payments, smtp_server, caplog, monkeypatch
):
    caplog.set_level(logging.DEBUG)
    payments.api_key = PAYMENTS_KEY
    monkeypatch.setenv("DESKHAND_PAYMENTS_API_KEY", PAYMENTS_KEY)
    monkeypatch.setenv("DESKHAND_PAYMENTS_API_KEY_NORTHWIND", WRONG_KEY)  # per merchant, wins
    Merchant.objects.update(refund_adapter="payments")
    Merchant.objects.filter(slug="lumen").update(mail_adapter="smtp")
    charge_seeded_orders(payments)

    lumen = approve_all("LU-2", "owner@lumen.test", 2)
    assert lumen.status == "succeeded", lumen.summary
    assert len(payments.refunds) == 1 and len(smtp_server.messages) == 1
    assert smtp_server.logins  # the SMTP password was used

    northwind = approve_all("NW-1", "owner@northwind.test", 1)
    refused = Step.objects.get(run=northwind, kind="tool", tool="issue_refund")
    assert not refused.ok and "[redacted]" in refused.result["text"]
    assert WRONG_KEY in str(payments.requests[-1].headers)  # it was sent, and echoed back

    for secret in (PAYMENTS_KEY, WRONG_KEY, SMTP_PASSWORD):
        assert rows_containing(secret) == [], f"a credential was stored: {secret[:10]}…"
        leaked = [r.getMessage() for r in caplog.records if secret in r.getMessage()]
        leaked += [r.exc_text for r in caplog.records if r.exc_text and secret in r.exc_text]
        assert leaked == [], leaked
        assert secret not in lumen.summary + northwind.summary
