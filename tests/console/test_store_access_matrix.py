"""Every settings, team, address and knowledge URL, for each who asks, with and without CSRF.

Who asks: Northwind's owner, agent and viewer, Lumen's owner (another merchant) and nobody
signed in. For each URL of the merchant's own set-up (taken from the URL conf: a new one
under ``merchant/``, ``knowledge/`` or ``invitations/`` that is not in ``TABLE`` fails the
first test), ``TABLE`` says the answer each of them gets to a GET and to a POST carrying a
valid CSRF token; a POST without one is refused (403) for everyone. Each cell also checks:
never a 5xx, and nothing written by a cell that may not write. What a cell may change is
named by the merchant whose rows it changes (``nw``, ``lu``) and ``people`` (accounts);
everything else must read the same before and after, audit events and outbox included.

The rules the table spells out (the views' docstrings): every member reads a merchant's
pages, only an owner changes settings, the Shopify store, team, addresses and API keys (which only an owner
reads); owners and agents write knowledge; a viewer's or agent's refused post is a 403, not
a hidden button. Lumen's owner reaching a Northwind object gets a 404 (the isolation rule of
tests/console/test_isolation.py); a collection page answers with Lumen's own rows, and a
post to it changes Lumen only. Signed out: the sign-in page, except the invitation link,
whose token is the credential. A URL that takes one method answers the other with 405.

One world for the whole module: ``seed`` and the objects the URLs name are made once inside
a transaction that is rolled back when the module ends; each URL is one test (a failure
lists every wrong cell of it), each cell a savepoint of its own, rolled back after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, transaction
from django.middleware.csrf import CSRF_ALLOWED_CHARS
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from django.utils.crypto import get_random_string

from approvals.models import AuditEvent
from approvals.notification_models import Notification
from approvals.store_connection import connect_store
from approvals.team import invitation_issue
from deskhand.domain.apikeys.models import ApiKey
from deskhand.domain.apikeys.services import key_create
from deskhand.domain.desk.models import (
    AddressCheck,
    Invitation,
    KbArticle,
    KbArticleVersion,
    Membership,
    Merchant,
    Role,
    SupportAddress,
)
from deskhand.domain.store.models import ShopifyConnection
from deskhand.web.console.decorators import SESSION_MERCHANT
from deskhand.web.console.forms import MerchantSettingsForm
from tests.console.conftest import LU_OWNER, NW_AGENT, NW_OWNER, NW_VIEWER, user
from tests.support.shopify_double import ShopifyDouble

# The URLs of a merchant's own set-up: every route under these is a row of TABLE.
PREFIXES = ("merchant/", "knowledge/", "invitations/")
ACTORS = ("owner", "agent", "viewer", "other", "anon")
EMAILS = {"owner": NW_OWNER, "agent": NW_AGENT, "viewer": NW_VIEWER, "other": LU_OWNER}
LOGIN = "login"  # a 302 to the sign-in page
PASSWORD = "a-long-and-unusual-passphrase-38"


@dataclasses.dataclass(frozen=True)
class World:
    """What the URLs name: Northwind's objects (Lumen's owner must not reach them)."""

    northwind: int
    lumen: int
    address: int  # verified, not primary: check, primary and remove act on it
    invitation: int  # waiting: resend and revoke act on it
    token: str  # its link's token
    member: int  # an extra agent: role and remove act on them
    key_prefix: str
    article: str  # a published article's slug
    settings: dict[str, Any]  # Northwind's settings form, one value changed
    shop: dict[str, str]  # the connect form for the Shopify double Northwind is connected to


@dataclasses.dataclass(frozen=True)
class Row:
    """One URL: its path, the answers to a GET and to a POST with CSRF, what a POST sends.

    ``get``/``post``: per actor, a status (``LOGIN`` for the redirect to sign in) and the
    parts of the database that answer may change; ``None``: the method is not allowed (405).
    """

    path: Callable[[World], str]
    get: dict[str, tuple[int | str, frozenset[str]]] | None
    post: dict[str, tuple[int | str, frozenset[str]]] | None
    data: Callable[[World], dict[str, Any]] = lambda w: {}


NOTHING: frozenset[str] = frozenset()
NW, LU = frozenset({"nw"}), frozenset({"lu"})


def answers(
    owner: int | str,
    agent: int | str,
    viewer: int | str,
    other: int | str,
    anon: int | str = LOGIN,
    *,
    writes: dict[str, frozenset[str]] | None = None,
) -> dict[str, tuple[int | str, frozenset[str]]]:
    said = dict(zip(ACTORS, (owner, agent, viewer, other, anon), strict=True))
    return {actor: (status, (writes or {}).get(actor, NOTHING)) for actor, status in said.items()}


EVERY_MEMBER_READS = answers(200, 200, 200, 200)
NORTHWIND_ONLY_READS = answers(200, 200, 200, 404)  # a Northwind object: Lumen's owner 404s
OWNER_POSTS_HERE = answers(200, 403, 403, 404, writes={"owner": NW})


def _address(w: World, action: str) -> str:
    return f"/merchant/addresses/{w.address}/{action}"


TABLE: dict[str, Row] = {
    "merchant/": Row(lambda w: "/merchant/", EVERY_MEMBER_READS, None),
    "merchant/keys/": Row(
        lambda w: "/merchant/keys/",
        answers(200, 403, 403, 200),
        answers(201, 403, 403, 201, writes={"owner": NW, "other": LU}),
        lambda w: {"name": "matrix", "scope": ["read"]},
    ),
    "merchant/keys/<str:prefix>/revoke": Row(
        lambda w: f"/merchant/keys/{w.key_prefix}/revoke", None, OWNER_POSTS_HERE
    ),
    "merchant/settings/": Row(
        lambda w: "/merchant/settings/",
        EVERY_MEMBER_READS,
        answers(200, 403, 403, 200, writes={"owner": NW, "other": LU}),
        lambda w: w.settings,
    ),
    # Northwind is connected to the Shopify double: its owner reconnects (a new token) and
    # disconnects; Lumen's owner connects Lumen, and has nothing to disconnect.
    "merchant/shopify/": Row(
        lambda w: "/merchant/shopify/",
        EVERY_MEMBER_READS,
        answers(200, 403, 403, 200, writes={"owner": NW, "other": LU}),
        lambda w: w.shop,
    ),
    "merchant/shopify/disconnect": Row(
        lambda w: "/merchant/shopify/disconnect",
        None,
        answers(200, 403, 403, 409, writes={"owner": NW}),
    ),
    "merchant/addresses/": Row(
        lambda w: "/merchant/addresses/",
        EVERY_MEMBER_READS,
        answers(201, 403, 403, 201, writes={"owner": NW, "other": LU}),
        lambda w: {"address": "matrix@harbor-matrix.example"},
    ),
    **{
        f"merchant/addresses/<int:pk>/{action}": Row(
            lambda w, action=action: _address(w, action), None, OWNER_POSTS_HERE
        )
        for action in ("check", "primary", "remove")
    },
    "merchant/team/": Row(
        lambda w: "/merchant/team/",
        EVERY_MEMBER_READS,
        answers(201, 403, 403, 201, writes={"owner": NW, "other": LU}),
        lambda w: {"email": "matrix@example.org", "role": "agent"},
    ),
    **{
        f"merchant/team/invitations/<int:pk>/{action}": Row(
            lambda w, action=action: f"/merchant/team/invitations/{w.invitation}/{action}",
            None,
            OWNER_POSTS_HERE,
        )
        for action in ("resend", "revoke")
    },
    "merchant/team/members/<int:pk>/role": Row(
        lambda w: f"/merchant/team/members/{w.member}/role",
        None,
        OWNER_POSTS_HERE,
        lambda w: {"role": "viewer"},
    ),
    "merchant/team/members/<int:pk>/remove": Row(
        lambda w: f"/merchant/team/members/{w.member}/remove", None, OWNER_POSTS_HERE
    ),
    # Choosing a merchant one belongs to changes the session, not a row.
    "merchant/switch": Row(
        lambda w: "/merchant/switch",
        None,
        answers(302, 302, 302, 404),
        lambda w: {"merchant": w.northwind},
    ),
    "knowledge/": Row(
        lambda w: "/knowledge/",
        EVERY_MEMBER_READS,
        answers(302, 302, 403, 302, writes={"owner": NW, "agent": NW, "other": LU}),
        lambda w: {"title": "Matrix article", "text": "Steep for four minutes.", "published": "on"},
    ),
    "knowledge/<slug:slug>/": Row(
        lambda w: f"/knowledge/{w.article}/",
        NORTHWIND_ONLY_READS,
        answers(200, 200, 403, 404, writes={"owner": NW, "agent": NW}),
        lambda w: {"title": "Matrix edit", "text": "A changed text.", "published": "on"},
    ),
    "knowledge/<slug:slug>/v<int:version>/": Row(
        lambda w: f"/knowledge/{w.article}/v1/", NORTHWIND_ONLY_READS, None
    ),
    # The link's token is the credential: anyone may read the offer; only a newcomer (signed
    # out) accepts it here, and a signed-in account that is not the invitee is refused.
    "invitations/<str:token>/": Row(
        lambda w: f"/invitations/{w.token}/",
        answers(200, 200, 200, 200, 200),
        answers(400, 400, 400, 400, 302, writes={"anon": NW | {"people"}}),
        lambda w: {"name": "Ivy Matrix", "password": PASSWORD, "password2": PASSWORD},
    ),
}


def _routes(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for p in patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver):
            yield from _routes(p.url_patterns, route)
        elif isinstance(p, URLPattern):
            yield route


def test_every_store_url_of_the_url_conf_is_in_the_table():
    found = {r for r in _routes(get_resolver().url_patterns) if r.startswith(PREFIXES)}
    assert found == set(TABLE), (
        f"missing from TABLE: {sorted(found - set(TABLE))}; gone from the URL conf:"
        f" {sorted(set(TABLE) - found)}"
    )


# --- the world, made once --------------------------------------------------------------------


def _build(shop: ShopifyDouble) -> World:
    call_command("seed", "--reset", verbosity=0)
    northwind = Merchant.objects.get(slug="northwind")
    owner = user(NW_OWNER)
    connect_form = {
        "shop_domain": shop.shop_domain,
        "access_token": shop.access_token,
        "webhook_secret": shop.client_secret,
    }
    connect_store(merchant=northwind, **connect_form, by=owner)
    address = SupportAddress.objects.create(
        merchant=northwind, address="orders@northwind.test", verified_at=timezone.now()
    )
    extra = get_user_model().objects.create_user(
        username="extra@northwind.test", email="extra@northwind.test", password=PASSWORD
    )
    member = Membership.objects.create(user=extra, merchant=northwind, role=Role.AGENT)
    invitation = invitation_issue(
        merchant=northwind, email="ivy@example.org", role=Role.AGENT, by=owner
    )
    link = Notification.objects.get(invitation=invitation).payload["secret"]
    key, _ = key_create(merchant=northwind, user=owner, name="matrix", scopes=["read"])
    article = KbArticle.objects.filter(merchant=northwind, published=True).order_by("slug")[0]
    form = MerchantSettingsForm.for_merchant(northwind)
    values = {name: form.initial[name] for name in form.fields}
    values["approval_sla_hours"] += 1
    values["reply_reminder"] = "on" if values["reply_reminder"] else ""
    return World(
        northwind=northwind.pk,
        lumen=Merchant.objects.get(slug="lumen").pk,
        address=address.pk,
        invitation=invitation.pk,
        token=link.rstrip("/").rpartition("/")[2],
        member=member.pk,
        key_prefix=key.prefix,
        article=article.slug,
        settings=values,
        shop=connect_form,
    )


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[World]:
    """Seeded once; every cell's savepoint rolls back to it, and the module's end drops it.
    The Shopify double runs for the whole module (its subscriptions are not rolled back:
    connecting again finds them and makes none twice)."""
    shop = ShopifyDouble(shop_domain="matrix-shop.myshopify.com").start()
    pointed = override_settings(
        DESKHAND_SHOPIFY_BASE_URL=shop.url, DESKHAND_CONSOLE_URL="http://127.0.0.1:8000"
    )
    pointed.enable()
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        made = _build(shop)
    try:
        yield made
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
        pointed.disable()
        shop.stop()


# --- what a cell may change ------------------------------------------------------------------


def _digest(model: Any, where: str) -> str:
    """One table's rows that ``where`` picks, as one md5 (cheap to compare, whole rows)."""
    table, pk = model._meta.db_table, model._meta.pk.column
    return (
        f"(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.{pk}), '')) FROM {table} t"
        f" WHERE {where})"
    )


