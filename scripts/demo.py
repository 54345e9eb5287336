"""`make demo`: the product on one machine — embedded Postgres, a worker, the web console.

Migrates, seeds the demo merchants (once), starts `manage.py worker`, `manage.py web`
(uvicorn) and the loopback SMTP receiver (`manage.py mail_receiver`, port 2525 or
``DESKHAND_MAIL_PORT``), prints where to go, how to sign in and a one-liner that
mails the demo support address, and on Ctrl-C stops all of it, including the
embedded Postgres when this script started it.

``make demo PROVIDER=double`` (``scripts/demo.py --provider double``) runs the
product on the ``anthropic`` provider without a key or a network: it starts the
strict Messages-API double (``tests/support/messages_api.py``) in this process,
deciding like the keyless policy reader, and points the worker and the web
console at it with ``ANTHROPIC_BASE_URL`` and a dummy ``ANTHROPIC_API_KEY``.
Every model call then goes through the real SDK, the provider's retry layer
and pricing, and the double's token counting and prompt-cache rules.

``make demo PAYMENTS=double`` (``--payments double``) starts the payments double
(``tests/support/payments_api.py``) in this process, gives it a charge for every
seeded order, switches Northwind's refunds to the payments adapter and points the
worker at the double (``DESKHAND_PAYMENTS_URL`` and a test key): an approved refund
is then made at the double under its ledger key, and the worker's reconciliation
compares the two every five minutes (the merchant page shows its findings).

``make demo SHOP=double`` (``--shop double``) starts the Shopify double
(``tests/support/shopify_double.py``) in this process, gives it Northwind's seeded orders
(``mirror_seeded_orders``), connects Northwind to it as its owner would on the "Shopify store"
page (the token checked, the webhook subscriptions created) and sets Northwind's order source
to Shopify; the worker and the web console find the double through
``DESKHAND_SHOPIFY_BASE_URL``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PORT = int(os.environ.get("DESKHAND_PORT", "8000"))
MAIL_PORT = int(os.environ.get("DESKHAND_MAIL_PORT", "2525"))


def mail_one_liner(port: int) -> str:
    """A command a new user can paste: a customer's first email to Northwind's support address."""
    return (
        'python3 -c "import smtplib; from email.message import EmailMessage; m = EmailMessage(); '
        "m['From'] = 'Sam Rivera <sam@example.org>'; m['To'] = 'support@northwind.test'; "
        "m['Subject'] = 'My beans never came'; m['Message-ID'] = '<demo-1@example.org>'; "
        "m.set_content('Hello, my order has not arrived yet.'); "
        f"smtplib.SMTP('127.0.0.1', {port}).send_message(m)\""
    )


def manage(*args: str) -> None:
    subprocess.run([PY, "manage.py", *args], cwd=ROOT, check=True)


def start_double() -> str:
    """The strict double, answering like the policy reader; returns the env line to reuse it."""
    from agent.providers.policy import PolicyProvider
    from tests.support.fake_anthropic import policy_responder
    from tests.support.messages_api import DEFAULT_KEY, MessagesApi

    api = MessagesApi(
        responder=policy_responder(PolicyProvider(input_tokens=0, output_tokens=0, cost_micros=0))
    ).start()
    os.environ["ANTHROPIC_BASE_URL"] = api.url
    os.environ["ANTHROPIC_API_KEY"] = DEFAULT_KEY
    return f"ANTHROPIC_BASE_URL={api.url} ANTHROPIC_API_KEY={DEFAULT_KEY}"


def start_payments_double() -> str:
    """The payments double with the seeded orders' charges; Northwind refunds through it."""
    import django

    django.setup()
    from deskhand.domain.desk.models import Merchant
    from tests.support.payments_api import PaymentsApi, charge_seeded_orders

    api = PaymentsApi().start()
    os.environ.update(api.env())
    charged = charge_seeded_orders(api)
    Merchant.objects.filter(slug="northwind").update(refund_adapter="payments")
    return f"Northwind refunds at the payments double {api.url} ({charged} charges)"


