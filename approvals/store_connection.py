"""Connecting a merchant's Shopify store, disconnecting it, and checking it still works.

An owner connects a store on the console's "Shopify store" page: its ``*.myshopify.com``
address, the custom app's Admin API access token and the app's client secret (which signs
the webhooks). Connecting, in this order, so that a refusal leaves nothing behind here:

1. **The token is checked** by a cheap call that is needed anyway — the list of the store's
   webhook subscriptions. A refused token (401/403) or a store that does not answer is a
   sentence (``StoreRefused``) and nothing is saved.
2. **The subscriptions the product needs are created** (``TOPICS``, ``webhookSubscriptionCreate``)
   at ``shopify_webhook_address(merchant)``, only those that do not exist yet: connecting
   again (a replaced token) creates none twice, and a connect that failed halfway is finished
   by the next one. A subscription Shopify refuses (an address it will not call, say) is a
   sentence and nothing is saved here.
3. **The connection and one audit event are saved in one transaction** (who, when, the shop,
   which secrets were replaced and which subscriptions were made — never a secret).

The first connection needs both secrets (without the client secret no webhook could be
verified). They are write-only: a blank field when a store is already connected keeps the
secret that is set; nothing reads one back but the code that calls Shopify or checks a signature.
``customers/redact`` (and the other privacy topics) are not subscriptions: Shopify sends them
to the addresses set in the app's configuration, which the page says.

Disconnecting forgets the connection (its sealed secrets with it) and is refused while the
store's orders are read from Shopify: choose another order source first. The subscriptions
stay at Shopify until the app is uninstalled; deliveries to a merchant with no connection
are refused by the inbound endpoint.

``store_health`` is what ``manage.py health`` asks of each connected store: does the token
still work, and does each subscription still exist at the address it should.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse

from approvals.audit import audit_record
from approvals.models import Channel
from approvals.notifications import console_url
from deskhand.domain.desk.models import Merchant, OrderSourceKind
from deskhand.domain.desk.permissions import require_owner
from deskhand.domain.store import shopify
from deskhand.domain.store.models import ShopifyConnection, shop_domain_valid
from deskhand.infra import sealed

# The webhooks the product needs (docs/shopify.md): orders kept fresh, refunds made elsewhere.
TOPICS = ("orders/create", "orders/updated", "orders/cancelled", "refunds/create")


class StoreRefused(Exception):
    """Connecting or disconnecting was refused; the message is the sentence a page shows."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def shopify_webhook_address(merchant: Merchant) -> str:
    """Where Shopify delivers this merchant's webhooks (``deskhand.web.inbound.shopify``): the
    one place the address is built, from the route itself."""
    return console_url(reverse("mail:shopify", args=[merchant.slug]))


def _topic_enum(topic: str) -> str:
    return topic.upper().replace("/", "_")


def _missing(subscriptions: list[shopify.Subscription], address: str) -> list[str]:
    """The needed topics with no subscription at ``address``."""
    have = {s.topic for s in subscriptions if s.uri == address}
    return [t for t in TOPICS if _topic_enum(t) not in have]


def _ask(call: Any) -> Any:
    """One call to Shopify, its failures as sentences (never holding the token)."""
    try:
        return call()
    except shopify.ShopifyAuthError:
        raise StoreRefused(
            "Shopify refused this access token: check it is the custom app's Admin API"
            " access token for this store, and that the app is installed.",
            "access_token",
        ) from None
    except shopify.ShopifyRefused as exc:
        raise StoreRefused(f"Shopify refused to create a webhook subscription: {exc}") from None
    except shopify.ShopifyError as exc:
        raise StoreRefused(
            f"Shopify did not answer as expected: {exc} Nothing was saved."
        ) from None


