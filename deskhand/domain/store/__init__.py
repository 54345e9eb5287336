"""A merchant's own store platform: its connection to Shopify (the access token and webhook
secret sealed at rest, ``models.py``), the GraphQL Admin API client (``shopify.py``) and the
check of a webhook's signature (``webhooks.py``).

Imports the desk (a connection belongs to a merchant) and infrastructure (``sealed``); the
desk never imports it. The agent and approvals reach a store through this package."""
