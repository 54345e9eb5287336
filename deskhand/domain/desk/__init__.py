"""The support domain the agent works on: merchants, roles, customers, orders, refunds, tickets, KB.

Owns those models and the services that change them (money rules under row locks), the
email outbox and ticket threads; a low layer that imports Django and the edge only."""
