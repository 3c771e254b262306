"""What a burst of job changes costs the jobs informer's lister (issue 37, goal 7).

    sunk-dev run python -m benchmarks.job_bursts --spawn --jobs 10000 --rounds 5
    python -m benchmarks.job_bursts --synthetic --jobs 50000 --rounds 5 --bursts 100,400,2500,5000

A cluster of ``--jobs`` held jobs, ``--own`` of them placeholders of the scheduler "bench" (their
identity in AdminComment), is read by three job-only caches, each synced before the bursts:

- ``scheduler``: as sunk-scheduler reads it now (``keep_job``: its placeholders only; one read at a time);
- ``every job``: as the Syncer reads it now (every job; reads eight at a time);
- ``before``: every job, one read at a time (both daemons before this change).

Each round cancels, at once, ``B`` other tenants' jobs for each ``--bursts`` size, then ``--own-burst``
placeholders; after each burst every cache refreshes once (in an order that rotates by round), and
the refresh's seconds and Slurm calls are recorded. A cancelled job stays listed (MinJobAge), so the
next burst changes other jobs. Printed: per burst and cache, the rounds' figures, their medians, and
the ratios to ``before`` in each round (median and range).

``--spawn``: the second slurmctld and slurmrestd in the dev chroot that ``benchmarks.slurm_client``
starts (1000 nodes without slurmd, held jobs), never the dev cluster's own; ``--synthetic``: the
in-process stand-in (``sunk_dev.fakeslurm``) in a child process, filled as a busy cluster.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, Optional

from benchmarks.slurm_client import spawned, synthetic
from sunk.model.slurm import Job, JobRequest
from sunk.slurm import SlurmCache, SlurmClient, connect
from sunk.translate.identity import identity_of

SCHEDULER = "bench"
HELD = "#!/bin/bash\nsleep 3600\n"


def ours(job: Job) -> bool:
    identity = identity_of(job)
    return identity is not None and identity.scheduler == SCHEDULER


CACHES: dict[str, dict[str, Any]] = {
    "scheduler": {"keep_job": ours, "read_workers": 1},
    "every job": {"read_workers": 8},
    "before": {"read_workers": 1},
}


def new_cache(client: SlurmClient, options: dict[str, Any]) -> SlurmCache:
    cache = SlurmCache(client, kinds=("job",), interval=1.0, resync_every=3600, job_full_every=3600,
                       job_states=True, job_check_after=float("inf"), **options)
    result = cache.refresh()
    assert result.ok, result.error
    return cache


def submit_placeholders(client: SlurmClient, count: int) -> list[int]:
    def submit(i: int) -> int:
        return client.submit_job(JobRequest(
            name=f"bench-placeholder-{i}", script=HELD, priority=0, time_limit=60,
            admin_comment=f"sunk-pod=bench-uid-{i} ns=bench name=pod-{i} sched={SCHEDULER}"))

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(submit, range(count)))


def cancel_all(client: SlurmClient, job_ids: Sequence[int]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(client.cancel_job, job_ids))


def rounds(url: str, token: str, *, own: int, bursts: Sequence[int], own_burst: int, count: int,
           seed: int) -> dict[str, Any]:
    client = connect("rest", url=url, token=token, read_timeout=300)
    placeholders = submit_placeholders(client, own)
    time.sleep(1.1)
    listed = client.list_jobs().items or ()
    theirs = [job.id for job in listed if job.state == "PENDING" and not ours(job)]
    need = count * sum(bursts)
    if len(theirs) < need or own < count * own_burst:
        raise SystemExit(f"{len(theirs)} pending jobs of others and {own} placeholders: the rounds need {need} "
                         f"and {count * own_burst}")
    rng = random.Random(seed)
    rng.shuffle(theirs)
    caches = {name: new_cache(connect("rest", url=url, token=token, read_timeout=300), options)
              for name, options in CACHES.items()}
    names = list(caches)
    figures: dict[str, dict[str, list[tuple[float, int]]]] = {}
    try:
        for index in range(count):
            order = names[index % len(names):] + names[:index % len(names)]
            plan = [(f"{size} other tenants' jobs", [theirs.pop() for _ in range(size)]) for size in bursts]
            plan.append((f"{own_burst} placeholders", [placeholders.pop() for _ in range(own_burst)]))
            for burst, job_ids in plan:
                cancel_all(client, job_ids)
                time.sleep(1.05)  # (what a poll interval would leave between the burst and the refresh)
                for name in order:
                    result = caches[name].refresh()
                    assert result.ok, result.error
                    figures.setdefault(burst, {}).setdefault(name, []).append((result.seconds, result.calls))
                    print(f"round {index + 1} {burst}: {name} {result.seconds:.3f} s, {result.calls} calls",
                          file=sys.stderr, flush=True)
    finally:
        cancel_all(client, placeholders)
    return {"jobs_listed": len(listed), "own": own, "rounds": count,
            "bursts": {burst: summarise(by_cache) for burst, by_cache in figures.items()}}


def summarise(by_cache: dict[str, list[tuple[float, int]]]) -> dict[str, Any]:
    before = by_cache["before"]
    out: dict[str, Any] = {}
    for name, rows in by_cache.items():
        ratios = [seconds / base[0] for (seconds, _calls), base in zip(rows, before, strict=True) if base[0] > 0]
        out[name] = {"seconds": [round(s, 3) for s, _ in rows], "calls": [c for _, c in rows],
                     "median_seconds": round(statistics.median(s for s, _ in rows), 3),
                     "median_calls": statistics.median(c for _, c in rows),
                     "ratio_to_before_median": round(statistics.median(ratios), 3) if ratios else None,
                     "ratio_to_before_range": [round(min(ratios), 3), round(max(ratios), 3)] if ratios else None}
    return out


def target(args: argparse.Namespace) -> AbstractContextManager[tuple[str, str, str, int]]:
    if args.spawn:
        return spawned(args.nodes, args.jobs)
    return synthetic(args.nodes, args.jobs, 0.0)  # (all pending: a burst cancels them)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--spawn", action="store_true")
    mode.add_argument("--synthetic", action="store_true")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--own", type=int, default=200, help="placeholders of the scheduler among them")
    parser.add_argument("--bursts", default="100,400,1000", help="sizes of the other tenants' bursts")
    parser.add_argument("--own-burst", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    bursts = [int(size) for size in args.bursts.split(",") if size]
    if args.rounds < 1 or not bursts or min(bursts) < 1 or args.own_burst < 1:
        parser.error("--rounds, the --bursts and --own-burst must be at least 1")
    if args.rounds * sum(bursts) > args.jobs or args.rounds * args.own_burst > args.own:
        parser.error(f"{args.rounds} rounds cancel {args.rounds * sum(bursts)} of the --jobs ({args.jobs}) and "
                     f"{args.rounds * args.own_burst} of the --own ({args.own}): give more, or smaller bursts")
    with target(args) as (url, token, _node, _job):
        out = rounds(url, token, own=args.own, bursts=bursts, own_burst=args.own_burst, count=args.rounds,
                     seed=args.seed)
    json.dump(out, sys.stdout)
    print()
    print(table(out))
    return 0


def table(out: dict[str, Any]) -> str:
    """The figures as docs/benchmarks.md shows them: per burst and cache, medians, and the ratio to before."""
    lines = ["| burst | cache | median s | rounds' s | calls (median) | ÷ before: median (range) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for burst, by_cache in out["bursts"].items():
        for name, row in by_cache.items():
            low, high = row["ratio_to_before_range"] or (None, None)
            lines.append(f"| {burst} | {name} | {row['median_seconds']} | {', '.join(map(str, row['seconds']))} | "
                         f"{row['median_calls']:g} | {row['ratio_to_before_median']} ({low}-{high}) |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
