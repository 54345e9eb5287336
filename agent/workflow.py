"""Placeholder: the DBOS workflow lands in the next commit."""
