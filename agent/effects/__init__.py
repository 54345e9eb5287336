"""Effects that leave the database: refunds at a payment provider, mail through a mail server.

Each irreversible tool executes through an **adapter** chosen per merchant
(``Merchant.refund_adapter``, ``Merchant.mail_adapter``; ``intents.adapter_name``):

* ``database`` — today's in-database effect, written in the ledger's own transaction
  (``agent.tools.irreversible``); the demo's default;
* ``payments`` — refunds at Stripe through its own SDK, the ledger key as its
  ``Idempotency-Key`` (``payments``);
* ``smtp`` — customer email through Django's email framework, one stable ``Message-ID``
  per ledger claim (``mail``).

Modules: ``config`` (the environment: addresses, credentials, budgets, redaction),
``base`` (the outcome type, the shared retry loop, the adapter protocol), ``selectors``
(what the console and ``health`` read). Claim → call → record, reconciliation and Stripe's
webhook events are the ledger's (``agent.ledger``). See docs/effects.md.
"""
