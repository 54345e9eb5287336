"""Approvals: a person's decision bound to one exact call, and the trail of what people did.

Owns approvals (decide, withdraw, expire, escalate), staff notes, the append-only audit
(``audit.audit_record``, its one door), the notifications that tell staff, and the audited
acts of a merchant's people on the merchant itself: its team, settings and support
addresses. Sits below ``agent`` and imports the domain and the DBOS client, never the agent."""
