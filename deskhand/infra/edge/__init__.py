"""The web edge: malformed requests refused, sign-in throttled in Postgres, an outage as a 503.

Owns the answers given before or instead of a view (one-sentence pages, the admin filter
guard, telling a database outage from other errors); a low layer that imports no app."""
