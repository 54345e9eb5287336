"""The idempotency ledger: every irreversible effect claimed once, in the effect's own transaction.

The product's central mechanism. Owns the transaction that claims and performs an
approved call (``effect``; the claim itself is ``agent.models.ledger.LedgerEntry``), how an
effect's answer is logged (``answers``), effects recognised across a run's lineage of
forks (``lineage``), the claim → call → record protocol for effects in another system
(``intents``), the scheduled comparison of those claims with the provider
(``provider_reconciliation``), what the provider's webhooks say about them
(``provider_events``), and the findings both write (``findings``). May import tools (with their narrowing), the effect
adapters, the step record and ``approvals``' models.
"""