def connect_store(
    *, merchant: Merchant, shop_domain: str, access_token: str, webhook_secret: str, by: Any
) -> tuple[ShopifyConnection, list[str]]:
    """Connect (or reconnect) the merchant's store; the connection and the topics subscribed
    now. Blank secrets keep those already set; the first connection needs the token."""
    require_owner(by, merchant.pk, "connect the Shopify store")
    domain = shop_domain.strip().lower()
    try:
        shop_domain_valid(domain)
    except ValidationError as exc:
        raise StoreRefused(exc.messages[0], "shop_domain") from None
    existing = ShopifyConnection.objects.filter(merchant=merchant).first()
    token, secret = access_token.strip(), webhook_secret.strip()
    if not token and existing is None:
        raise StoreRefused("Paste the store's Admin API access token.", "access_token")
    if not token and existing is not None and existing.shop_domain != domain:
        raise StoreRefused("Another store needs its own access token: paste it.", "access_token")
    if not secret and (existing is None or not existing.webhook_secret_sealed):
        raise StoreRefused(
            "Paste the app's API secret key: without it no webhook from the store can be verified.",
            "webhook_secret",
        )
    # A connection not saved yet, to build the client from (the token sealed as it will be).
    trial = ShopifyConnection(merchant=merchant, shop_domain=domain)
    if token:
        trial.set_access_token(token)
    else:
        assert existing is not None
        trial.access_token_sealed = existing.access_token_sealed
    address = shopify_webhook_address(merchant)
    with trial.client() as client:
        missing = _missing(_ask(client.webhook_subscriptions), address)
        for topic in missing:
            _ask(lambda topic=topic: client.webhook_subscribe(topic, address))
    replaced = [
        name for name, value in (("access token", token), ("client secret", secret)) if value
    ]
    with transaction.atomic():
        Merchant.locked(merchant.pk)  # one connect or disconnect at a time per merchant
        connection = ShopifyConnection.objects.filter(merchant=merchant).first() or trial
        connection.shop_domain = domain
        connection.api_version = trial.api_version  # the version the check just used
        connection.access_token_sealed = trial.access_token_sealed
        if secret:
            connection.webhook_secret_sealed = sealed.seal(secret)
        connection.save()
        audit_record(
            merchant_id=merchant.pk,
            actor=by,
            action="store.shopify_connected",
            channel=Channel.WEB,
            detail={
                "shop_domain": domain,
                "replaced": replaced,
                "subscribed": missing,
                "address": address,
            },
        )
    return connection, missing


def disconnect_store(*, merchant: Merchant, by: Any) -> str:
    """Forget the merchant's connection and its secrets; the shop it was connected to."""
    require_owner(by, merchant.pk, "disconnect the Shopify store")
    with transaction.atomic():
        locked = Merchant.locked(merchant.pk)
        connection = ShopifyConnection.objects.filter(merchant=locked).first()
        if connection is None:
            raise StoreRefused("No Shopify store is connected: there is nothing to disconnect.")
        if locked.order_source == OrderSourceKind.SHOPIFY:
            raise StoreRefused(
                "This store's orders are read from Shopify: choose another order source on the"
                " settings page first, then disconnect."
            )
        domain = connection.shop_domain
        connection.delete()
        audit_record(
            merchant_id=merchant.pk,
            actor=by,
            action="store.shopify_disconnected",
            channel=Channel.WEB,
            detail={"shop_domain": domain},
        )
    return domain


def shopify_source_refused(merchant: Merchant, order_source: str) -> str | None:
    """Why ``order_source`` cannot be chosen for ``merchant`` now, or ``None``: Shopify needs
    a connected store."""
    if order_source != OrderSourceKind.SHOPIFY:
        return None
    if ShopifyConnection.objects.filter(merchant_id=merchant.pk).exists():
        return None
    return (
        "Connect the Shopify store first (Settings → Shopify store): its orders cannot be read"
        " without it."
    )


@dataclasses.dataclass(frozen=True)
class StoreHealth:
    merchant: str  # the slug
    shop_domain: str
    token_works: bool
    missing: list[str]  # needed topics with no subscription at the address
    problem: str  # a sentence, "" when well

    @property
    def ok(self) -> bool:
        return self.token_works and not self.missing and not self.problem


def store_health(connection: ShopifyConnection) -> StoreHealth:
    """Does the token still work, and do the store's subscriptions still exist (Shopify
    deletes one after repeated failed deliveries)? One read; never writes."""
    merchant = connection.merchant
    address = shopify_webhook_address(merchant)
    base = {"merchant": merchant.slug, "shop_domain": connection.shop_domain}
    try:
        with connection.client() as client:
            subscriptions = client.webhook_subscriptions()
    except shopify.ShopifyAuthError:
        return StoreHealth(
            **base,
            token_works=False,
            missing=[],
            problem="Shopify refuses the access token: an owner must connect the store again.",
        )
    except (shopify.ShopifyError, sealed.SealBroken) as exc:
        return StoreHealth(**base, token_works=False, missing=[], problem=f"not checked: {exc}")
    missing = _missing(subscriptions, address)
    problems = []
    if missing:
        problems.append(
            f"webhook subscriptions missing at {address}: {', '.join(missing)} — an owner"
            " connects the store again (the token may stay) to create them"
        )
    if not connection.webhook_secret_sealed:
        problems.append("no API secret key is set, so no webhook can be verified")
    problem = "; ".join(problems)
    return StoreHealth(**base, token_works=True, missing=missing, problem=problem)


def stores_health() -> list[StoreHealth]:
    """``store_health`` of every connected store, by merchant."""
    return [
        store_health(c)
        for c in ShopifyConnection.objects.select_related("merchant").order_by("merchant__slug")
    ]
