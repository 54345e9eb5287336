"""What knowledge a run read: every article version its ``search_kb`` steps returned.

Read from the step log, never from the articles as they are now: each ``search_kb`` result
records the slug, version and title it returned (``agent.tools.reads.search_kb``), and an
article's versions are never rewritten (``KbArticleVersion``), so the run page and
``replay --at`` name the version the run read, and link to its text, after the article has
moved on. A step whose words were redacted, or that failed, read nothing that can be shown.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from agent.models import Run, Step, payloads
from agent.models.payloads import StepKind
from agent.replay.timeline import effective_steps

TOOL = "search_kb"


@dataclasses.dataclass(frozen=True)
class ArticleRead:
    seq: int  # the first step that read this version
    slug: str
    version: int
    title: str  # as that version was titled

    @property
    def path(self) -> str:
        """The console's page of this version (``console:article_version``)."""
        return f"/knowledge/{self.slug}/v{self.version}/"

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "path": self.path}


def _results(step: Step) -> list[dict[str, Any]]:
    if step.kind != StepKind.TOOL or step.tool != TOOL or not step.ok:
        return []
    text = payloads.read_as(step, payloads.ToolPayload).text.strip()
    try:
        # A record with text after it (a fault, an injection) still reads as the record.
        data, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return []
    results = data.get("results") if isinstance(data, dict) else None
    return [r for r in results or [] if isinstance(r, dict)]


def knowledge_read(steps: Iterable[Step], *, before: int | None = None) -> list[ArticleRead]:
    """Each article version the steps (those before step ``before``, if given) read, once, in
    the order first read. A result from before versions were recorded has no version and is
    left out: which text it was cannot be told."""
    seen: dict[tuple[str, int], ArticleRead] = {}
    for step in steps:
        if before is not None and step.seq >= before:
            break
        for r in _results(step):
            slug, version = r.get("slug"), r.get("version")
            if not isinstance(slug, str) or not isinstance(version, int):
                continue
            seen.setdefault(
                (slug, version), ArticleRead(step.seq, slug, version, str(r.get("title", "")))
            )
    return list(seen.values())


def run_knowledge(run: Run) -> list[ArticleRead]:
    """What ``run`` read, a fork's inherited steps included; only its searches are loaded when
    it is not a fork (the run page asks on every refresh)."""
    if run.forked_from_id is None:
        searches = Step.objects.filter(run=run, kind=StepKind.TOOL, tool=TOOL).order_by("seq")
        return knowledge_read(searches)
    return knowledge_read(effective_steps(run))
