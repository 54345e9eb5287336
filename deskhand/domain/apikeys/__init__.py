"""API keys per merchant and what the API remembers for them.

Owns: ``ApiKey`` (hashed, scoped, revocable, with its last use and its rate window),
``StoredResponse`` (an ``Idempotency-Key``'s first answer, kept 24 hours), the help
desks' signed channel (``HelpdeskSource``, ``HelpdeskDelivery``, ``ExternalTicket``), and
this app's share of erasing a customer (``erasure.py``).

Imports the desk only: the HTTP API (``deskhand.web.api``) and the console's keys page sit
above it, and the privacy erasure (``agent.privacy``) calls its share from above.
"""
