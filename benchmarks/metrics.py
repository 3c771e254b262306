"""Scrape time and memory of the Slurm metrics table at 5000 nodes and 50,000 jobs.

    python -m benchmarks.metrics [--nodes 5000] [--jobs 50000] [--running 0.6] [--repeat 10]

A synthetic snapshot, shaped like slurmrestd's answers: nodes with 8 GPUs in two
partitions; jobs spread over users, accounts and partitions, ``--running`` of them running
on one or two nodes with per-node allocations (so each has cpus/gpus/uptime series per
node), the rest pending or finished. One scrape is what /metrics does for the table:
``SlurmMetrics.render()`` and the encoding to bytes. It reads only memory, so this is the
whole cost of a scrape; no Slurm is involved.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import time
import tracemalloc
from typing import Any

from sunk.metrics.collector import DiagPoller, SlurmMetrics
from sunk.slurm.models import Job, JobAllocation, Node, RpcStat, SchedulerStats

STATES = ("PENDING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT")


def synthetic(n_nodes: int, n_jobs: int, running: float, seed: int = 7) -> tuple[dict[str, Node], dict[int, Job]]:
    rng = random.Random(seed)
    nodes = {}
    for i in range(n_nodes):
        name = f"gpu{i:05d}"
        alloc = rng.choice((0, 16, 64, 128))
        state = "IDLE" if alloc == 0 else ("ALLOCATED" if alloc == 128 else "MIXED")
        if rng.random() < 0.02:
            state += "+DRAIN"
        nodes[name] = Node(name, state=state, cpus=128, alloc_cpus=alloc, real_memory=2_000_000,
                           alloc_memory=alloc * 8000, gres="gpu:h100:8(S:0-1)",
                           gres_used=f"gpu:h100:{alloc // 16}(IDX:0-{max(0, alloc // 16 - 1)})",
                           partitions=("gpu", f"rack{i // 64}"))
    names = list(nodes)
    now = int(time.time())
    jobs = {}
    for job_id in range(1, n_jobs + 1):
        common: dict[str, Any] = dict(name=f"train-{job_id % 977}", user_name=f"user{job_id % 200}",
                                      account=f"acct{job_id % 40}", partition=rng.choice(("gpu", "gpu", "batch")))
        if rng.random() < running:
            hosts = rng.sample(names, rng.choice((1, 1, 1, 2)))
            jobs[job_id] = Job(job_id, state="RUNNING", nodes=",".join(hosts), start_time=now - rng.randrange(86400),
                               allocations=tuple(JobAllocation(h, cpus=16, memory=128000, gpus=1) for h in hosts),
                               **common)
        else:
            jobs[job_id] = Job(job_id, state=rng.choice(STATES), **common)
    return nodes, jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--running", type=float, default=0.6)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    nodes, jobs = synthetic(args.nodes, args.jobs, args.running)
    diag = DiagPoller(lambda: SchedulerStats(server_thread_count=3, jobs_submitted=args.jobs), interval=15)
    diag.poll()
    table = SlurmMetrics(nodes=lambda: nodes, jobs=lambda: jobs, diag=diag,
                               rpc_stats=lambda: {"REQUEST_JOB_INFO": RpcStat("REQUEST_JOB_INFO", 10, 1.2)},
                               freshness=lambda: {"node": True, "job": True})

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, size = [], 0
    for _ in range(args.repeat):
        started = time.perf_counter()
        body = table.render().encode()
        times.append(time.perf_counter() - started)
        size = len(body)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    tracemalloc.start()
    table.render()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times.sort()
    print(json.dumps({
        "nodes": args.nodes, "jobs": args.jobs, "running_jobs": sum(j.state == "RUNNING" for j in jobs.values()),
        "series": series, "body_mb": round(size / 1e6, 1),
        "scrape_p50_s": round(statistics.median(times), 3), "scrape_max_s": round(times[-1], 3),
        "scrape_peak_alloc_mb": round(peak / 1e6, 1),
        "process_max_rss_mb": round(rss_after / 1024, 1), "rss_growth_during_scrapes_mb": round(
            (rss_after - rss_before) / 1024, 1),
    }, indent=2))


if __name__ == "__main__":
    main()
