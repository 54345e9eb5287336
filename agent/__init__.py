"""The agent: a run of the loop, its tools and model, and the ledger that makes each effect once.

Owns runs and their step log, consent at the gate, replay, privacy and operations; sits above
``approvals`` and the domain, and never imports the DBOS engine (docs/architecture.md)."""
