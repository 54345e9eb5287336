"""Inbound webhooks. Mailgun posts the raw MIME to a route URL that ends in ``mime``; Stripe
posts each merchant's refund events to that merchant's own endpoint, and Shopify its orders,
refunds and privacy requests to that merchant's own."""

from django.urls import path

from deskhand.web.inbound.mail import mailgun_inbound
from deskhand.web.inbound.shopify import shopify_webhook
from deskhand.web.inbound.stripe import stripe_webhook

app_name = "mail"
urlpatterns = [
    path("mailgun/", mailgun_inbound, name="mailgun"),
    path("mailgun/mime", mailgun_inbound, name="mailgun_mime"),
    path("stripe/<slug:merchant>/", stripe_webhook, name="stripe"),
    path("shopify/<slug:merchant>/", shopify_webhook, name="shopify"),
]
