"""Fixtures for the customer in the loop: the SMTP receiver (mail in), a loopback SMTP
server (mail out), and DBOS executing runs in the test process."""

from __future__ import annotations

from tests.effects.conftest import smtp_server  # noqa: F401 - a fixture, used by name
from tests.mail.conftest import receiver  # noqa: F401 - a fixture, used by name
