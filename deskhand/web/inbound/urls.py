"""Inbound webhooks. Mailgun posts the raw MIME to a route URL that ends in ``mime``."""

from django.urls import path

from deskhand.web.inbound.mail import mailgun_inbound

app_name = "mail"
urlpatterns = [
    path("mailgun/", mailgun_inbound, name="mailgun"),
    path("mailgun/mime", mailgun_inbound, name="mailgun_mime"),
]
