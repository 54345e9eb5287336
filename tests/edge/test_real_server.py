"""Every URL x role x method through the real web process, as a deployment serves it.

Django's test client never frames a response: a ``Content-Length`` left stale by
a middleware, which makes uvicorn abort the answer and drop the connection, is
invisible to it. Here the web process is started exactly as the README and
``make demo`` start it (``manage.py web``, through ``tests.console.conftest``'s
``web_process_on_test_database``), once for the module, on the test database;
a strict raw-socket client (``tests/support/wire.py``) keeps connections alive
the way a browser does and reads every byte.

Asserted on every answer: no reset, no dropped keep-alive, no 5xx, a
``Content-Length`` that matches the bytes received (an event stream is the one
answer without one), a sentence in every 4xx body, no traceback in the server's
log; and, for the matrix, the status the table below writes down for each cell.
The fuzz (hypothesis) sends hostile path segments, query parameters, form fields,
headers through the same wire: 80 examples, 300 under CI (``CI`` set).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import os
import re
import secrets
import urllib.parse
import uuid
from collections.abc import Iterator

import pytest
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.models import Run
from tests.console.conftest import (
    AUDITOR,
    LU_OWNER,
    NW_AGENT,
    NW_OWNER,
    NW_VIEWER,
    WebServer,
    make_approval,
    make_run,
    model_step,
    session_cookie,
    tool_step,
    user,
    web_process_on_test_database,
)
from tests.edge.test_malformed_input import (
    CONSOLE_PARAMS,
    FORGED_CURSORS,
    FORM_FIELDS,
    Template,
    hostile,
    url_templates,
)
from tests.fixtures.dbos import empty_dbos_schema
from tests.support.wire import Answer, Wire, WireError

ROLES = ("anonymous", "viewer", "agent", "owner", "lumen", "auditor")
EMAILS = {
    "viewer": NW_VIEWER,
    "agent": NW_AGENT,
    "owner": NW_OWNER,
    "lumen": LU_OWNER,
    "auditor": AUDITOR,
}
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


# --- the web process, once for the module -------------------------------------------------


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker) -> Iterator[WebServer]:
    with django_db_blocker.unblock(), web_process_on_test_database("test-web-edges.log") as web:
        yield web


def server_problems(web: WebServer, since: int) -> list[str]:
    """Aborted answers and server errors the web process logged after byte ``since`` of its log."""
    text = web.log_path.read_bytes()[since:].decode("utf-8", "replace")
    return [
        line
        for line in text.splitlines()
        if "Exception in ASGI application" in line or "Internal Server Error" in line
    ]


# --- the world the requests aim at -------------------------------------------------------


@dataclasses.dataclass
class World:
    open_run: str  # NW-1, awaiting approval, with a model step, a tool step and an approval
    done_run: str  # NW-2, succeeded
    lumen_run: str
    approval: str
    cookies: dict[str, str]  # role -> Cookie header value (session + CSRF cookie)
    csrf: str
    admin_pk: dict[str, str]  # "app/model" -> a pk that exists (or "0")
    user_pk: str
    run_ct: str

    def ids(self) -> dict[str, str]:
        """The names the table's rows use for the world's ids."""
        return {
            "open": self.open_run,
            "done": self.done_run,
            "approval": self.approval,
            "short": self.open_run[:8],
            "run_ct": self.run_ct,
        }

    def headers(self, role: str, method: str) -> dict[str, str]:
        h = {"Cookie": self.cookies[role]}
        if method not in ("GET", "HEAD", "OPTIONS"):
            h["X-CSRFToken"] = self.csrf
        return h


def make_world() -> World:
    open_run = make_run("NW-1", status="awaiting_approval")
    model_step(open_run, 1, tool="lookup_order", args={"order_reference": "NW-1042"})
    tool_step(open_run, 2, "lookup_order", {"order_reference": "NW-1042"}, "NW-1042: $48.00")
    approval = make_approval(open_run)
    done = make_run("NW-2", status="succeeded")
    model_step(done, 1, text="All done.")
    lumen = make_run("LU-1", "lumen", status="succeeded")
    csrf = secrets.token_hex(16)  # 32 characters: a CSRF secret Django accepts as it is
    cookies = {"anonymous": f"csrftoken={csrf}"}
    for role, email in EMAILS.items():
        cookies[role] = f"{session_cookie(email)}; csrftoken={csrf}"
    admin_pk = {}
    for model in admin.site._registry:
        first = model._default_manager.order_by("pk").values_list("pk", flat=True).first()
        admin_pk[f"{model._meta.app_label}/{model._meta.model_name}"] = (
            str(first) if first is not None else "0"
        )
    return World(
        open_run=str(open_run.pk),
        done_run=str(done.pk),
        lumen_run=str(lumen.pk),
        approval=str(approval.pk),
        cookies=cookies,
        csrf=csrf,
        admin_pk=admin_pk,
        user_pk=str(user(AUDITOR).pk),
        run_ct=str(ContentType.objects.get_for_model(Run).pk),
    )


def fill(t: Template, w: World) -> str:
    """A template's holes filled with the world's real ids (see the table for which)."""
    head = t.parts[0]
    if not t.converters:
        return t.fill([])
    if head.startswith("admin/"):
        if head == "admin/r/":
            return t.fill([w.run_ct, w.open_run])
        if head == "admin/" and t.parts[1] == "/":
            return t.fill(["agent"])  # an app's index
        if head == "admin/":
            return t.fill(["no-such-page/"])  # the admin's catch-all
        if head == "admin/auth/user/" and t.parts[1] == "/password/":
            return t.fill([w.user_pk])
        app_model = head.removeprefix("admin/").strip("/")
        return t.fill([w.admin_pk[app_model]])
    if head == "static/":
        return t.fill(["console.css"])
    if head == "merchant/keys/":
        return t.fill(["nosuchkey"])
    if head == "accounts/password/reset/":
        return t.fill(["x", "y"])  # a reset link that is not one
    if head == "invitations/":
        return t.fill(["nosuchtoken"])
    if head in ("inbound/stripe/", "inbound/shopify/"):
        return t.fill(["northwind"])
    if head in ("merchant/team/invitations/", "merchant/team/members/", "merchant/addresses/"):
        return t.fill(["0"])
    if head == "knowledge/":
        return t.fill(["no-such-article", "1"][: len(t.converters)])
    if head.startswith("api/v1/"):
        ids = {
            "api/v1/tickets/": "NW-1",
            "api/v1/orders/": "NW-1001",
            "api/v1/runs/": w.open_run,
            "api/v1/approvals/": w.approval,
            "api/v1/": "nowhere",
        }
        if head == "api/v1/helpdesk/":
            return t.fill(["northwind", "zendesk"])
        return t.fill([ids[head]])
    if head.startswith("tickets/"):
        return t.fill(["NW-1"])
    if head == "approvals/":
        return t.fill([w.approval])
    if head == "runs/" and t.converters == ("str",):
        return t.fill([w.open_run[:8]])  # the short id
    if head == "runs/":
        last = t.parts[-1]
        run = w.done_run if last in ("/cancel", "/undo") else w.open_run
        seqs = {"/undo": "1", "/sent": "1", "/": "1", "/fork": "1"}
        return t.fill([run] + ([seqs[last]] if len(t.converters) == 2 else []))
    raise AssertionError(f"no ids for {t}")


# --- what every answer must be -------------------------------------------------------------


def answer_problems(a: Answer) -> list[str]:
    """What is wrong with an answer whatever the cell (framing was checked by the wire)."""
    label = f"{a.method} {a.target[:160]!r} -> {a.status}"
    problems = []
    if a.status >= 500:
        problems.append(f"{label}: a server error")
    if not a.event_stream and a.declared_length is None:
        problems.append(f"{label}: no Content-Length")
    if a.method != "HEAD" and a.declared_length is not None and a.declared_length != len(a.body):
        problems.append(f"{label}: Content-Length {a.declared_length}, {len(a.body)} bytes")
    if a.method == "HEAD" and a.body:
        problems.append(f"{label}: a body on HEAD")
    if 400 <= a.status < 500 and a.method != "HEAD" and not a.body.strip():
        problems.append(f"{label}: a refusal without a sentence")
    return problems


def send(
    wire: Wire, method: str, target: str, headers: dict[str, str], body: bytes = b""
) -> Answer:
    if method in ("POST", "PUT", "PATCH") and body:
        headers = {**headers, "Content-Type": "application/x-www-form-urlencoded"}
    return wire.request(method, target, headers, body, stream_ok=True)


@contextlib.contextmanager
def wires(port: int) -> Iterator[dict[str, Wire]]:
    made = {role: Wire(port) for role in ROLES}
    try:
        yield made
    finally:
        for w in made.values():
            w.close()


# --- the table -----------------------------------------------------------------------------
#
# One row per URL, with the world's ids in braces: {open} is NW-1's run awaiting approval
# (steps 1-2, approval {approval}), {done} is NW-2's finished run. Each method names the
# statuses for anonymous, viewer, agent, owner (Northwind), Lumen's owner and the staff
# auditor, in that order; a method not written is 405 for everyone (the method check comes
# before the sign-in check, so a guess at a method learns nothing about sign-in). A redirect
# is written with where it goes: L = /accounts/login/ (?next=…), A = /admin/, AL =
# /admin/login/, H = /, P = /policy/. Why the interesting cells are what they are:
#
# * A signed-in person on the sign-in page is sent on (home, or the audit desk for staff).
# * A staff auditor belongs to no merchant: console pages send them to the audit desk, a
#   console write is 403; merchant people are sent to the admin's sign-in.
# * Another merchant's run, ticket or approval is 404, never 403 (Lumen sees nothing of
#   Northwind's); a viewer's write is 403; replay and forks are for owners only.
# * The writes are aimed where they are refused without changing the world: NW-1 already
#   has an open run (409), {done} is finished (cancel 409), its step 1 is not undoable (409),
#   a fork of a run still waiting is refused (400), an empty decision or note is 400. The
#   policy form posted empty by an owner saves "no rules" (302 back to the page).
# * Inbound mail's and Stripe's webhooks (/inbound/…) are signed, not signed in: they answer
#   the same to everyone, 404 "not set up" while no signing key or secret is configured.
# * Event streams: 403 "Sign in first." for anonymous (an EventSource cannot follow a
#   redirect), 404 for a run of another merchant or for the auditor; HEAD is 405 there.

PAGE = "L 200 200 200 200 A"  # a console page every member may read
EVERYONE_200 = "200 200 200 200 200 200"
KEY_NEEDED = "401 401 401 401 401 401"
TABLE: dict[str, dict[str, str]] = {
    "/healthz": {"GET": "200 200 200 200 200 200", "HEAD": "200 200 200 200 200 200"},
    "/static/console.css": {"GET": "200 200 200 200 200 200", "HEAD": "200 200 200 200 200 200"},
    "/accounts/login/": {
        "GET": "200 H H H H A",
        "HEAD": "200 H H H H A",
        "POST": "200 H H H H A",
    },
    "/accounts/logout/": {"POST": "L L L L L L", "OPTIONS": "200 200 200 200 200 200"},
    "/admin/login/": {
        "GET": "200 200 200 200 200 A",
        "HEAD": "200 200 200 200 200 A",
        "POST": "200 200 200 200 200 200",
    },
    # Django's admin sends anyone without access to its index before it looks at the method.
    "/admin/logout/": {"GET": "A A A A A 405", "HEAD": "A A A A A 405", "POST": "A A A A A L"},
    "/admin/": {m: "AL AL AL AL AL 200" for m in ("GET", "HEAD", "POST")},
    "/admin/password_change/": {m: "AL AL AL AL AL 200" for m in ("GET", "HEAD", "POST")},
    "/admin/password_change/done/": {
        "GET": "AL AL AL AL AL 200",
        "HEAD": "AL AL AL AL AL 200",
        "POST": "AL AL AL AL AL 405",
    },
    "/admin/autocomplete/": {
        "GET": "AL AL AL AL AL 403",  # Django's answer to a lookup without its parameters
        "HEAD": "AL AL AL AL AL 403",
        "POST": "AL AL AL AL AL 405",
    },
    "/admin/jsi18n/": {
        "GET": "AL AL AL AL AL 200",
        "HEAD": "AL AL AL AL AL 200",
        "POST": "AL AL AL AL AL 405",
    },
    "/admin/agent/": {m: "AL AL AL AL AL 200" for m in ("GET", "HEAD", "POST")},
    "/admin/no-such-page%2F": {m: "AL AL AL AL AL 404" for m in ("GET", "HEAD", "POST")},
    "/admin/r/{run_ct}/{open}/": {m: "AL AL AL AL AL 404" for m in ("GET", "HEAD", "POST")},
    "/": {"GET": PAGE, "HEAD": PAGE},
    "/attention/": {"GET": PAGE, "HEAD": PAGE},
    "/attention/stream": {"GET": "403 200 200 200 200 403"},
    "/search/": {"GET": PAGE, "HEAD": PAGE},
    "/tickets/": {"GET": PAGE, "HEAD": PAGE},
    "/tickets/NW-1/": {"GET": "L 200 200 200 404 A", "HEAD": "L 200 200 200 404 A"},
    "/tickets/NW-1/run": {"POST": "L 403 409 409 404 403"},
    "/runs/": {"GET": PAGE, "HEAD": PAGE},
    "/runs/stream": {"GET": "403 200 200 200 200 403"},
    "/runs/{open}/": {"GET": "L 200 200 200 404 A", "HEAD": "L 200 200 200 404 A"},
    # The short id every table shows: on to the full id, within the merchant only.
    "/runs/{short}/": {"GET": "L 302 302 302 404 A", "HEAD": "L 302 302 302 404 A"},
    "/runs/{open}/stream": {"GET": "403 200 200 200 404 404"},
    "/runs/{open}/steps": {"GET": "L 200 200 200 404 A", "HEAD": "L 200 200 200 404 A"},
    "/runs/{done}/cancel": {"POST": "L 403 409 409 404 403"},
    "/runs/{open}/steer": {"POST": "L 403 400 400 404 403"},
    "/runs/{done}/steps/1/undo": {"POST": "L 403 409 409 404 403"},
    "/runs/{open}/steps/1/sent": {"GET": "L 200 200 200 404 A", "HEAD": "L 200 200 200 404 A"},
    "/runs/{open}/replay/1/": {"GET": "L 403 403 200 404 A", "HEAD": "L 403 403 200 404 A"},
    "/runs/{open}/replay/1/fork": {
        "GET": "L 403 403 400 404 A",
        "HEAD": "L 403 403 400 404 A",
        "POST": "L 403 403 400 404 403",
    },
    "/approvals/": {"GET": PAGE, "HEAD": PAGE},
    "/approvals/{approval}/decide": {"POST": "L 403 400 400 404 403"},
    "/approvals/bulk": {"POST": "L 403 400 400 400 403"},
    "/policy/": {"GET": PAGE, "HEAD": PAGE, "POST": "L 403 403 P P 403"},
    "/usage/": {"GET": PAGE, "HEAD": PAGE},
    "/merchant/": {"GET": PAGE, "HEAD": PAGE},
    # API keys are an owner's to manage; an empty form is refused (400), a key not of this
    # merchant is 404 to an owner.
    "/merchant/keys/": {
        "GET": "L 403 403 200 200 A",
        "HEAD": "L 403 403 200 200 A",
        "POST": "L 403 403 400 400 403",
    },
    "/merchant/keys/nosuchkey/revoke": {"POST": "L 403 403 404 404 403"},
    # A merchant of one's own (docs/merchants.md): every member reads settings, the team,
    # addresses and knowledge; an owner changes settings, the team and addresses (an empty
    # form is 400), owners and agents write knowledge; nothing of another merchant is found.
    "/merchant/settings/": {"GET": PAGE, "HEAD": PAGE, "POST": "L 403 403 400 400 403"},
    "/merchant/team/": {"GET": PAGE, "HEAD": PAGE, "POST": "L 403 403 400 400 403"},
    "/merchant/team/invitations/0/resend": {"POST": "L 403 403 404 404 403"},
    "/merchant/team/invitations/0/revoke": {"POST": "L 403 403 404 404 403"},
    "/merchant/team/members/0/role": {"POST": "L 403 403 404 404 403"},
    "/merchant/team/members/0/remove": {"POST": "L 403 403 404 404 403"},
    "/merchant/switch": {"POST": "L 404 404 404 404 404"},
    # The Shopify store page: an empty connect form is 400; nothing is connected here, so a
    # disconnect is 409 "nothing to disconnect" to an owner.
    "/merchant/shopify/": {"GET": PAGE, "HEAD": PAGE, "POST": "L 403 403 400 400 403"},
    "/merchant/shopify/disconnect": {"POST": "L 403 403 409 409 403"},
    "/merchant/addresses/": {"GET": PAGE, "HEAD": PAGE, "POST": "L 403 403 400 400 403"},
    "/merchant/addresses/0/check": {"POST": "L 403 403 404 404 403"},
    "/merchant/addresses/0/primary": {"POST": "L 403 403 404 404 403"},
    "/merchant/addresses/0/remove": {"POST": "L 403 403 404 404 403"},
    "/knowledge/": {"GET": PAGE, "HEAD": PAGE, "POST": "L 403 400 400 400 403"},
    "/knowledge/no-such-article/": {
        "GET": "L 404 404 404 404 A",
        "HEAD": "L 404 404 404 404 A",
        "POST": "L 404 404 404 404 403",
    },
    "/knowledge/no-such-article/v1/": {
        "GET": "L 404 404 404 404 A",
        "HEAD": "L 404 404 404 404 A",
    },
    # An invitation's link is public; one that is not valid is 404 with its reason.
    "/invitations/nosuchtoken/": {m: "404 404 404 404 404 404" for m in ("GET", "HEAD", "POST")},
    # Passwords: changing one's own needs a sign-in (an empty form is shown again, 200);
    # a reset is asked for by anyone and answers the same whether the address exists.
    "/accounts/password/": {m: "L 200 200 200 200 200" for m in ("GET", "HEAD", "POST")},
    "/accounts/password/done/": {"GET": "L 200 200 200 200 200", "HEAD": "L 200 200 200 200 200"},
    "/accounts/password/reset/": {m: EVERYONE_200 for m in ("GET", "HEAD", "POST")},
    "/accounts/password/reset/sent/": {"GET": EVERYONE_200, "HEAD": EVERYONE_200},
    "/accounts/password/reset/x/y/": {m: EVERYONE_200 for m in ("GET", "HEAD", "POST")},
    "/accounts/password/reset/done/": {"GET": EVERYONE_200, "HEAD": EVERYONE_200},
    # Inbound mail's webhook takes signed posts only, from anyone; with no signing key
    # configured (as here) it says it is not set up.
    "/inbound/mailgun/": {"POST": "404 404 404 404 404 404"},
    "/inbound/mailgun/mime": {"POST": "404 404 404 404 404 404"},
    # Stripe's webhook per merchant: signed posts from anyone; no endpoint secret set here.
    "/inbound/stripe/northwind/": {"POST": "404 404 404 404 404 404"},
    # Shopify's webhooks for a merchant with no store connected: 404 to everyone.
    "/inbound/shopify/northwind/": {"POST": "404 404 404 404 404 404"},
    # The JSON API takes a bearer key, never a session: each operation is 401 for every role
    # here (tests/api/ drives it with keys); its OpenAPI document and docs page are public;
    # a path it does not have is a 404 problem whatever the method.
    "/api/v1/openapi.json": {"GET": EVERYONE_200, "HEAD": EVERYONE_200},
    "/api/v1/docs": {"GET": EVERYONE_200, "HEAD": EVERYONE_200},
    "/api/v1/tickets": {"GET": KEY_NEEDED, "POST": KEY_NEEDED},
    "/api/v1/tickets/NW-1": {"GET": KEY_NEEDED},
    "/api/v1/tickets/NW-1/messages": {"POST": KEY_NEEDED},
    "/api/v1/runs": {"GET": KEY_NEEDED, "POST": KEY_NEEDED},
    "/api/v1/runs/{open}": {"GET": KEY_NEEDED},
    "/api/v1/runs/{open}/cancel": {"POST": KEY_NEEDED},
    "/api/v1/runs/{open}/steer": {"POST": KEY_NEEDED},
    "/api/v1/approvals": {"GET": KEY_NEEDED},
    "/api/v1/approvals/{approval}": {"GET": KEY_NEEDED},
    "/api/v1/approvals/{approval}/decide": {"POST": KEY_NEEDED},
    "/api/v1/usage": {"GET": KEY_NEEDED},
    "/api/v1/orders/NW-1001": {"PUT": KEY_NEEDED},
    # A help desk's signed webhook: no source is connected here, so 404 to everyone.
    "/api/v1/helpdesk/northwind/zendesk": {"POST": "404 404 404 404 404 404"},
    "/api/v1/": {m: "404 404 404 404 404 404" for m in METHODS},
    "/api/v1": {m: "404 404 404 404 404 404" for m in METHODS},  # a problem, not a redirect
    "/api/v1/nowhere": {m: "404 404 404 404 404 404" for m in METHODS},
}
REDIRECTS = {
    "L": "/accounts/login/",
    "A": "/admin/",
    "AL": "/admin/login/",
    "H": "/",
    "P": "/policy/",
}

# The admin's per-model pages (22 models x 6 pages) are one rule, written as code: every
# role but the auditor is sent to the admin's sign-in; the auditor reads lists, histories
# and change pages (view-only: POST there is 403), never adds or deletes (403), and an
# object's bare URL redirects to its change page. Users and groups are not the audit
# desk's to read (no view permission): 403. Only GET, HEAD and POST are answered.
ADMIN_PAGE = re.compile(
    r"^/admin/(\w+)/(\w+)/(?:([^/]+)/)?(add/|history/|delete/|change/|password/)?$"
)


def admin_expected(path: str, method: str, role: str, world: World) -> str:
    found = ADMIN_PAGE.match(path)
    assert found, path
    app, model, pk, page = found.groups()
    if pk == "add" and page is None:
        pk, page = None, "add/"
    if method not in ("GET", "HEAD", "POST"):
        return "405"
    if role != "auditor":
        return "AL"
    if pk is None and page is None:  # the changelist
        return "403" if app == "auth" else "200"
    if page in ("add/", "delete/"):
        return "403"
    if page is None:
        return "302"  # an object's bare URL: on to its change page
    if app == "auth" and page in ("change/", "password/"):
        return "403"  # asked before the object is looked up
    if world.admin_pk.get(f"{app}/{model}", "0") == "0":
        return "302"  # no such object: back to the admin index, with a message
    if app == "auth" or (page == "change/" and method == "POST"):
        return "403"
    return "200"


def expected(path: str, key: str | None, method: str, role: str, world: World) -> str:
    if key is None:
        return admin_expected(path, method, role, world)
    row = TABLE[key]
    if method not in row:
        return "405"
    return row[method].split()[ROLES.index(role)]


def matches(answer: Answer, want: str) -> bool:
    if want in REDIRECTS:
        location = answer.header("location").split("?")[0]
        return answer.status == 302 and location == REDIRECTS[want]
    if want == "302":
        return answer.status == 302
    return str(answer.status) == want


# --- the matrix ------------------------------------------------------------------------------


FULL_MATRIX = os.environ.get("DESKHAND_FULL_MATRIX") == "1"


def matrix_cells(world: World) -> list[tuple[str, str | None, str, str]]:
    """(path, table key or None for an admin model page, method, role): the cells driven.

    ``DESKHAND_FULL_MATRIX=1``: every cell, 170 URLs x 6 roles x 7 methods (about 7,000
    requests, several minutes here). By default, what the suite can afford (about 900):

    * every URL outside the admin's per-model pages, with every method it takes, for every
      role (there the role decides the answer); with each method it does not take (a 405
      the method check gives before anything reads the role) for anonymous and one
      signed-in role, in turn;
    * each of the admin's per-model pages (the same AuditAdmin code for 22 models) with GET
      by the auditor — what each renders differs — and one more (role, method) cell, in
      turn, so every pair is driven on several models.
    """
    keys = {key.format(**world.ids()): key for key in TABLE}
    cells: list[tuple[str, str | None, str, str]] = []
    pairs = [(m, r) for m in METHODS for r in ROLES if (m, r) != ("GET", "auditor")]
    turn = 0
    seen = set()
    for template in url_templates():
        path = fill(template, world)
        if path in seen:
            continue
        seen.add(path)
        key = keys.get(path)
        if key is None:
            assert ADMIN_PAGE.match(path), f"{path} is in no row of the table: add it"
        for method in METHODS:
            takes = key is not None and method in TABLE[key]
            for role in ROLES:
                if FULL_MATRIX or takes:
                    cells.append((path, key, method, role))
        if FULL_MATRIX:
            continue
        if key is None:
            method, role = pairs[turn % len(pairs)]
            cells += [(path, None, "GET", "auditor"), (path, None, method, role)]
        else:
            for method in METHODS:
                if method not in TABLE[key]:
                    cells.append((path, key, method, ROLES[turn % len(ROLES)]))
                    turn += 1
        turn += 1
    assert set(keys) <= seen, f"rows for URLs that no longer exist: {set(keys) - seen}"
    return cells


def test_every_url_role_and_method_answers_as_the_table_says_with_its_exact_length(server, tseeded):
    world = make_world()
    log_from = server.log_path.stat().st_size
    cells = matrix_cells(world)
    wrong: list[str] = []
    with wires(server.port) as by_role:
        for path, key, method, role in cells:
            headers = world.headers(role, method)
            wire = by_role[role]
            if "logout" in path and role != "anonymous":
                # A sign-out ends its session: it gets a session of its own, on its own line.
                wire = Wire(server.port)
                headers["Cookie"] = f"{session_cookie(EMAILS[role])}; csrftoken={world.csrf}"
            try:
                answer = send(wire, method, path, headers)
            except WireError as exc:
                wrong.append(f"{role}: {exc}")
                continue
            finally:
                if wire is not by_role[role]:
                    wire.close()
            wrong += [f"{role}: {p}" for p in answer_problems(answer)]
            want = expected(path, key, method, role, world)
            if not matches(answer, want):
                got = f"{answer.status} {answer.header('location')}".strip()
                wrong.append(f"{role}: {method} {path}: expected {want}, got {got}")
        for wire in by_role.values():
            try:
                wire.finish()
            except WireError as exc:
                wrong.append(str(exc))
    assert len(cells) > (7000 if FULL_MATRIX else 800), len(cells)
    assert not wrong, f"{len(wrong)} of {len(cells)} cells wrong:\n" + "\n".join(wrong[:60])
    assert not server_problems(server, log_from), server_problems(server, log_from)[:20]


# --- the fuzz ------------------------------------------------------------------------------

settings.register_profile(
    "wire-ci",
    max_examples=300,
    deadline=None,
    database=None,  # nothing written under the work tree
    derandomize=True,  # CI sends the same requests every run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile("wire-dev", settings.get_profile("wire-ci"), max_examples=80)
WIRE = settings.get_profile("wire-ci" if os.environ.get("CI") else "wire-dev")


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def cursors() -> st.SearchStrategy[str]:
    """Run-list cursors as this console writes them, with any time and any UTC offset that
    Python accepts (Postgres refuses beyond ±15:59), and torn or edited ones."""
    offsets = st.integers(-24 * 3600 + 1, 24 * 3600 - 1).map(
        lambda s: dt.timezone(dt.timedelta(seconds=s))
    )
    stamps = st.builds(
        lambda when, tz: when.replace(tzinfo=tz).isoformat(),
        st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
        offsets,
    )
    ids = st.uuids().map(str) | st.text(max_size=40)
    return st.one_of(
        st.builds(lambda t, i: _b64(f"{t}|{i}"), stamps, ids),
        st.sampled_from(FORGED_CURSORS),
        st.binary(max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    )


def raw_bytes() -> st.SearchStrategy[str]:
    """Any bytes, percent-encoded (invalid UTF-8, NUL, CR/LF included)."""
    return st.binary(max_size=40).map(lambda b: urllib.parse.quote_from_bytes(b, safe=""))


def values() -> st.SearchStrategy[str]:
    return st.one_of(
        hostile(),
        cursors(),
        st.integers(-(2**70), 2**70).map(str),
        st.dates().map(str),
        st.datetimes().map(lambda d: d.isoformat()),
        # lengths past every field's limit
        st.builds(lambda c, n: c * n, st.characters(), st.integers(1001, 5000)),
    )


POLICY_FIELDS = [
    f"rule-{tool}-{part}"
    for tool in ("issue_refund", "cancel_order", "send_customer_email", "no_such_tool")
    for part in ("on", "max_amount_cents", "max_per_day")
]


def test_fuzzed_paths_queries_forms_and_headers_never_break_the_wire_or_answer_5xx(server, tseeded):
    world = make_world()
    log_from = server.log_path.stat().st_size
    templates = [t for t in url_templates() if "logout" not in t.parts[0]]
    real = [world.open_run, world.done_run, world.approval, world.lumen_run, "NW-1", "LU-1"]
    real += ["1", "2", world.user_pk]
    segment = st.one_of(st.sampled_from(real), values(), raw_bytes())

    def target(t: Template, holes: list[str], query: list[tuple[str, str]], raw: bool) -> str:
        path = (
            t.fill(holes)
            if not raw
            else "/"
            + "".join(part + hole for part, hole in zip(t.parts, [*holes, ""], strict=True))
        )
        if query:
            path += "?" + "&".join(
                f"{urllib.parse.quote(k, safe='')}={v if raw else urllib.parse.quote(v, safe='')}"
                for k, v in query
            )
        return path

    request = st.fixed_dictionaries(
        {
            "template": st.sampled_from(templates),
            "holes": st.lists(segment, min_size=4, max_size=4),
            "raw": st.booleans(),  # the path and query as raw percent-escapes of any bytes
            "query": st.lists(
                st.tuples(st.sampled_from(CONSOLE_PARAMS) | st.text(max_size=8), values()),
                max_size=3,
            ),
            "method": st.sampled_from(METHODS),
            "role": st.sampled_from(ROLES),
            "form": st.none()
            | st.dictionaries(st.sampled_from(FORM_FIELDS + POLICY_FIELDS), values(), max_size=4)
            | st.binary(max_size=300),
            "htmx": st.booleans(),
            "last_event_id": st.none() | values(),
            "forwarded_for": st.none() | values(),
            "csrf": st.sampled_from(["ok", "ok", "missing", "garbage"]),
        }
    )
    sent: list[str] = []
    wrong: list[str] = []

    with wires(server.port) as by_role:

        @WIRE
        @given(request)
        def property(r: dict) -> None:
            t: Template = r["template"]
            holes = r["holes"][: len(t.converters)]
            if r["raw"]:
                holes = [urllib.parse.quote(h, safe="%") for h in holes]
                query = [(k, urllib.parse.quote(v, safe="%=&")) for k, v in r["query"]]
            else:
                query = r["query"]
            path = target(t, holes, query, r["raw"])
            method, role = r["method"], r["role"]
            headers = world.headers(role, method)
            if r["csrf"] == "missing":
                headers.pop("X-CSRFToken", None)
            elif r["csrf"] == "garbage":
                headers["X-CSRFToken"] = "x" * 31
            if r["htmx"]:
                headers["HX-Request"] = "true"
            for name, value in (
                ("Last-Event-ID", r["last_event_id"]),
                ("X-Forwarded-For", r["forwarded_for"]),
            ):
                if value is not None:  # header values travel as latin-1 on the wire
                    headers[name] = urllib.parse.quote(value, safe=" ,.:;/-_")[:2000]
            body = b""
            if method in ("POST", "PUT", "PATCH") and r["form"] is not None:
                form = r["form"]
                body = form if isinstance(form, bytes) else urllib.parse.urlencode(form).encode()
            sent.append(f"{role} {method} {path[:120]}")
            try:
                answer = send(by_role[role], method, path, headers, body)
            except WireError as exc:
                wrong.append(f"{role}: {exc}")
                return
            wrong.extend(f"{role}: {p}" for p in answer_problems(answer))

        property()
    # A fuzzed POST may have enqueued a run (no worker takes it): DBOS's rows go too.
    empty_dbos_schema()
    assert len(sent) >= WIRE.max_examples, len(sent)  # every example was sent
    assert not wrong, f"{len(wrong)} of {len(sent)} requests wrong:\n" + "\n".join(wrong[:40])
    assert not server_problems(server, log_from), server_problems(server, log_from)[:20]


def test_a_cursor_with_an_offset_postgres_refuses_is_a_400_with_a_sentence(server, tseeded):
    """Python reads ``+20:00``; Postgres allows at most ±15:59 (this was a 500)."""
    world = make_world()
    with wires(server.port) as by_role:
        for stamp, expected_status in [
            ("2026-01-01T00:00:00+20:00", 200),  # a real time, written oddly: read in UTC
            ("2026-01-01T00:00:00-23:59:59", 200),
            ("0001-01-01T00:00:00+14:00", 400),  # before year 1 in UTC: names no run
            ("9999-12-31T23:59:59-14:00", 400),
        ]:
            cursor = _b64(f"{stamp}|{uuid.uuid4()}")
            answer = send(
                by_role["owner"], "GET", f"/runs/?cursor={cursor}", world.headers("owner", "GET")
            )
            assert answer.status == expected_status, (stamp, answer.status, answer.text[-300:])
            assert not answer_problems(answer), answer_problems(answer)
            if expected_status == 400:
                assert "That page link is not valid" in answer.text
