"""The idempotency ledger: every irreversible effect claimed once, in the effect's own transaction.

The product's central mechanism. Owns the claim (``models.LedgerEntry``), the transaction
that claims and performs an approved call (``effect``), how an effect's answer is logged
(``answers``), effects recognised across a run's lineage of forks (``lineage``) and the
claim → call → record protocol for effects in another system (``intents``). May import
tools, consent's narrowing, the effect adapters, the step log and ``approvals``' models.
"""
