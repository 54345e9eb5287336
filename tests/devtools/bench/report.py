"""``bench --write-docs``: the default run's section of docs/benchmarks.md, and its chart.

The page is a reference: how to run the bench (by hand, kept), then the default run's section
— every figure with what it times, its latest value and its target, written whole from one
run beside the floor measured in it — then the focused runs (``--loop``, ``--peers``,
``--inbound``, …), written by hand from their own runs and kept as they are. What the
numbers mean for capacity is argued in docs/scaling.md, by hand.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

# The default run's figures, in the order the page lists them: (label, the result keys it
# shows, what it times). A label with several keys shows their values in that order.
FIGURES: list[tuple[str, tuple[str, ...], str]] = [
    (
        "floor_insert_commit_ms",
        ("floor_insert_commit_ms",),
        "One single-row INSERT + COMMIT over psycopg on its own connection (median): the machine's floor.",
    ),
    (
        "bare_dbos_step_ms",
        ("bare_dbos_step_ms",),
        "One no-op `DBOS.run_step` inside a sync workflow, call to return (median).",
    ),
    ("bare_step_over_floor", ("bare_step_over_floor",), "`bare_dbos_step_ms` ÷ the floor."),
    (
        "agent_step_ms / _p95_ms",
        ("agent_step_ms", "agent_step_p95_ms"),
        "One no-op step through `deskhand.engine.workflow.DBOSRuntime.step` inside an async workflow — the very path every agent step takes: the lease gate, a thread hop, Django's connection check, the checkpoint (median, p95).",
    ),
    (
        "step_overhead_ratio",
        ("step_overhead_ratio",),
        "`agent_step_ms` ÷ `bare_dbos_step_ms`, the samples of each taken in alternating rounds (`STEP_ROUNDS`).",
    ),
    (
        "dbos_steps_per_agent_step",
        ("dbos_steps_per_agent_step",),
        "One NW-2 run on the keyless policy model: DBOS operations it checkpointed (`nw2_dbos_steps`) ÷ its step-log rows (`nw2_step_rows`); its operations by name are listed under the table.",
    ),
    (
        "nw2_dbos_steps / _step_rows / _status",
        ("nw2_dbos_steps", "nw2_step_rows", "nw2_status"),
        "The two counts of that ratio, and how the run ended.",
    ),
    (
        "nw2_wall_ms",
        ("nw2_wall_ms",),
        "That NW-2 run: its first step's start → its last step's end (DBOS's step clock).",
    ),
    (
        "commits_per_run",
        ("commits_per_run",),
        "That NW-2 run: transactions that wrote (transaction ids taken), the idle executor's own over the same time subtracted.",
    ),
    (
        "idle_worker_cpu_pct",
        ("idle_worker_cpu_pct",),
        "The executor process's CPU over the idle window (`idle_window_s`) with nothing to do.",
    ),
    (
        "enqueue_to_first_step_p50/p95_ms",
        ("enqueue_to_first_step_p50_ms", "enqueue_to_first_step_p95_ms"),
        "Idle worker, one run at a time arriving at a random point of the queue poll: the workflow row's `created_at` → its first step's start.",
    ),
    (
        "webhook_to_ticket_stored_p50/p95_ms",
        ("webhook_to_ticket_stored_p50_ms", "webhook_to_ticket_stored_p95_ms"),
        "A real `manage.py web` on a free port: a signed help-desk `ticket.created` sent → its `201` received (the answer follows the commit that stores the ticket and its thread line), one at a time (`--api` of them).",
    ),
    (
        "api_run_to_first_step_p50/p95_ms",
        ("api_run_to_first_step_p50_ms", "api_run_to_first_step_p95_ms"),
        "The same web process, the in-process executor idle: `POST /api/v1/runs` sent → the run's first step started (DBOS's step clock), one QUICK run at a time arriving at a random point of the queue poll.",
    ),
    (
        "runs_per_s_direct / _queue",
        ("runs_per_s_direct", "runs_per_s_queue"),
        "N QUICK runs (one read, then done; `--runs`) started with `DBOS.start_workflow`, or enqueued on `deskhand-runs`: N ÷ first start → last finished.",
    ),
    ("queue_over_direct", ("queue_over_direct",), "`runs_per_s_queue` ÷ `runs_per_s_direct`."),
    (
        "parked_runs",
        ("parked_runs",),
        "The largest `--parked` level: runs waiting at the approval gate in the bench's executor while the figures below are taken (every level: the table under this one).",
    ),
    (
        "park_rate_per_s",
        ("park_rate_per_s",),
        "Runs brought to the gate a second while parking the first level, all parking processes together.",
    ),
    (
        "parked_threads / _rss_mb / _idle_cpu_pct",
        ("parked_threads", "parked_rss_mb", "parked_idle_cpu_pct"),
        "The executor process with `parked_runs` waiting at the gate, once it has settled (two 5-s slices in a row under a tenth of a core: replays and the collection of what parking left belong to parking): OS threads, RSS, CPU over the idle window; the table's `idle_gc_s` is the part of it spent in Python's garbage collector.",
    ),
    (
        "parked_idle_commits_per_s",
        ("parked_idle_commits_per_s",),
        "Commits a second on the server over that idle window.",
    ),
    (
        "approval_wake_p50/p95_ms",
        ("approval_wake_p50_ms", "approval_wake_p95_ms"),
        "With `parked_runs` waiting: `approval_decide` called → that run's `DBOS.recv` returned (DBOS's step clock), one run at a time (`--wake` of them).",
    ),
    (
        "crew_handover_s",
        ("crew_handover_s",),
        "With `--park-workers K`: the runs are parked through K worker processes beside the executor, which are then SIGKILLed; per level, seconds until the executor holds every run again, as a takeover would.",
    ),
    (
        "customer_parked_threads / _rss_mb / _idle_cpu_pct",
        ("customer_parked_threads", "customer_parked_rss_mb", "customer_parked_idle_cpu_pct"),
        "`--customers`: the same executor and levels, measured before the approval series, with `customer_parked_runs` waiting on a customer's answer (each asked `ask_customer`, approved by its merchant's rule, and waits in `DBOS.recv` on the ticket's topic); settled and averaged as above. The customer runs still waiting are answered (`customer_release_s`) before the approval series starts.",
    ),
    (
        "customer_over_approval_cpu_top",
        ("customer_over_approval_cpu_top",),
        "`--customers`: idle CPU parked on customers ÷ parked on approvals at the top level (`customer_over_approval_cpu`: level by level).",
    ),
    (
        "customer_reply_to_next_step_p50/p95_ms",
        ("customer_reply_to_next_step_p50_ms", "customer_reply_to_next_step_p95_ms"),
        "`--customers`: the customer's answer stored (`thread_customer_message_add`, its commit and the routing after it included) → the run's next step (`customer.read`, which finds the answer) committed, DBOS's step clock, one run at a time. `customer_wake_p50/p95_ms`: → the run's `DBOS.recv` returned, as `approval_wake` times it.",
    ),
    (
        "runs_per_s_1_worker / _2_workers",
        ("runs_per_s_1_worker", "runs_per_s_2_workers"),
        "A burst of N queued QUICK runs executed by one, then two, `manage.py worker` processes.",
    ),
    (
        "two_workers_over_one",
        ("two_workers_over_one",),
        "`runs_per_s_2_workers` ÷ `runs_per_s_1_worker`.",
    ),
    (
        "workers_cpu_cores_1 / _2",
        ("workers_cpu_cores_1", "workers_cpu_cores_2"),
        "Cores the worker processes used during each burst (their CPU seconds ÷ its wall time).",
    ),
    (
        "postgres_cpu_cores_1 / _2",
        ("postgres_cpu_cores_1", "postgres_cpu_cores_2"),
        "Cores the server's processes used during each burst.",
    ),
    (
        "commits_per_quick_run",
        ("commits_per_quick_run",),
        "Commits on the server during the two-worker burst ÷ its runs.",
    ),
    (
        "postgres_commits_per_core_s",
        ("postgres_commits_per_core_s",),
        "The two-worker burst's commits a second ÷ the cores the server used: what one server core commits a second under this load.",
    ),
    (
        "restart_parked_runs / restart_ready_s",
        ("restart_parked_runs", "restart_ready_s"),
        "Every run the in-process phase left parked is PENDING under its executor id (as after a SIGKILL); a worker with that id starts: how many it recovers, and seconds from its start to its ready line.",
    ),
    (
        "restart_decision_s",
        ("restart_decision_s",),
        "Five of those runs are decided while nothing runs: the worker's ready line → the last of those decisions took effect (the run's next step committed).",
    ),
    (
        "restart_all_handed_back_s",
        ("restart_all_handed_back_s",),
        "Ready → no run left staged or enqueued.",
    ),
    (
        "worker_parked_runs / _settled",
        ("worker_parked_runs", "worker_parked_settled"),
        "After that restart, a real `manage.py worker` holds every run the in-process phase left parked; whether it settled (two 5-s slices in a row under a tenth of a core) before the idle window.",
    ),
    (
        "worker_parked_threads / _rss_mb / _idle_cpu_pct",
        ("worker_parked_threads", "worker_parked_rss_mb", "worker_parked_idle_cpu_pct"),
        "That worker, settled: OS threads, RSS, CPU over the idle window. Includes what the in-process figures leave out: the lease heartbeat, the takeover scan, the reconciler.",
    ),
    (
        "worker_parked_idle_commits_per_s",
        ("worker_parked_idle_commits_per_s",),
        "Commits a second on the server over that idle window.",
    ),
    (
        "kill_to_resume_s / restart_to_ready_s",
        ("kill_to_resume_s", "restart_to_ready_s"),
        "SIGKILL of the worker holding a parked run, the decision sent while it is down, the same worker restarted: kill → the run's next step committed (NOTIFY received). Includes starting Python, Django and DBOS (`restart_to_ready_s` of it: restart → ready line).",
    ),
    (
        "takeover_s",
        ("takeover_s",),
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


DEFAULT_RUN = "## The default run"
KEPT_FROM = "## Focused runs"  # from here on the page is written by hand, and kept
PARKED_ON_CUSTOMERS = "### Parked on customers, by level"


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


def _value(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return "—" if value is None else str(value)


def _row(r: dict[str, Any], label: str, keys: tuple[str, ...], text: str) -> str:
    limits = {key: (op, limit) for key, op, limit in TARGETS}
    latest = " / ".join(_value(r[k]) for k in keys if k in r) or "not in this run"
    target = "; ".join(
        f"{f'`{k}` ' if len(keys) > 1 else ''}{limits[k][0]} {limits[k][1]:g}:"
        f" {verdict(r.get(k), *limits[k])}"
        for k in keys
        if k in limits
    )
    return f"| `{label}` | {text} | {latest} | {target or '—'} |"


def section(r: dict[str, Any], command: str, date: str, chart_name: str | None) -> list[str]:
    """The default run's section: its conditions, every figure, the parked levels."""
    m = r["machine"]
    settings_used = (
        f"queue poll {r.get('queue_poll_s')} s, takeover grace {r.get('takeover_grace_s')} s,"
        f" heartbeat {r.get('heartbeat_s')} s, per-run recv re-check {r.get('recv_recheck_s')} s,"
        f" worker sweep {r.get('recv_sweep_s')} s, `CONN_MAX_AGE` {r.get('conn_max_age')};"
        f" each idle figure averaged over {r.get('idle_window_s', '?')} s"
    )
    lines = [
        DEFAULT_RUN,
        "",
        f"Latest values: `{command}` on {date}, {r.get('wall_s', 0) / 60:.1f} min on"
        f" {m['cores']} cores ({m['cpu']}), {m['ram_gb']} GB RAM, {r.get('postgres', '?')},"
        f" Python {m['python']}, dbos {r.get('dbos', '?')}; load average {m['load_1m']} at the"
        f" start and {r.get('load_end', '?')} at the end. It ran with {settings_used}; its plan:"
        f" `{r.get('plan')}`. A figure `not in this run` is measured by the options named in"
        " its line, or was added to the bench after this run.",
        "",
        "| figure | what it times | latest | target |",
        "| --- | --- | --- | --- |",
    ]
    lines += [_row(r, label, keys, text) for label, keys, text in FIGURES]
    operations = r.get("nw2_operations") or {}
    if operations:
        lines += [
            "",
            "NW-2's DBOS operations by name: "
            + ", ".join(f"{k} {v}" for k, v in sorted(operations.items()))
            + ".",
        ]
    lines += [
        "",
        "### Parked runs, by level",
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
    lines += customer_section(r)
    if chart_name:
        lines += ["", f"![Wake latency and idle cost against parked runs]({chart_name})"]
    return lines


def write(results: dict[str, Any], docs: Path, command: str) -> list[Path]:
    """Replace the page's default-run section (keeping what comes before and after it)."""
    png = docs / "benchmarks-parked.png"
    drew = chart(results, png)
    page = docs / "benchmarks.md"
    text = page.read_text() if page.exists() else "# Benchmarks\n\n"
    kept = text[text.index(KEPT_FROM) :] if KEPT_FROM in text else ""
    head = text[: text.index(DEFAULT_RUN)] if DEFAULT_RUN in text else text[: len(text) - len(kept)]
    lines = section(results, command, dt.date.today().isoformat(), png.name if drew else None)
    page.write_text(head + "\n".join(lines) + "\n" + ("\n" + kept if kept else ""))
    return [page, png] if drew else [page]