def _merchant_part() -> dict[str, str]:
    addresses = SupportAddress._meta.db_table
    articles = KbArticle._meta.db_table
    return {
        "merchant": _digest(Merchant, "t.id = %(m)s"),
        "addresses": _digest(SupportAddress, "t.merchant_id = %(m)s"),
        "checks": _digest(
            AddressCheck, f"t.address_id IN (SELECT id FROM {addresses} WHERE merchant_id = %(m)s)"
        ),
        "invitations": _digest(Invitation, "t.merchant_id = %(m)s"),
        "members": _digest(Membership, "t.merchant_id = %(m)s"),
        "articles": _digest(KbArticle, "t.merchant_id = %(m)s"),
        "versions": _digest(
            KbArticleVersion,
            f"t.article_id IN (SELECT id FROM {articles} WHERE merchant_id = %(m)s)",
        ),
        "keys": _digest(ApiKey, "t.merchant_id = %(m)s"),
        "shopify": _digest(ShopifyConnection, "t.merchant_id = %(m)s"),
        "audit": _digest(AuditEvent, "t.merchant_id = %(m)s"),
        "outbox": _digest(Notification, "t.merchant_id = %(m)s"),
    }


def snapshot(world: World) -> dict[str, dict[str, str]]:
    """Per part (``nw``, ``lu``, ``people``, ``unscoped``), a digest of each table's rows."""
    parts: dict[str, dict[str, str]] = {
        "nw": {k: v.replace("%(m)s", "%(nw)s") for k, v in _merchant_part().items()},
        "lu": {k: v.replace("%(m)s", "%(lu)s") for k, v in _merchant_part().items()},
        "people": {"accounts": _digest(get_user_model(), "true")},
        "unscoped": {"audit": _digest(AuditEvent, "t.merchant_id IS NULL")},
    }
    names = [(part, table) for part, tables in parts.items() for table in tables]
    sql = "SELECT " + ", ".join(parts[part][table] for part, table in names)
    with connection.cursor() as cur:
        cur.execute(sql, {"nw": world.northwind, "lu": world.lumen})
        row = cur.fetchone()
    found: dict[str, dict[str, str]] = {part: {} for part in parts}
    for (part, table), digest in zip(names, row, strict=True):
        found[part][table] = digest
    return found


