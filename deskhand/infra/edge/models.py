"""Failed sign-ins, one row each, so the throttle holds across web processes and restarts."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class LoginFailure(models.Model):
    """One wrong password for ``username`` from ``address``.

    The failure that brings a pair to the limit within the window carries
    ``locks_until``: until then every sign-in for that pair is refused (429)
    without the password being checked. The failure that brings the user name to
    its own limit, counted over every address, carries ``locks_name_until``: until
    then every sign-in for that name is refused, from anywhere. Rows older than the
    window are deleted once no lock they carry is still running.
    """

    username = models.CharField(max_length=254)
    address = models.CharField(max_length=64)
    at = models.DateTimeField(default=timezone.now)
    locks_until = models.DateTimeField(null=True, blank=True)
    locks_name_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["username", "address", "at"], name="loginfailure_pair_at"),
            models.Index(fields=["at"], name="loginfailure_at"),
        ]

    def __str__(self) -> str:
        return f"{self.username} from {self.address} at {self.at:%Y-%m-%d %H:%M:%S}"
