"""What an operator asks of the product: health (``manage.py health``, ``GET /healthz``).

May import every part of ``agent``, the fleet and ``deskhand.infra.dbos.client``.
"""