def shop_double_setup(shop: Any, merchant_slug: str = "northwind") -> str:
    """Give a started Shopify double the merchant's seeded orders, connect the merchant to it
    (as its owner, through ``connect_store``) and read its orders from Shopify; the banner line.

    The double's address reaches this process through the settings and the worker and the web
    console through their environment."""
    from django.conf import settings

    from approvals.merchant_settings import settings_change
    from approvals.store_connection import connect_store
    from deskhand.domain.desk.models import Membership, Merchant, Order, Role
    from tests.support.shopify_double import mirror_seeded_orders

    os.environ.update(shop.env())
    settings.DESKHAND_SHOPIFY_BASE_URL = shop.url
    merchant = Merchant.objects.get(slug=merchant_slug)
    owner = Membership.objects.filter(merchant=merchant, role=Role.OWNER).order_by("pk")[0].user
    mirrored = mirror_seeded_orders(shop, merchant_slug)
    # Its orders are at "Shopify" now: the same names as its own rows, which a mirror refuses
    # to merge (docs/shopify.md), so the demo's own rows are retired.
    Order.objects.filter(merchant=merchant, source="local").delete()
    connect_store(
        merchant=merchant,
        shop_domain=shop.shop_domain,
        access_token=shop.access_token,
        webhook_secret=shop.client_secret,
        by=owner,
    )
    settings_change(merchant=merchant, values={"order_source": "shopify"}, by=owner)
    return (
        f"{merchant.name}'s orders at the Shopify double {shop.url} ({shop.shop_domain},"
        f" {mirrored} orders, {len(shop.subscriptions)} webhook subscriptions)"
    )


