"""Recorded prompts: the system prompt template and tool set each model call was sent.

A model step's ``prompt_sha256`` is taken over the system text as sent, which for
runs started before the fence token moved into the opening turn held that run's
token — so it differs for every such run and names no version. A *version* is
taken without the token: the template is the system text with the run's fence
token replaced by ``{token}``, and the version's hash covers that template and
the tool definitions. Every run sent the same prompt names the same version,
whichever way its fence token travelled.

The model step records its version (``agent.run.turns``): the row here, once per
version, and the version on its payload and on the run — in the step's own
writes, so the DBOS step sequence is unchanged. ``replay --at`` renders a run's
recorded version with its token and says when today's differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from django.db import IntegrityError, connection, transaction

from agent.models import PromptVersion
from agent.tools.registry import canonical_json

TOKEN_SLOT = "{token}"
_STORED = f"SELECT 1 FROM {PromptVersion._meta.db_table} WHERE sha256 = %s"


def template_of(system: str, token: str) -> str:
    """The system text with the run's fence token (if it was in it) taken out."""
    return system.replace(token, TOKEN_SLOT) if token else system


def version_sha256(template: str, tools: list[dict[str, Any]]) -> str:
    return hashlib.sha256(
        canonical_json({"system_template": template, "tools": tools}).encode()
    ).hexdigest()


def render(template: str, token: str) -> str:
    """The system text a run with fence token ``token`` was sent under ``template``."""
    return template.replace(TOKEN_SLOT, token)


def record(system: str, tools: list[dict[str, Any]], token: str) -> str:
    """Store the version ``system`` (sent with fence ``token``, or "" if none) and ``tools``
    belong to, once; return its hash. Safe when many model steps record it at once."""
    template = template_of(system, token)
    digest = version_sha256(template, tools)
    # Every model step asks: in SQL, so the ORM does not compile the same question each turn.
    with connection.cursor() as cur:
        cur.execute(_STORED, [digest])
        if cur.fetchone() is not None:
            return digest
    try:
        with transaction.atomic():
            PromptVersion.objects.create(sha256=digest, system_template=template, tools=tools)
    except IntegrityError:
        pass  # another step stored the same version first: the content is the same
    return digest


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A version as recorded, rendered for one run."""

    sha256: str
    system: str
    tools: list[dict[str, Any]]


def recorded(digest: str, token: str) -> Recorded | None:
    """The stored version ``digest``, rendered with ``token``; None if it is not stored."""
    row = PromptVersion.objects.filter(pk=digest).first()
    if row is None:
        return None
    return Recorded(digest, render(row.system_template, token), list(row.tools))
