"""Replay: a finished run read back from its step log, compared, and forked.

Owns a run's timeline (``timeline``), the conversation rebuilt from it by the loop's own
rule (``rebuild``), what a turn decided (``decisions``), divergence under another prompt
(``diverge``), that over many runs (``corpus``) and forks from step N (``fork``). Reads
only, except a fork, which starts a new run through ``deskhand.infra.dbos.client``. May import
the conversation, the ledger's lineage, providers and the run's services.
"""
