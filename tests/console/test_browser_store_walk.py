"""From nothing to an answer, in the product (issue 38, point 6), in real Chromium.

The walk a new user takes with ``make demo`` running, never touching the seeded merchants:
the operator runs ``manage.py merchant create``; the owner opens the invitation link from
the mail, sets a name and password, turns automatic runs on, invites an agent (who accepts
from the link in their own mail), adds a support address and waits for its routing check to
come back through intake, imports a zip of twenty Markdown articles; a customer writes to
that address as the README's one-liner does (SMTP to the receiver); the run it opens
proposes a reply that quotes the imported article by its title, the owner approves it, and
it goes out from the new address, signed with the new merchant's name.

All of it over real processes: the web server, a worker, the SMTP receiver, and the store's
own mail server — an SMTP server in this test that keeps the staff's mail in mailboxes and,
as the store's transport rule would, routes mail for the support address to Deskhand's
receiver (that is how the routing check comes back). At 1280 px and at 390 px: axe-core on
every page visited, none scrolls sideways, no Content-Security-Policy violation and no
console error.
"""

from __future__ import annotations

import asyncio
import email
import email.message
import email.policy
import io
import json
import os
import re
import shlex
import smtplib
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiosmtpd.controller import Controller

from agent.models import TERMINAL_STATUSES, Run
from approvals.models import Approval
from deskhand.domain.desk.models import (
    KbArticle,
    Membership,
    Merchant,
    MessageDirection,
    OutboundEmail,
    SupportAddress,
    Ticket,
    TicketMessage,
)
from tests.console.a11y import assert_no_serious_violations
from tests.console.test_browser import browser, without_env  # noqa: F401  (the fixture)
from tests.console.test_browser_screens import RECORD
from tests.fixtures.dbos import test_database_url
from tests.mail.conftest import free_port, receiver  # noqa: F401  (the fixture)
from tests.mail.test_readme_mail import readme_command
from tests.support.waiting import PATIENCE_MS, until

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(tempfile.gettempdir()) / "deskhand-screenshots" / "walk"  # never the work tree

STORE, SLUG, DOMAIN = "Harbor Tea", "harbor", "harbor-tea.example"
OWNER, AGENT, SUPPORT = f"rosa@{DOMAIN}", f"kai@{DOMAIN}", f"help@{DOMAIN}"
PASSWORD = "a-long-and-unusual-passphrase-38"
TARGET = "Descaling your kettle"

# Twenty articles of a tea shop; the customer's question is answered by TARGET's.
ARTICLES: dict[str, str] = {
    "Brewing green tea without bitterness": "Water at 75 °C and two minutes keep green tea sweet.",
    TARGET: (
        "Limescale builds up in any kettle used with hard water, as a chalky white crust. To"
        " descale it, fill the kettle halfway with equal parts water and white vinegar (or a"
        " spoon of citric acid), bring it to the boil, leave it for an hour, then rinse it and"
        " boil fresh water twice before making tea. In a hard-water area, descale once a month."
    ),
    "Storing loose-leaf tea": "Keep tea in an airtight tin, away from light, heat and spices.",
    "Shipping times and carriers": "Orders ship within two working days by Royal Mail.",
    "Returns within 30 days": "Unopened tea can be returned within 30 days of delivery.",
    "Gift cards and vouchers": "Gift cards never expire and can pay for part of an order.",
    "Matcha whisking guide": "Sift the matcha, add 70 ml of water and whisk in a W shape.",
    "Pausing a subscription": "Pause or skip a month from your account page before the 20th.",
    "Caffeine in our teas": "Black teas have the most caffeine; rooibos and herbal have none.",
    "Oolong steeping temperatures": "Steep oolong at 90 °C; rinse rolled leaves first.",
    "Allergens and packaging": "Our teas are packed in a facility that also handles nuts.",
    "Customs and duties abroad": "Outside the UK, local duties are paid on delivery.",
    "Changing your delivery address": "Write to us before the order ships to change it.",
    "Caring for a cast-iron teapot": "Rinse with hot water only; never use soap or a dishwasher.",
    "Cold brew tea at home": "Ten grams of tea per litre of cold water, eight hours in the fridge.",
    "Wholesale for cafés": "Cafés get trade prices from five kilograms a month.",
    "Recycling our tins": "Our tins are steel: recycle them with household cans.",
    "Loyalty points explained": "One point per pound spent; a hundred points take five pounds off.",
    "Herbal infusions in pregnancy": "Ask your midwife; we list every herb on each label.",
    "Using the infuser bottle": "Fill the basket halfway; the leaves need room to open.",
}
QUESTION = (
    "Hello, a chalky white crust keeps building up inside my kettle. How do I descale it,"
    " and how often should I do it? Thanks, Sam"
)


