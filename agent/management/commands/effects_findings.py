"""``python manage.py effects_findings [--json] [--reconcile] [--resolve ID --note TEXT --by EMAIL]``.

Lists reconciliation's open findings (what the admin shows, what ``health --json``
counts). ``--reconcile`` runs one pass now (the worker runs it every five minutes).
``--resolve`` records that a person settled a finding — what they did is the note;
nothing in the ledger or at the provider is changed by it.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.effects.selectors import findings_summary, open_findings
from agent.ledger.provider_reconciliation import reconcile_all
from agent.models.effects import EffectFinding
from deskhand.domain.cli import CliError, DeskhandCommand


class Command(DeskhandCommand):
    help = "List, reconcile or settle the findings of payments reconciliation."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument("--reconcile", action="store_true", help="Run one pass now first.")
        parser.add_argument("--resolve", type=int, metavar="ID", help="Settle this finding.")
        parser.add_argument("--note", default="", help="What was done (with --resolve).")
        parser.add_argument("--by", default="", help="Who settled it (with --resolve).")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["resolve"] is not None:
            self._resolve(opts["resolve"], opts["note"].strip(), opts["by"].strip(), opts["json"])
            return
        found = reconcile_all(timezone.now()) if opts["reconcile"] else None
        rows = [
            {
                "id": f.pk,
                "merchant": f.merchant.slug,
                "kind": f.kind,
                "provider_ref": f.provider_ref,
                "ledger_key": f.ledger_entry.key if f.ledger_entry_id and f.ledger_entry else None,
                "ledger_amount_cents": f.ledger_amount_cents,
                "provider_amount_cents": f.provider_amount_cents,
                "detail": f.detail,
                "found_at": f.found_at.isoformat(),
                "last_seen_at": f.last_seen_at.isoformat(),
            }
            for f in open_findings()
        ]
        if opts["json"]:
            out = {"summary": findings_summary(), "findings": rows}
            if found is not None:
                out["reconciled"] = found
            self.stdout.write(json.dumps(out, indent=2))
            return
        if found is not None:
            self.stdout.write(f"reconciled {len(found)} merchant(s): {found}")
        if not rows:
            self.stdout.write("No open findings.")
        for r in rows:
            self.stdout.write(f"#{r['id']} {r['merchant']} {r['kind']}: {r['detail']}")

    def _resolve(self, pk: int, note: str, by: str, as_json: bool) -> None:
        if not note or not by:
            raise CliError("--resolve needs --note (what was done) and --by (who).", code="usage")
        with transaction.atomic():
            finding = EffectFinding.objects.select_for_update().filter(pk=pk).first()
            if finding is None:
                raise CliError(f"There is no finding {pk}.", code="not_found")
            if finding.resolved_at is not None:
                raise CliError(
                    f"Finding {pk} was already settled by {finding.resolved_by}.", code="refused"
                )
            finding.resolved_at, finding.resolved_by, finding.resolution = timezone.now(), by, note
            finding.save(update_fields=["resolved_at", "resolved_by", "resolution"])
        if as_json:
            self.stdout.write(json.dumps({"id": pk, "resolved_by": by, "resolution": note}))
        else:
            self.stdout.write(f"Finding {pk} settled by {by}: {note}")
