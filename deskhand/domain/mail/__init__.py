"""Inbound mail: customers' email in, stored once, threaded onto tickets.

Two ways in, one code path: a mail service's signed webhook (``webhooks``, through
django-anymail) and a local SMTP receiver (``smtp``, aiosmtpd) both hand the raw message to
``intake.inbound_received``, which stores it once and enqueues its intake workflow; a
worker processes it (``process.inbound_process``, a step of ``deskhand.engine.intake``):
routed to a merchant by its support address, threaded onto a ticket or opening one, or held
with a reason. See docs/inbound-mail.md.

Layering: this app sits just above ``deskhand.domain.desk`` and imports only the desk and the
DBOS client/names; never ``agent`` or ``approvals``.
"""
