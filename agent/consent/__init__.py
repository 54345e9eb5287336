"""Consent: no irreversible effect without a person's decision, or a rule a person wrote.

Owns the approval gate as a run sees it (``gate``: request, read, resume) and the
merchant's approval policy (``policy``); what a narrower approved call may change is the
tools' (``agent.tools.narrowing``), so the ledger and a run's selectors read it from
below. Decisions themselves are ``approvals``'; this package binds them to exactly the call
performed. May import the run's bounds, the ledger's lineage and answers, the customer's
news, tools, ``approvals`` and the desk.
"""
