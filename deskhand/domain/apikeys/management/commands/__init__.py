"""API keys' operator commands: create, list and revoke a merchant's keys; connect a help desk."""
