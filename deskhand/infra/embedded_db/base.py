"""The backend module Django loads for ``ENGINE = "deskhand.infra.embedded_db"``."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from deskhand.infra import embedded_pg


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        embedded_pg.ensure_running()
        return super().get_new_connection(conn_params)