def _client(actor: str) -> Client:
    c = Client(enforce_csrf_checks=True)
    if actor != "anon":
        c.force_login(user(EMAILS[actor]))
    return c


def _with_token(c: Client, data: dict[str, Any]) -> dict[str, Any]:
    """A CSRF token as a page's form carries it, with its cookie."""
    secret = get_random_string(32, CSRF_ALLOWED_CHARS)
    c.cookies[settings.CSRF_COOKIE_NAME] = secret
    return {**data, "csrfmiddlewaretoken": secret}


CELLS = [(actor, cell) for actor in ACTORS for cell in ("GET", "POST", "POST without CSRF")]


@pytest.mark.parametrize("route", list(TABLE))
def test_each_cell_gets_its_answer_and_changes_only_what_it_may(world, db, route):
    """The route's fifteen cells, each in a savepoint of its own that is rolled back; every
    cell that is wrong is reported, not just the first."""
    wrong: list[str] = []
    for actor, cell in CELLS:
        with transaction.atomic():
            wrong += [f"{cell} as {actor}: {said}" for said in _ask(world, route, actor, cell)]
            transaction.set_rollback(True)
    assert wrong == [], "\n".join(wrong)


def _ask(world: World, route: str, actor: str, cell: str) -> list[str]:
    """One cell: what is wrong with its answer, and with what it changed."""
    row = TABLE[route]
    path = row.path(world)
    c = _client(actor)
    before = snapshot(world)
    if cell == "GET":
        expected = (405, NOTHING) if row.get is None else row.get[actor]
        r = c.get(path)
    elif cell == "POST":
        expected = (405, NOTHING) if row.post is None else row.post[actor]
        r = c.post(path, _with_token(c, row.data(world)))
    else:  # a forged form: no token, so the middleware refuses before any view
        expected = (403, NOTHING)
        r = c.post(path, row.data(world))
    status, may_change = expected
    body = r.content.decode(errors="replace")
    wrong = []
    if status == LOGIN:
        if r.status_code != 302 or not r["Location"].startswith(settings.LOGIN_URL):
            wrong.append(f"{r.status_code} {r.get('Location', '')}, not the sign-in page")
    elif r.status_code != status:
        wrong.append(f"{r.status_code}, not {status}: {body[-600:]}")
    elif status == 302 and r["Location"].startswith(settings.LOGIN_URL):
        wrong.append("sent to sign in")
    after = snapshot(world)
    for part in before.keys() - may_change:
        if before[part] != after[part]:
            wrong.append(f"changed {part}: {_diff(before[part], after[part])}")
    wrong += [f"changed nothing of {part}" for part in may_change if before[part] == after[part]]
    # Lumen's owner reads Lumen's pages, nothing of Northwind's (the invitation is Northwind's).
    lumens_page = actor == "other" and r.status_code == 200 and not route.startswith("inv")
    if lumens_page and "Northwind" in body:
        wrong.append("shows Northwind to Lumen's owner")
    if route == "merchant/switch":
        chosen = c.session.get(SESSION_MERCHANT)
        if chosen != (world.northwind if status == 302 and cell == "POST" else None):
            wrong.append(f"the session works under merchant {chosen}")
    return wrong


def _diff(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return [table for table in before if before[table] != after[table]]
