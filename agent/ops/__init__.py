"""What an operator asks of the product, and what keeps it true: health (``manage.py health``,
``GET /healthz``) and the reconciler a worker runs over every run (``reconciler``: runs and
their workflows kept in agreement, forks made with DBOS's own tools adopted through
``agent.replay.fork``, what it found recorded by ``agent.run.workflow_findings``).


May import every part of ``agent``, the fleet and ``deskhand.infra.dbos.client``.
"""
