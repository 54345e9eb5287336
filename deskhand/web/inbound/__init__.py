"""Inbound webhooks that are not the API: Mailgun's signed routes (``mail``, under
``/inbound/``). They hand each message to the domain's ``inbound_received``, the same
door the SMTP receiver uses (deskhand.domain.mail.intake)."""
