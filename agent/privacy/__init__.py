"""Privacy: a run's words removed with its money facts kept, a customer erased, addresses masked.

Owns redaction of a finished run (``redaction``; its rows are ``agent.models.privacy``),
erasing a customer (``erasure``, with the desk's share in
``deskhand.domain.desk.customer_data``) and retention by the merchant's period
(``retention``; its daily schedule is the engine's). Masking in what tools hand the model
is the tools' own (``agent.tools.masking``). May import the run, ``approvals``, the desk
and ``deskhand.infra.dbos.client`` (to delete workflow history).
"""
