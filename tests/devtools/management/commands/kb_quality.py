"""``python manage.py kb_quality [--json] [--set DIR]``: how often knowledge search finds the
article that answers a customer's question (see ``tests/devtools/kb_quality.py``).

Prints the top-1 and top-3 hit rates over the labelled set (top-3 also on each half), how many questions share no
content word with their article's title, and every miss (the question, the article wanted,
the three found). Nothing is kept: the scratch merchant is rolled back. Exit status 1, with a
sentence, when the set is missing or invalid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tests.devtools.kb_quality import FIXTURES, TOP, SetInvalid, kb_quality_measure


class Command(BaseCommand):
    help = "Measure knowledge search against the labelled set of customer questions."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="One JSON object on stdout.")
        parser.add_argument(
            "--set", type=Path, default=FIXTURES, help=f"The set's folder (default {FIXTURES})."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            q = kb_quality_measure(opts["set"])
        except SetInvalid as e:
            raise CommandError(str(e)) from None
        if opts["json"]:
            self.stdout.write(json.dumps(q.as_json(), indent=1, ensure_ascii=False))
            return
        for m in q.misses:
            self.stdout.write(f"miss: {m.question!r}\n  wanted {m.wanted!r}\n  got    {m.got}")
        self.stdout.write(
            f"{q.questions} questions over {q.articles} articles;"
            f" {q.no_shared_word} share no content word with their article's title."
        )
        self.stdout.write(
            f"top-1 {q.top1:.3f}  top-{TOP} {q.top3:.3f}  ({len(q.misses)} not in the top {TOP})"
        )
        self.stdout.write(
            f"top-{TOP} on the odd questions {q.top3_odd:.3f}, on the even ones {q.top3_even:.3f}"
        )
