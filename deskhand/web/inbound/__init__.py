"""Inbound webhooks that are not the API, under ``/inbound/``: Mailgun's signed routes
(``mail``), which hand each message to the domain's ``inbound_received``, the same door the
SMTP receiver uses (deskhand.domain.mail.intake); and Stripe's refund events per merchant
(``stripe``), stored once and processed by a workflow (agent.ledger.provider_events)."""