# --- the store's mail server -----------------------------------------------------------------


class StoreMailServer:
    """The SMTP server the store's mail goes through (aiosmtpd on a loopback port).

    Staff mail (invitations) lands in ``boxes``; mail for an address in ``routed`` is passed
    to Deskhand's receiver, as the store's transport rule for its support address would.
    """

    def __init__(self, receiver_port: int) -> None:
        self.receiver_port = receiver_port
        self.routed: set[str] = set()
        self.boxes: dict[str, list[email.message.EmailMessage]] = {}
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        for rcpt in envelope.rcpt_tos:
            if rcpt.lower() in self.routed:
                await asyncio.get_running_loop().run_in_executor(
                    None, self._forward, envelope.mail_from, rcpt, envelope.content
                )
            else:
                message = email.message_from_bytes(envelope.content, policy=email.policy.default)
                with self.lock:
                    self.boxes.setdefault(rcpt.lower(), []).append(message)
        return "250 OK"

    def _forward(self, sender: str, rcpt: str, content: bytes) -> None:
        with smtplib.SMTP("127.0.0.1", self.receiver_port, timeout=30) as smtp:
            smtp.sendmail(sender, [rcpt], content)

    def link_for(self, address: str) -> str:
        """The path of the invitation link in the newest mail to ``address``, once it came."""

        def found() -> str | None:
            with self.lock:
                mails = list(self.boxes.get(address, []))
            for message in reversed(mails):
                text = message.get_body(preferencelist=("plain",)).get_content()
                if m := re.search(r"https?://\S+/invitations/\S+/", text):
                    return urlsplit(m.group(0)).path
            return None

        return until(f"an invitation mail to {address}", found, every=0.2, seen=lambda: self.boxes)


@pytest.fixture
def store_mail(receiver) -> Iterator[tuple[StoreMailServer, int]]:  # noqa: F811
    handler = StoreMailServer(receiver)
    port = free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    yield handler, port
    controller.stop()


# --- a page that records what went wrong -----------------------------------------------------


class Walker:
    """One person's browser at one width: every page it arrives at is checked by axe-core and
    for its width, and its CSP violations and console errors are kept for ``done``."""

    def __init__(self, browser, server, width: int) -> None:  # noqa: F811
        self.server, self.width = server, width
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.context.add_init_script(RECORD)
        self.context.set_default_timeout(PATIENCE_MS)  # a loaded machine is slow, not wrong
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.csp: list[str] = []
        self.visited: list[str] = []
        self.page.on(
            "console",
            lambda m: (
                self.errors.append(f"{self.page.url}: {m.text}") if m.type == "error" else None
            ),
        )
        self.page.on("pageerror", lambda exc: self.errors.append(f"{self.page.url}: {exc}"))

    def goto(self, path: str) -> None:
        response = self.page.goto(f"{self.server.url}{path}")
        assert response is not None and response.status == 200, (path, response and response.status)
        self.check(path)

    def check(self, where: str) -> None:
        """axe-core on the page as it is now, nothing wider than the window, CSP kept."""
        self.page.wait_for_load_state("load")
        assert_no_serious_violations(self.page, f"{where} at {self.width} px")
        wide = self.page.evaluate("() => document.documentElement.scrollWidth")
        assert wide <= self.width, f"{where} scrolls sideways at {self.width} px ({wide} px)"
        self.csp += [f"{where}: {v}" for v in self.page.evaluate("window.__csp || []")]
        self.visited.append(where)

    def section(self, link: str) -> None:
        """A part of the merchant's set-up, reached as a person does: Merchant, then its link."""
        self.goto("/merchant/")
        with self.page.expect_navigation():
            self.page.click(f"main a:text-is('{link}')")
        self.check(link)

    def submit(self, button: str, where: str) -> None:
        """Click a form's button and check the page it answers with."""
        with self.page.expect_navigation():
            self.page.click(button)
        self.check(where)

    def done(self) -> None:
        assert self.csp == [], self.csp
        assert self.errors == [], self.errors
        self.context.close()