def start_shop_double() -> str:
    """The Shopify double with Northwind's orders; Northwind connected to it."""
    import django

    django.setup()
    from tests.support.shopify_double import ShopifyDouble

    return shop_double_setup(ShopifyDouble(shop_domain="northwind-demo.myshopify.com").start())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", choices=["default", "double"], default="default")
    parser.add_argument("--payments", choices=["database", "double"], default="database")
    parser.add_argument("--shop", choices=["none", "double"], default="none")
    parsed = parser.parse_args()
    provider = parsed.provider
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    sys.path.insert(0, str(ROOT))
    from deskhand.infra import embedded_pg

    double_env = start_double() if provider == "double" else ""

    embedded = not os.environ.get("DATABASE_URL")
    started_pg = embedded and not embedded_pg.is_running()
    if embedded:
        print(
            f"Using the embedded Postgres under {embedded_pg.pgdata_dir()} (set DATABASE_URL to use your own server)."
        )
    procs: list[subprocess.Popen[bytes]] = []
    # Stopped by a service manager (SIGTERM) or a closed terminal (SIGHUP): the same clean-up.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    terminal = take_the_terminal()
    try:
        manage("migrate", "--noinput", "-v", "0")
        if parsed.shop == "double":
            # The double's orders live in memory: a fresh seed each time (see shop_double_setup).
            os.environ.setdefault("DESKHAND_CONSOLE_URL", f"http://127.0.0.1:{PORT}")
            manage("seed", "--reset")
        else:
            manage("seed")
        payments = start_payments_double() if parsed.payments == "double" else ""
        shop = start_shop_double() if parsed.shop == "double" else ""
        procs.append(
            serve(
                "manage.py",
                "worker",
                "--executor-id",
                os.environ.get("DESKHAND_EXECUTOR_ID", "demo-worker-1"),
                # The worker keeps its connections: each step then skips a connect.
                env={"DESKHAND_CONN_MAX_AGE": os.environ.get("DESKHAND_CONN_MAX_AGE", "60")},
            )
        )
        procs.append(serve("manage.py", "mail_receiver", "--port", str(MAIL_PORT)))
        procs.append(
            # The web process as the README starts it (deskhand/infra/edge/web.py): proxy
            # headers believed only from DESKHAND_TRUSTED_PROXIES.
            serve(
                "manage.py",
                "web",
                "--host",
                "127.0.0.1",
                "--port",
                str(PORT),
                "--log-level",
                "warning",
            )
        )
        time.sleep(2)
        keyless = not os.environ.get("ANTHROPIC_API_KEY")
        model = "scripted provider (no ANTHROPIC_API_KEY set)" if keyless else "Anthropic"
        cli = ".venv/bin/python manage.py run_ticket NW-1 --wait"
        if double_env:
            model = f"Anthropic provider -> the strict Messages-API double at {os.environ['ANTHROPIC_BASE_URL']}"
            cli = f"{double_env} {cli}"
        print(
            "\n"
            f"  Deskhand is running:   http://127.0.0.1:{PORT}/\n"
            "  Sign in as            owner@northwind.test / demo-password-123\n"
            "                        (also agent@…, viewer@northwind.test; owner@lumen.test; admin: auditor@deskhand.test)\n"
            f"  Model                 {model}\n"
            f"  CLI                   {cli}\n"
            + (f"  Payments              {payments}\n" if payments else "")
            + (f"  Shopify               {shop}\n" if shop else "")
            + f"  Mail in               SMTP on 127.0.0.1:{MAIL_PORT} for support@northwind.test and help@lumen.test;\n"
            "                        send one (README: a reply with In-Reply-To joins the same ticket):\n"
            f"    {mail_one_liner(MAIL_PORT)}\n" + "  Stop                  Ctrl-C\n",
            flush=True,
        )
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        print("a process exited; stopping the demo", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping…", flush=True)
        return 0
    finally:
        # A second Ctrl-C must not cut the clean-up short and leave a process behind.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        if started_pg:
            embedded_pg.stop()
            print("embedded Postgres stopped", flush=True)
        give_back(terminal)


def interrupted(*_: object) -> None:
    raise KeyboardInterrupt


def serve(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A long-running child in its own process group.

    Ctrl-C then reaches only this script, which stops the children itself (SIGTERM,
    in order, waiting for each): had the terminal's SIGINT reached them too, one could
    exit before this script noticed the Ctrl-C and the demo would report a crash.
    """
    return subprocess.Popen(
        [PY, *argv], cwd=ROOT, env={**os.environ, **(env or {})}, process_group=0
    )


def take_the_terminal() -> tuple[int, int] | None:
    """Become the terminal's foreground process group; return (tty, previous group).

    A Ctrl-C goes to the terminal's foreground group, which under ``make demo`` is
    make's. GNU make, sent SIGINT, waits for its child and then kills itself with the
    signal (exit 130) whatever the child returned. In a group of its own in the
    foreground, this script alone hears the Ctrl-C, stops the demo, and exits 0 — and
    so does make. Without a terminal (a pipe, a service manager) nothing changes.
    """
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        return None
    try:
        previous = os.tcgetpgrp(tty)
        if os.getpgrp() != os.getpid():
            os.setpgid(0, 0)
        # A background group that sets the foreground group is sent SIGTTOU; ignore it.
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.tcsetpgrp(tty, os.getpgrp())
        finally:
            signal.signal(signal.SIGTTOU, old)
    except OSError:
        os.close(tty)
        return None
    return tty, previous


def give_back(terminal: tuple[int, int] | None) -> None:
    """Hand the terminal's foreground back to the group that had it (make's, or the shell's)."""
    if terminal is None:
        return
    tty, previous = terminal
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(tty, previous)
    except OSError:
        pass  # that group is gone (make was killed): the shell takes the terminal back itself
    finally:
        signal.signal(signal.SIGTTOU, old)
        os.close(tty)


if __name__ == "__main__":
    sys.exit(main())
