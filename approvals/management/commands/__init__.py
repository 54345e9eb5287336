"""Approvals' operator commands: what is waiting for a person; deactivating a staff account."""
