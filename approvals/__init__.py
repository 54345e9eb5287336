"""Approvals: a person's decision bound to one exact call, and the trail of what people did.

Owns approvals (decide, withdraw, expire, escalate), staff notes, the append-only audit
(``audit.audit_record``, its one door) and the notifications that tell staff; sits below
``agent`` and imports the domain and the DBOS client, never the agent."""