# --- the walk --------------------------------------------------------------------------------


def _zip(folder: Path) -> Path:
    """Twenty Markdown files with front matter, zipped as a help center's folder would be."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n, (title, body) in enumerate(ARTICLES.items(), 1):
            z.writestr(f"help-center/{n:02d}.md", f"---\ntitle: {title}\nid: hc-{n}\n---\n{body}\n")
    path = folder / "harbor-help-center.zip"
    path.write_bytes(buf.getvalue())
    return path


def _merchant_create(server_url: str) -> str:
    """The operator's command, as the README gives it, in its own process."""
    env = dict(os.environ, DATABASE_URL=test_database_url(), DESKHAND_CONSOLE_URL=server_url)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "merchant", "create", "--name", STORE, "--slug", SLUG,
         "--owner", OWNER, "--timezone", "Europe/London"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _customer_writes(receiver_port: int) -> None:
    """The README's one-liner as a new user edits it: to the new address, with their question."""
    line = readme_command("first").replace("2525", str(receiver_port))
    for header, value in (
        ("m['To']", SUPPORT),
        ("m['Subject']", "White crust inside my kettle"),
        ("m['Message-ID']", "<harbor-1@example.org>"),
    ):
        line, n = re.subn(rf"{re.escape(header)} = '[^']*'", f"{header} = '{value}'", line)
        assert n == 1, f"the README's one-liner sets no {header}: {line}"
    line, n = re.subn(r"m\.set_content\('[^']*'\)", f"m.set_content('{QUESTION}')", line)
    assert n == 1, f"the README's one-liner sets no text: {line}"
    argv = shlex.split(line)
    assert argv[:2] == ["python3", "-c"] and len(argv) == 3, argv
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("width", [1280, 390], ids=["desktop", "phone"])
def test_a_new_store_goes_from_nothing_to_an_answer_from_its_own_knowledge(
    browser,  # noqa: F811
    web_server,
    worker_process,
    receiver,  # noqa: F811
    store_mail,
    tmp_path,
    width,
):
    mail_server, mail_port = store_mail
    with without_env("DJANGO_ALLOW_ASYNC_UNSAFE"):
        worker_process(
            "walk-worker",
            env={
                "DESKHAND_EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
                "DESKHAND_EMAIL_HOST": "127.0.0.1",
                "DESKHAND_EMAIL_PORT": str(mail_port),
            },
        ).start()
    started = time.monotonic()
    seeded = set(Merchant.objects.values_list("slug", flat=True))
    assert SLUG not in seeded

    # The operator makes the store; its owner's invitation goes out through the worker.
    said = _merchant_create(web_server.url)
    assert OWNER in said, said
    owner = Walker(browser, web_server, width)
    owner.goto(mail_server.link_for(OWNER))
    assert f"Join {STORE}" in owner.page.inner_text("h1")
    owner.page.fill("#inv-name", "Rosa Marsh")
    owner.page.fill("#inv-password", PASSWORD)
    owner.page.fill("#inv-password2", PASSWORD)
    owner.submit("button[type=submit]", "home, just joined")
    assert urlsplit(owner.page.url).path == "/"

    # Automatic runs: a customer's new ticket starts one without a person.
    owner.section("Settings")
    owner.page.select_option("select[name=auto_runs]", "new_tickets")
    owner.submit("form.settings button[type=submit]", "settings, saved")
    assert Merchant.objects.get(slug=SLUG).auto_runs == "new_tickets"

    # An agent, invited by email; they accept from their own mail, in their own browser.
    owner.section("Team")
    owner.page.fill("form.invite input[name=email]", AGENT)
    owner.page.select_option("form.invite select[name=role]", "agent")
    owner.submit("form.invite button[type=submit]", "team, agent invited")
    assert f"{AGENT} is invited as agent." in owner.page.inner_text("main")
    agent = Walker(browser, web_server, width)
    agent.goto(mail_server.link_for(AGENT))
    agent.page.fill("#inv-name", "Kai Lowe")
    agent.page.fill("#inv-password", PASSWORD)
    agent.page.fill("#inv-password2", PASSWORD)
    agent.submit("button[type=submit]", "the agent's home, just joined")
    agent.done()
    roles = dict(Membership.objects.filter(merchant__slug=SLUG).values_list("user__email", "role"))
    assert roles == {OWNER: "owner", AGENT: "agent"}

    # The support address: held until its routing check comes back through intake.
    mail_server.routed.add(SUPPORT)
    owner.section("Support addresses")
    owner.page.fill("form.add-address input[name=address]", SUPPORT)
    owner.submit("form.add-address button[type=submit]", "addresses, one added")
    # (Whether it still says "not verified" depends on how fast the check came back.)
    assert SUPPORT in owner.page.inner_text("table.addresses")
    until(
        f"the routing check of {SUPPORT} to come back",
        lambda: SupportAddress.objects.filter(address=SUPPORT, verified_at__isnull=False).exists(),
        every=0.2,
    )
    owner.goto("/merchant/addresses/")
    row = owner.page.inner_text("table.addresses")
    assert "reaches Deskhand" in row and "came back" in row, row

    # Twenty articles, imported from a zip.
    owner.section("Knowledge")
    owner.page.set_input_files("#kb-file", str(_zip(tmp_path)))
    owner.submit("form.kb-import button[type=submit]", "knowledge, imported")
    assert "Imported: 20 new" in owner.page.inner_text("main")
    target = KbArticle.objects.get(merchant__slug=SLUG, title=TARGET)
    with owner.page.expect_navigation():
        owner.page.click(f"table.articles a:text-is('{TARGET}')")
    owner.check("the imported article")
    assert "white vinegar" in owner.page.inner_text("main")

    # A customer writes; the run it opens proposes a reply from the article, for approval.
    _customer_writes(receiver)
    ticket = until(
        "the customer's ticket at the new store",
        lambda: Ticket.objects.filter(
            merchant__slug=SLUG, messages__message_id="<harbor-1@example.org>"
        ).first(),
        every=0.2,
    )

    def reply_waiting() -> Approval | None:
        return Approval.objects.filter(
            run__ticket=ticket, tool="reply_to_customer", status="pending"
        ).first()

    approval = until(
        "the run's reply to wait for approval",
        reply_waiting,
        every=0.2,
        seen=lambda: list(Run.objects.filter(ticket=ticket).values("status", "stop_reason")),
    )
    owner.goto("/approvals/")
    card = owner.page.inner_text(f"#approval-{approval.pk}")
    assert TARGET in card, card
    with owner.page.expect_navigation():
        owner.page.click(f"#approval-{approval.pk} button[value=approve]")
    owner.check("approvals, the reply approved")
    run = until(
        "the run to end",
        lambda: Run.objects.filter(ticket=ticket, status__in=TERMINAL_STATUSES).first(),
        every=0.2,
        seen=lambda: list(Run.objects.filter(ticket=ticket).values("status", "stop_reason")),
    )

    # The answer: the article's title verbatim, from the new address, in the new store's name.
    assert run.status == "succeeded", run.summary
    sent = OutboundEmail.objects.get(ticket=ticket, run=run)
    assert sent.merchant.slug == SLUG
    assert TARGET in sent.body, sent.body
    assert sent.body.rstrip().endswith(STORE), sent.body
    lines = TicketMessage.objects.filter(ticket=ticket, direction=MessageDirection.OUTBOUND)
    assert set(lines.values_list("from_address", flat=True)) == {SUPPORT}
    read = [
        r["slug"]
        for s in run.step_log.filter(kind="tool", tool="search_kb")
        for r in json.loads(s.payload.text)["results"]
    ]
    assert target.slug in read, read
    owner.goto(f"/tickets/{ticket.reference}/")
    thread = owner.page.inner_text("main")
    assert TARGET in thread and STORE in thread, thread
    owner.goto(f"/runs/{run.pk}/")
    owner.page.wait_for_selector(f"#run-status.s-{run.status}", timeout=PATIENCE_MS)
    SHOTS.mkdir(parents=True, exist_ok=True)
    owner.page.screenshot(path=str(SHOTS / f"store-walk-{width}.png"), full_page=True)
    owner.done()
    elapsed = time.monotonic() - started
    print(f"the walk at {width} px took {elapsed:.1f} s over {len(owner.visited)} pages")
