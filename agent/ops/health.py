"""What an operator needs to know at a glance: ``manage.py health`` and ``GET /healthz``.

``health_report()`` reads, without writing anything:

* **database** — reachable, and how long one round trip took;
* **workers** — every registered executor id, alive or not (alive: its session
  advisory lock is held right now, ``deskhand.infra.fleet.lease``), with its version, host,
  pid and how long ago it last renewed its lease; a takeover is shown on the dead id;
* **queue** — runs enqueued and not yet picked up (the queue's depth), runs executing,
  runs parked waiting for a person;
* **oldest waiting approval** — its age, run and expiry (ids and numbers only);
* **stuck runs** — open runs that have not moved for longer than the threshold: queued
  or running with no step, or awaiting an approval that was already decided;
* **versions nobody serves** — open runs whose application version no live worker
  runs: after a deploy they wait for a draining worker or ``manage.py move_runs``;
* **effects** — open reconciliation findings (the ledger and a payment provider disagree,
  ``agent.ledger.provider_reconciliation``) by kind and merchant, and claims still pending at a provider;
* **intake** — stored mail not yet processed and customer lines not yet routed, past the
  grace period (``agent.customer.intake``), the oldest one's age, how many the sweep re-drove
  in the last day (each a hand-on a crash lost), and how many are stuck (their workflows
  ended through every re-drive without doing it: a person must look);
* **workflows** — what was done to runs' workflows with DBOS's own tools and what became
  of it (a fork adopted as a run or refused, a resumed workflow of a closed run stopped
  again, an open run whose workflow ended), open findings with their sentences and the
  most recent ones (``agent.run.workflow_findings``).

``healthz()`` is the part a load balancer may see: booleans and counts, no ids.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import connection

from agent.customer.intake import intake_summary
from agent.effects.selectors import findings_summary
from agent.models import Run, RunStatus
from agent.run.workflow_findings import workflow_findings_summary
from approvals.models import Approval, ApprovalStatus
from deskhand.infra.fleet.lease import lock_key
from deskhand.infra.fleet.models import Worker

STUCK_AFTER = dt.timedelta(minutes=15)


@dataclass
class WorkerHealth:
    executor_id: str
    alive: bool
    app_version: str
    host: str
    pid: int | None
    last_seen_s: float | None
    taken_over_by: str
    runs_taken_over: int
    pending_runs: int


@dataclass
class Report:
    database: bool
    database_ms: float | None = None
    error: str = ""
    app_version: str = ""
    workers: list[WorkerHealth] = field(default_factory=list)
    queue_depth: int = 0
    executing: int = 0
    parked: int = 0
    oldest_waiting_approval: dict[str, Any] | None = None
    stuck_runs: list[dict[str, Any]] = field(default_factory=list)
    unserved_versions: dict[str, int] = field(default_factory=dict)
    effects: dict[str, Any] = field(default_factory=dict)
    workflows: dict[str, Any] = field(default_factory=dict)
    intake: dict[str, Any] = field(default_factory=dict)
    # Per connected Shopify store (by merchant slug): the webhook topics whose subscription
    # to this Deskhand is gone, or why the store could not be asked.
    shopify: dict[str, Any] = field(default_factory=dict)

    @property
    def alive(self) -> list[WorkerHealth]:
        return [w for w in self.workers if w.alive]

    @property
    def ok(self) -> bool:
        """Healthy: the database answers, some worker lives, nothing stuck or stranded, no
        money the ledger and a provider disagree about, and nothing done with DBOS's own
        tools that a person has not looked at."""
        return (
            self.database
            and bool(self.alive)
            and not self.stuck_runs
            and not self.unserved_versions
            and not self.effects.get("open")
            and not self.workflows.get("open")
            and not self.intake.get("stuck")
            and not any(v.get("missing") or v.get("error") for v in self.shopify.values())
        )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["workers_alive"] = len(self.alive)
        return out


def held_lock_keys() -> set[int]:
    """Advisory lock keys (bigint, signed) held right now in this database, by anyone."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory'"
            " AND objsubid = 1 AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        keys = set()
        for hi, lo in cur.fetchall():
            unsigned = (hi << 32) | lo
            keys.add(unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned)
        return keys


def _workers(now: dt.datetime) -> list[WorkerHealth]:
    held = held_lock_keys()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT executor_id, count(*) FROM dbos.workflow_status"
            " WHERE status = 'PENDING' AND name = 'deskhand.run' GROUP BY executor_id"
        )
        pending = dict(cur.fetchall())
    out = []
    for w in Worker.objects.all():
        out.append(
            WorkerHealth(
                executor_id=w.executor_id,
                alive=lock_key(w.executor_id) in held and w.incarnation is not None,
                app_version=w.app_version,
                host=w.host.split("|")[0],
                pid=w.pid,
                last_seen_s=round((now - w.last_seen).total_seconds(), 1) if w.last_seen else None,
                taken_over_by=w.taken_over_by,
                runs_taken_over=w.runs_taken_over,
                pending_runs=int(pending.get(w.executor_id, 0)),
            )
        )
    return out


