"""``bench --write-docs``: docs/benchmarks.md and its chart, from one run's figures.

The page is generated whole: every number on it comes from the run that wrote it, next to
the floor measured in that same run. What the numbers mean for capacity is argued in
docs/scaling.md, by hand.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

DEFINITIONS = [
    (
        "floor_insert_commit_ms",
        "One single-row INSERT + COMMIT over psycopg on its own connection (median): the machine's floor.",
    ),
    (
        "bare_dbos_step_ms",
        "One no-op `DBOS.run_step` inside a sync workflow, call to return (median).",
    ),
    (
        "agent_step_ms",
        "One no-op step through `deskhand.dbos.engine.workflow.DBOSRuntime.step` inside an async workflow — the very path every agent step takes: the lease gate, a thread hop, Django's connection check, the checkpoint (median).",
    ),
    (
        "step_overhead_ratio",
        "`agent_step_ms` ÷ `bare_dbos_step_ms`, the samples of each taken in alternating rounds (`STEP_ROUNDS`).",
    ),
    (
        "dbos_steps_per_agent_step",
        "One NW-2 run on the keyless policy model: DBOS operations it checkpointed ÷ its step-log rows.",
    ),
    (
        "approval_wake_p50/p95_ms",
        "With `parked_runs` waiting: `approval_decide` called → that run's `DBOS.recv` returned (DBOS's step clock), one run at a time.",
    ),
    (
        "enqueue_to_first_step_p50/p95_ms",
        "Idle worker, one run at a time arriving at a random point of the queue poll: the workflow row's `created_at` → its first step's start.",
    ),
    (
        "webhook_to_ticket_stored_p50/p95_ms",
        "A real `manage.py web` on a free port: a signed help-desk `ticket.created` sent → its `201` received (the answer follows the commit that stores the ticket and its thread line), one at a time.",
    ),
    (
        "api_run_to_first_step_p50/p95_ms",
        "The same web process, the in-process executor idle: `POST /api/v1/runs` sent → the run's first step started (DBOS's step clock), one QUICK run at a time arriving at a random point of the queue poll.",
    ),
    (
        "idle_worker_cpu_pct",
        "The executor process's CPU over the idle window (`idle_window_s`) with nothing to do.",
    ),
    (
        "runs_per_s_direct / _queue",
        "N QUICK runs (one read, then done) started with `DBOS.start_workflow`, or enqueued on `deskhand-runs`: N ÷ first start → last finished.",
    ),
    (
        "runs_per_s_1_worker / _2_workers",
        "A burst of N queued QUICK runs executed by one, then two, `manage.py worker` processes.",
    ),
    (
        "parked_threads / _rss_mb / _idle_cpu_pct",
        "The executor process with `parked_runs` waiting at the gate, once it has settled (two 5-s slices in a row under a tenth of a core: replays and the collection of what parking left belong to parking): OS threads, RSS, CPU over the idle window; `idle_gc_s` is the part of it spent in Python's garbage collector.",
    ),
    (
        "customer_parked_threads / _rss_mb / _idle_cpu_pct",
        "`bench --customers`: the same executor and levels, measured before the approval series, with `customer_parked_runs` waiting on a customer's answer (each asked `ask_customer`, approved by its merchant's rule, and waits in `DBOS.recv` on the ticket's topic); settled and averaged as above. `customer_over_approval_cpu`: its idle CPU ÷ the approval series' at the same level (both from the printed figures). The customer runs still waiting are answered (`customer_release_s`) before the approval series starts.",
    ),
    (
        "customer_reply_to_next_step_p50/p95_ms",
        "With `customer_parked_runs` waiting: the customer's answer stored (`thread_customer_message_add`, its commit and the routing after it included) → the run's next step (`customer.read`, which finds the answer) committed, DBOS's step clock, one run at a time. `customer_wake_p50/p95_ms`: → the run's `DBOS.recv` returned, as `approval_wake` times it.",
    ),
    (
        "worker_parked_threads / _rss_mb / _idle_cpu_pct",
        "A real `manage.py worker` holding every run the in-process phase left parked (`worker_parked_runs`, after the restart below, once two 5-s slices in a row used under a tenth of a core): OS threads, RSS, CPU over the idle window. Includes what the in-process figures leave out: the lease heartbeat, the takeover scan, the reconciler.",
    ),
    (
        "kill_to_resume_s",
        "SIGKILL of the worker holding a parked run, the decision sent while it is down, the same worker restarted: kill → the run's next step committed (NOTIFY received). Includes starting Python, Django and DBOS.",
    ),
    (
        "restart_decision_s",
        "Every run the in-process phase left parked is PENDING under its executor id (as after a SIGKILL); five are decided while nothing runs; a worker with that id starts: its ready line → the last of those decisions took effect (the run's next step committed). `restart_all_handed_back_s`: ready → no run left staged or enqueued.",
    ),
    (
        "takeover_s",
        "A worker recorded as on another host is SIGKILLed: kill → a live worker has its parked run waiting again. Includes the grace period (`takeover_grace_s`).",
    ),
]

TARGETS = [
    ("step_overhead_ratio", "≤", 1.5),
    ("dbos_steps_per_agent_step", "≤", 1.3),
    ("approval_wake_p95_ms", "≤", 50.0),
    ("enqueue_to_first_step_p95_ms", "≤", 150.0),
    ("idle_worker_cpu_pct", "≤", 5.0),
    ("queue_over_direct", "≥", 0.8),
    ("two_workers_over_one", "≥", 1.7),
    ("parked_threads", "≤", 64),
    ("parked_rss_mb", "≤", 512),
    ("parked_idle_cpu_pct", "≤", 5.0),
    ("customer_parked_idle_cpu_pct", "≤", 5.0),
    ("customer_over_approval_cpu_top", "≤", 1.25),
    ("customer_reply_to_next_step_p95_ms", "≤", 50.0),
    ("worker_parked_threads", "≤", 64),
    ("worker_parked_rss_mb", "≤", 512),
    ("worker_parked_idle_cpu_pct", "≤", 5.0),
    ("kill_to_resume_s", "≤", 3.0),
    ("restart_decision_s", "≤", 10.0),
    ("takeover_s", "≤", 30.0),
]


def verdict(value: Any, op: str, limit: float) -> str:
    if not isinstance(value, int | float):
        return "not measured"
    ok = value <= limit if op == "≤" else value >= limit
    return "met" if ok else "**not met**"


def chart(results: dict[str, Any], path: Path) -> bool:
    """Wake latency and idle cost against parked runs, as a PNG; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    series = results.get("parked_series") or []
    xs = [p["parked"] for p in series]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.plot(xs, [p["wake_p50_ms"] for p in series], "o-", label="wake p50")
    a.plot(xs, [p["wake_p95_ms"] for p in series], "s-", label="wake p95")
    a.axhline(50, color="grey", linestyle=":", label="target p95")
    a.set_xlabel("parked runs")
    a.set_ylabel("decide → recv returned (ms)")
    a.legend()
    b.plot(xs, [p["idle_cpu_pct"] for p in series], "o-", label="idle CPU (% of a core)")
    b.plot(xs, [p["idle_commits_per_s"] for p in series], "s-", label="commits/s")
    b.axhline(5, color="grey", linestyle=":", label="target CPU")
    b.set_xlabel("parked runs")
    b.legend()
    fig.suptitle(f"Parked runs, one worker ({results['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


COST_PER_STEP = "## Cost per step"
PARKED_ON_CUSTOMERS = "### Parked on customers"


def customer_section(r: dict[str, Any]) -> list[str]:
    """The customer-parked series beside the approval one (``bench --customers``)."""
    series = r.get("customer_parked_series") or []
    if not series:
        return []
    lines = [
        "",
        PARKED_ON_CUSTOMERS,
        "",
        "The same levels, measured first in the same run, with runs waiting on a customer's"
        " answer instead of a decision; idle CPU ÷ the approval series' at that level beside it.",
        "",
        "| parked | park rate /s | threads | RSS MB | idle CPU % | ÷ approvals | idle commits/s"
        " | answer → next step p50 ms | p95 ms | answer → recv p95 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    ratios = r.get("customer_over_approval_cpu") or []
    for i, p in enumerate(series):
        ratio = ratios[i] if i < len(ratios) else "—"
        lines.append(
            f"| {p['parked']} | {p['park_rate_per_s']} | {p['threads']} | {p['rss_mb']} |"
            f" {p['idle_cpu_pct']}{'' if p.get('settled', True) else ' (never settled)'} |"
            f" {ratio} | {p['idle_commits_per_s']} | {p['next_step_p50_ms']} |"
            f" {p['next_step_p95_ms']} | {p['wake_p95_ms']} |"
        )
    return lines


def write(results: dict[str, Any], docs: Path, command: str) -> list[Path]:
    png = docs / "benchmarks-parked.png"
    drew = chart(results, png)
    m = results["machine"]
    r = results
    lines = [
        "# Benchmarks: what durability and the fleet cost",
        "",
        f"Written by `{command}` on {dt.date.today().isoformat()} — every figure below comes",
        "from that one run, beside the machine's floor measured in it. Rerun before comparing:",
        "the machine is shared and the numbers move with its load. What they mean for capacity",
        "is in [scaling.md](scaling.md).",
        "",
        "```sh",
        "python manage.py bench --quick          # under five minutes, nothing written",
        "python manage.py bench --json           # the last line is one JSON object",
        "python manage.py bench --write-docs     # the full run, rewrites this page and its chart",
        "```",
        "",
        "## The machine",
        "",
        f"{m['cores']} cores ({m['cpu']}), {m['ram_gb']} GB RAM, {r.get('postgres', '?')},"
        f" Python {m['python']}, dbos {r.get('dbos', '?')}; load average {m['load_1m']} at the"
        f" start and {r.get('load_end', '?')} at the end (other engineers' suites share it).",
        f"Bench wall time {r.get('wall_s', 0) / 60:.1f} min. Queue poll {r.get('queue_poll_s')} s,"
        f" takeover grace {r.get('takeover_grace_s')} s, heartbeat {r.get('heartbeat_s')} s,"
        f" per-run recv re-check {r.get('recv_recheck_s')} s, worker sweep {r.get('recv_sweep_s')} s;"
        f" each idle figure averaged over {r.get('idle_window_s', '?')} s.",
        "",
        "## Targets",
        "",
        "| figure | this run | target | |",
        "| --- | --- | --- | --- |",
    ]
    for key, op, limit in TARGETS:
        lines.append(
            f"| `{key}` | {r.get(key)} | {op} {limit:g} | {verdict(r.get(key), op, limit)} |"
        )
    lines += [
        "",
        "## Every figure",
        "",
        "| figure | value |",
        "| --- | --- |",
    ]
    for key, value in r.items():
        if key in ("parked_series", "customer_parked_series", "machine", "nw2_operations"):
            continue
        lines.append(f"| `{key}` | {value} |")
    lines += [
        "",
        f"NW-2's DBOS operations by name: {', '.join(f'{k} {v}' for k, v in sorted(r.get('nw2_operations', {}).items()))}.",
        "",
        "## Parked runs, by how many wait",
        "",
        "| parked | park rate /s | threads | RSS MB | idle CPU % | of it, collector s | idle commits/s | wake p50 ms | wake p95 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in r.get("parked_series", []):
        lines.append(
            f"| {p['parked']} | {p['park_rate_per_s']} | {p['threads']} | {p['rss_mb']} |"
            f" {p['idle_cpu_pct']}{'' if p.get('settled', True) else ' (never settled)'} |"
            f" {p.get('idle_gc_s', '—')} | {p['idle_commits_per_s']} | {p['wake_p50_ms']} | {p['wake_p95_ms']} |"
        )
    if r.get("park_workers"):
        k = r["park_workers"]
        lines += [
            "",
            f"Parked through {k} worker process{'es' if k > 1 else ''} beside the bench's own"
            f" executor (`--park-workers {k}`), which then recovered and held every run, as a"
            " takeover would; seconds from their SIGKILL until it held all of them, per level:"
            f" {r.get('crew_handover_s')}. The park rate counts all the parking processes.",
        ]
    lines += customer_section(r)
    if drew:
        lines += ["", f"![Wake latency and idle cost against parked runs]({png.name})"]
    lines += ["", "## What each figure times", ""]
    lines += [f"- `{k}` — {d}" for k, d in DEFINITIONS]
    lines.append("")
    page = docs / "benchmarks.md"
    # The cost-per-step section (its profile, and `bench --peers`) is written by hand from
    # its own runs: kept as it is.
    kept = page.read_text().partition(COST_PER_STEP)[2] if page.exists() else ""
    if kept:
        lines += ["", COST_PER_STEP + kept.rstrip("\n"), ""]
    page.write_text("\n".join(lines))
    return [page, png] if drew else [page]
