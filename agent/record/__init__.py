"""A run's step record, the low half of what was ``agent/run/``: the one writer of step
rows (``steplog``), a read or reversible tool call run as a recorded step
(``execute``) and the fault points at step boundaries (``faults``); what a row holds is
``agent.models.payloads``. It never imports a run's lifecycle (``agent.run``) nor what
a run does with the record (the loop, consent, the ledger, replay)."""