def _queue() -> tuple[int, int, int, dict[str, int]]:
    """(enqueued, executing, parked, open run workflows by version) from DBOS and the runs."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT status, application_version, count(*) FROM dbos.workflow_status"
            " WHERE name = 'deskhand.run' AND status IN ('ENQUEUED', 'PENDING')"
            " GROUP BY status, application_version"
        )
        rows = cur.fetchall()
    enqueued = sum(n for status, _, n in rows if status == "ENQUEUED")
    by_version: dict[str, int] = {}
    for _, version, n in rows:
        by_version[version or ""] = by_version.get(version or "", 0) + int(n)
    parked = Run.objects.filter(status=RunStatus.AWAITING_APPROVAL).count()
    pending = sum(n for status, _, n in rows if status == "PENDING")
    return int(enqueued), max(0, int(pending) - parked), parked, by_version


def _oldest_approval(now: dt.datetime) -> dict[str, Any] | None:
    a = (
        Approval.objects.filter(status=ApprovalStatus.PENDING)
        .order_by("requested_at")
        .values("id", "run_id", "requested_at", "expires_at")
        .first()
    )
    if a is None:
        return None
    return {
        "approval_id": str(a["id"]),
        "run_id": str(a["run_id"]),
        "age_s": round((now - a["requested_at"]).total_seconds(), 1),
        "expires_in_s": round((a["expires_at"] - now).total_seconds(), 1),
    }


def _stuck(now: dt.datetime, after: dt.timedelta) -> list[dict[str, Any]]:
    cutoff = now - after
    out = []
    moving = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.CANCELLING)
    for run in Run.objects.filter(status__in=moving, updated_at__lt=cutoff).values(
        "id", "status", "updated_at"
    )[:100]:
        out.append(
            {
                "run_id": str(run["id"]),
                "status": run["status"],
                "why": "no progress",
                "for_s": round((now - run["updated_at"]).total_seconds()),
            }
        )
    decided = Approval.objects.filter(
        run__status=RunStatus.AWAITING_APPROVAL,
        decided_at__lt=cutoff,
        status__in=[ApprovalStatus.APPROVED, ApprovalStatus.DENIED, ApprovalStatus.EXPIRED],
    ).values("run_id", "decided_at")[:100]
    for a in decided:
        if a["decided_at"] is None:
            continue
        out.append(
            {
                "run_id": str(a["run_id"]),
                "status": RunStatus.AWAITING_APPROVAL,
                "why": "decided but not resumed",
                "for_s": round((now - a["decided_at"]).total_seconds()),
            }
        )
    return out


def health_report(stuck_after: dt.timedelta = STUCK_AFTER) -> Report:
    """Everything ``manage.py health`` prints; a database that is down is a report, not an error."""
    from django.conf import settings

    t0 = time.perf_counter()
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT now()")
            now = cur.fetchone()[0]
    except Exception as exc:
        return Report(database=False, error=type(exc).__name__)
    report = Report(
        database=True,
        database_ms=round((time.perf_counter() - t0) * 1000, 2),
        app_version=settings.DESKHAND_APP_VERSION,
    )
    report.workers = _workers(now)
    report.queue_depth, report.executing, report.parked, by_version = _queue()
    served = {w.app_version for w in report.alive}
    report.unserved_versions = {v: n for v, n in sorted(by_version.items()) if v not in served}
    report.oldest_waiting_approval = _oldest_approval(now)
    report.stuck_runs = _stuck(now, stuck_after)
    report.effects = findings_summary()
    report.workflows = workflow_findings_summary()
    report.intake = intake_summary(now)
    report.shopify = shopify_subscriptions()
    return report


def shopify_subscriptions() -> dict[str, Any]:
    """Each connected store's missing webhook subscriptions (Shopify deletes a subscription
    after repeated failed deliveries; then the mirror stops hearing of changes)."""
    from deskhand.domain.store import shopify
    from deskhand.domain.store.connect import subscriptions_missing
    from deskhand.domain.store.models import ShopifyConnection

    out: dict[str, Any] = {}
    for store in ShopifyConnection.objects.select_related("merchant"):
        slug = store.merchant.slug
        try:
            out[slug] = {
                "shop": store.shop_domain,
                "missing": subscriptions_missing(store),
            }
        except shopify.ShopifyError as exc:
            out[slug] = {"shop": store.shop_domain, "missing": [], "error": str(exc)}
    return out


def healthz() -> tuple[int, dict[str, Any]]:
    """For ``GET /healthz``: no ids, no customer data; 503 only when the database is down."""
    try:
        report = health_report()
    except Exception as exc:
        return 503, {"status": "unavailable", "database": False, "error": type(exc).__name__}
    if not report.database:
        return 503, {"status": "unavailable", "database": False, "error": report.error}
    return 200, {
        "status": "ok" if report.ok else "degraded",
        "database": True,
        "workers_alive": len(report.alive),
        "queue_depth": report.queue_depth,
        "parked": report.parked,
        "stuck_runs": len(report.stuck_runs),
        "runs_on_unserved_versions": sum(report.unserved_versions.values()),
        "effect_findings_open": report.effects.get("open", 0),
        "workflow_findings_open": report.workflows.get("open", 0),
    }
