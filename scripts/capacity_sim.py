#!/usr/bin/env python3
"""Capacity simulation for docs/scaling.md: how many tickets a day one Postgres carries,
and whether a sharding plan (merchants assigned to Postgres clusters) keeps every shard
under its budget through a day's peaks.

Usage: python scripts/capacity_sim.py [--bench results.json] [--merchants N] [--shards K]
       [--tickets-per-day T] [--seed S]

Inputs are measured figures (``manage.py bench --json``; defaults are this repository's
last full bench run, see docs/benchmarks.md) — commits per run, the per-worker parked
cost — and a commit budget per Postgres, derived from what the bench saw Postgres spend
per commit. The day is simulated minute by minute: tickets arrive with a diurnal curve
(a peak hour at 2.5x the mean), merchant sizes follow a Zipf law, a share of runs park
at the approval gate for a log-normal wait, and each shard's commit rate and parked
count are tracked. Deterministic for a seed. No Django, no database: it is arithmetic
on measured numbers, and says so.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import dataclass, field

# Measured (docs/benchmarks.md, the run named there). Override with --bench.
DEFAULTS = {
    "commits_per_run": 62.0,  # one NW-2-like run: DBOS checkpoints + step rows + run row
    "commits_per_parked_run_hour": 1.0,  # the per-run recv re-check, hourly
    "sweep_commits_per_worker_hour": 120.0,  # one query per worker every 30 s
    "postgres_commits_per_core_s": 1500.0,  # what Postgres sustained per core in the bench
    "worker_runs_per_s": 8.0,  # one worker process, CPU-bound
}


@dataclass
class Shard:
    name: str
    merchants: list[int] = field(default_factory=list)
    daily: float = 0.0
    peak_commits_s: float = 0.0
    peak_parked: int = 0
    peak_workers: int = 0


def zipf_sizes(n: int, total: float, s: float = 1.1) -> list[float]:
    weights = [1 / (i**s) for i in range(1, n + 1)]
    norm = sum(weights)
    return [total * w / norm for w in weights]


def diurnal(minute: int) -> float:
    """Relative arrival rate over a day: mean 1, peak 2.5 at 14:00, trough 0.2 at 03:00."""
    x = math.cos((minute / 1440 - 14 / 24) * 2 * math.pi)
    return 0.2 + (x + 1) / 2 * 2.3


def assign(sizes: list[float], k: int) -> list[Shard]:
    """Greedy: the biggest merchant first, onto the shard with the least volume so far."""
    shards = [Shard(f"pg-{i + 1}") for i in range(k)]
    for m in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        target = min(shards, key=lambda s: s.daily)
        target.merchants.append(m)
        target.daily += sizes[m]
    return shards


def simulate(args: argparse.Namespace, f: dict[str, float]) -> tuple[list[Shard], dict[str, float]]:
    rng = random.Random(args.seed)
    sizes = zipf_sizes(args.merchants, args.tickets_per_day)
    shards = assign(sizes, args.shards)
    norm = sum(diurnal(m) for m in range(1440)) / 1440
    budget = f["postgres_commits_per_core_s"] * args.cores_per_shard * args.utilisation
    for shard in shards:
        waiting: list[float] = []  # minutes at which parked runs are decided
        for minute in range(1440):
            rate = shard.daily / 1440 * diurnal(minute) / norm  # tickets this minute
            arrivals = rng.gauss(rate, math.sqrt(rate)) if rate > 0 else 0
            arrivals = max(0, round(arrivals))
            for _ in range(arrivals):
                if rng.random() < args.approval_share:
                    wait = rng.lognormvariate(math.log(args.approval_wait_min), 1.0)
                    waiting.append(minute + wait)
            waiting = [t for t in waiting if t > minute]
            workers = max(1, math.ceil(arrivals / 60 / f["worker_runs_per_s"] / 0.7))
            commits = (
                arrivals * f["commits_per_run"] / 60
                + len(waiting) * f["commits_per_parked_run_hour"] / 3600
                + workers * f["sweep_commits_per_worker_hour"] / 3600
            )
            shard.peak_commits_s = max(shard.peak_commits_s, commits)
            shard.peak_parked = max(shard.peak_parked, len(waiting))
            shard.peak_workers = max(shard.peak_workers, workers)
    one_pg = budget / f["commits_per_run"] * 86400 / 2.5  # tickets/day at the peak-hour rate
    return shards, {"budget_commits_s": budget, "tickets_per_day_one_postgres": one_pg}


QUICK_OPERATIONS = 11  # a QUICK load run: one read, two model turns (bench's fleet bursts)


def from_bench(m: dict) -> dict[str, float]:
    """A support run (NW-2: six model calls, five tools) from the bench's measured QUICK runs,
    scaled by DBOS operations (each operation is a checkpoint commit plus its step's own)."""
    scale = float(m.get("nw2_dbos_steps") or 32) / QUICK_OPERATIONS
    out: dict[str, float] = {}
    if m.get("commits_per_quick_run"):
        out["commits_per_run"] = round(float(m["commits_per_quick_run"]) * scale, 1)
    if m.get("postgres_commits_per_core_s"):
        out["postgres_commits_per_core_s"] = float(m["postgres_commits_per_core_s"])
    if m.get("runs_per_s_1_worker"):
        out["worker_runs_per_s"] = round(float(m["runs_per_s_1_worker"]) / scale, 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", help="bench --json output (its last line) to take figures from")
    p.add_argument("--merchants", type=int, default=400)
    p.add_argument("--shards", type=int, default=3)
    p.add_argument("--tickets-per-day", type=float, default=1_500_000)
    p.add_argument("--approval-share", type=float, default=0.3)
    p.add_argument("--approval-wait-min", type=float, default=45.0, help="median wait for a person")
    p.add_argument("--cores-per-shard", type=float, default=8.0)
    p.add_argument("--utilisation", type=float, default=0.6, help="share of the budget to plan for")
    p.add_argument("--seed", type=int, default=13)
    args = p.parse_args()
    figures = dict(DEFAULTS)
    if args.bench:
        with open(args.bench) as fh:
            figures.update(from_bench(json.loads(fh.read().strip().splitlines()[-1])))
    shards, model = simulate(args, figures)
    print(f"figures: {json.dumps(figures)}")
    print(
        f"one Postgres ({args.cores_per_shard:g} cores at {args.utilisation:.0%}): budget"
        f" {model['budget_commits_s']:.0f} commits/s → about"
        f" {model['tickets_per_day_one_postgres']:,.0f} tickets/day with a 2.5x peak hour"
    )
    print(
        f"{args.tickets_per_day:,.0f} tickets/day, {args.merchants} merchants (Zipf), "
        f"{args.approval_share:.0%} wait for a person (median {args.approval_wait_min:g} min), "
        f"{args.shards} shards:"
    )
    print("shard  merchants  tickets/day  peak commits/s  budget use  peak parked  peak workers")
    for s in shards:
        use = s.peak_commits_s / model["budget_commits_s"]
        print(
            f"{s.name:<6} {len(s.merchants):>9}  {s.daily:>11,.0f}  {s.peak_commits_s:>14.0f}"
            f"  {use:>9.0%}  {s.peak_parked:>11,}  {s.peak_workers:>12}"
            + ("   OVER BUDGET" if use > 1 else "")
        )


if __name__ == "__main__":
    main()
