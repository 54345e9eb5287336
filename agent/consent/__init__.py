"""Consent: no irreversible effect without a person's decision, or a rule a person wrote.

Owns the approval gate as a run sees it (``gate``: request, read, resume), approving a
narrower call than the one proposed (``narrowing``) and the merchant's approval policy
(``policy``). Decisions themselves are ``approvals``'; this package binds them to exactly
the call performed. May import the ledger's lineage, tools, ``approvals`` and the desk.
"""
