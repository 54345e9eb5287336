"""The worker registry: one row per executor id, written only by whoever holds its lock."""

from __future__ import annotations

from django.db import models


class Worker(models.Model):
    """An executor id and its latest incarnation.

    Liveness is not this row: it is the session-level advisory lock on the executor id
    (``deskhand.infra.fleet.lease``), which a dead process cannot hold. The row says who
    held it last (``incarnation``, host, pid, version), when that holder last proved it
    still held it (``last_seen``, the database's clock), and whether another worker has
    since taken its runs over. ``incarnation`` is cleared by a clean stop and by a
    takeover: a process that reconnects and finds another incarnation (or none) here
    knows it has been replaced and stops.
    """

    executor_id = models.CharField(max_length=128, primary_key=True)
    incarnation = models.UUIDField(null=True, blank=True)
    app_version = models.CharField(max_length=128, blank=True, default="")
    host = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    taken_over_at = models.DateTimeField(null=True, blank=True)
    taken_over_by = models.CharField(max_length=128, blank=True, default="")
    runs_taken_over = models.IntegerField(default=0)

    class Meta:
        ordering = ["executor_id"]

    def __str__(self) -> str:
        return f"{self.executor_id} ({self.app_version or 'no version'})"
