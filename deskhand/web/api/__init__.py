"""The JSON API at ``/api/v1/`` (docs/api.md): an entry point, like the console.

Thin django-ninja operations over the same services and selectors the console and
``manage.py`` call; keys, stored answers and help-desk sources are ``deskhand.domain.apikeys``'s.
Imports the console's selectors, the agent's run services, approvals and the desk; nothing
below imports it.
"""
