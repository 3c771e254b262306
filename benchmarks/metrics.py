"""Scrape time and memory of the Slurm metrics table at 5000 nodes and 50,000 jobs.

    python -m benchmarks.metrics [--nodes 5000] [--jobs 50000] [--running 0.6] [--repeat 10]
    python -m benchmarks.metrics --compare [--repeat 10] [--changed-jobs 0.01] [--changed-nodes 0.001]

A synthetic snapshot, shaped like slurmrestd's answers: nodes with 8 GPUs in two
partitions; jobs spread over users, accounts and partitions, ``--running`` of them running
on one or two nodes with per-node allocations (so each has cpus/gpus/uptime series per
node), the rest pending or finished. It reads only memory, so this is the whole cost of a
scrape; no Slurm is involved.

Without ``--compare``: the incremental renderer's bytes as /metrics takes them (below), on a
snapshot that never changes (so every scrape after the first reuses every line it can).

``--compare`` measures the full renderer (``render(SlurmMetrics.families())``, every series
every scrape: the renderer before issue 22) and the incremental one (``SlurmMetrics.pieces()``)
in one run, on the same snapshots, each in its own forked process (so one's memory is not the
other's). A scrape is what /metrics does with the table, for either: the source registered
with ``sunk.controller.textsources`` and its bytes taken from ``textsources.body()`` chunk by
chunk (the full renderer's text is encoded whole, the incremental one's pieces are joined a
group at a time), each chunk dropped where /metrics writes it to the socket. Three scenarios,
``--repeat`` scrapes each after a first one:

- ``steady``: between two scrapes ``--changed-jobs`` of the jobs change (nine in ten change
  state, one in ten ends and leaves and a new job comes), as the Slurm job cache hands them
  out (unchanged jobs keep their objects); ``--changed-nodes`` of the nodes change, and every
  node is a new (equal) object, as after the node cache's list.
- ``relisted``: every job and node is a new object equal to the last (a full job list).
- ``all_changed``: every job and node differs from the last scrape (the worst case).

Per renderer and scenario: the first scrape (the incremental one renders everything then),
p50 and max of the others; memory from tracemalloc (the peak above what the process held
before its first scrape, and what the renderer still holds after the last one) and from
the process's RSS (VmHWM after /proc/self/clear_refs: its peak growth during the scrapes).
Each scenario's snapshots are built in a process of its own before its renderers' processes
fork from it, so neither renderer pays for them. RSS figures depend on what the heap had free
at the fork; tracemalloc's are exact.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Optional

import attrs

from sunk.controller import textsources
from sunk.metrics.collector import DiagPoller, SlurmMetrics
from sunk.metrics.exposition import render
from sunk.model.slurm import Job, JobAllocation, Node, RpcStat, SchedulerStats

RPCS = (RpcStat("REQUEST_JOB_INFO", 10, 1.2),)  # slurmctld's RPC statistics, as diag lists them

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


Snapshot = tuple[Mapping[str, Node], Mapping[int, Job]]


def changed_job(job: Job, rng: random.Random, names: list[str], now: int) -> Job:
    """The job after a state change: a running job ends, any other starts on one node."""
    if job.state == "RUNNING":
        return attrs.evolve(job, state="COMPLETED", end_time=now)
    host = rng.choice(names)
    return attrs.evolve(job, state="RUNNING", nodes=host, start_time=now,
                        allocations=(JobAllocation(host, cpus=16, memory=128000, gpus=1),))


def changed_node(node: Node) -> Node:
    alloc = 0 if node.alloc_cpus else 16
    return attrs.evolve(node, alloc_cpus=alloc, alloc_memory=alloc * 8000,
                        state="IDLE" if alloc == 0 else "MIXED", gres_used=f"gpu:h100:{alloc // 16}")


def scenario(name: str, nodes: dict[str, Node], jobs: dict[int, Job], scrapes: int, changed_jobs: float,
             changed_nodes: float, seed: int = 11) -> list[Snapshot]:
    """The snapshot each of ``scrapes`` scrapes sees, built up front."""
    rng = random.Random(seed)
    names = list(nodes)
    now = int(time.time())
    if name == "relisted":
        copies = ({k: attrs.evolve(n) for k, n in nodes.items()}, {k: attrs.evolve(j) for k, j in jobs.items()})
        return [(nodes, jobs) if i % 2 == 0 else copies for i in range(scrapes)]
    if name == "all_changed":
        other = ({k: changed_node(n) for k, n in nodes.items()},
                 {k: attrs.evolve(j, name=j.name + "-b") for k, j in jobs.items()})
        return [(nodes, jobs) if i % 2 == 0 else other for i in range(scrapes)]
    assert name == "steady", name
    out: list[Snapshot] = [(nodes, jobs)]
    next_id = max(jobs, default=0) + 1
    for _ in range(scrapes - 1):
        last_nodes, last_jobs = out[-1]
        new_jobs = dict(last_jobs)
        for job_id in rng.sample(list(new_jobs), round(len(new_jobs) * changed_jobs)):
            job = new_jobs[job_id]
            if rng.random() < 0.1:  # it ends and leaves; a new job is submitted
                del new_jobs[job_id]
                new_jobs[next_id] = attrs.evolve(job, id=next_id, state="PENDING", nodes="", allocations=(),
                                                 start_time=None)
                next_id += 1
            else:
                new_jobs[job_id] = changed_job(job, rng, names, now)
        new_nodes = {k: attrs.evolve(n) for k, n in last_nodes.items()}  # a node list: every object new
        for name_ in rng.sample(names, round(len(names) * changed_nodes)):
            new_nodes[name_] = changed_node(new_nodes[name_])
        out.append((new_nodes, new_jobs))
    return out


def _proc_status() -> dict[str, float]:
    """VmRSS and VmHWM in MB (Linux)."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024
    return found


def _in_child(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()`` in a forked process, its answer back through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            answer = json.dumps(work()).encode()
        except BaseException as exc:  # report, never return into the parent's code
            answer = json.dumps({"error": repr(exc)}).encode()
        with os.fdopen(write, "wb") as out:
            out.write(answer)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as source:
        answer = source.read()
    os.waitpid(pid, 0)
    return json.loads(answer)


def _table(current: list[Snapshot], stats: SchedulerStats) -> SlurmMetrics:
    diag = DiagPoller(lambda: stats, interval=15)
    diag.poll()
    return SlurmMetrics(nodes=lambda: current[0][0], jobs=lambda: current[0][1], diag=diag,
                        freshness=lambda: {"node": True, "job": True})


def _scrapes(renderer: str, snapshots: list[Snapshot], stats: SchedulerStats, traced: bool) -> dict[str, Any]:
    """Every snapshot scraped once by ``renderer``: times and RSS, or (``traced``) tracemalloc figures."""
    current = [snapshots[0]]
    table = _table(current, stats)
    if renderer == "full":
        textsources.register_text("slurm", lambda: render(table.families()))
    else:
        textsources.register_text("slurm", table.pieces)

    def scrape() -> int:
        """What /metrics does for the table: its bytes, chunk by chunk, to a socket (here: dropped)."""
        length, chunks = textsources.body()
        for chunk in chunks:
            del chunk
        return length

    times, peaks = [], []
    rss: Optional[dict[str, float]] = None
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # VmHWM := VmRSS
        rss = _proc_status()
    except OSError:
        pass
    if traced:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if traced else 0
    for snapshot in snapshots:
        current[0] = snapshot
        if traced:
            tracemalloc.reset_peak()
        started = time.perf_counter()
        scrape()
        times.append(time.perf_counter() - started)
        if traced:
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
    if traced:
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        return {"peak_alloc_first_mb": round(peaks[0] / 1e6, 1), "peak_alloc_mb": round(max(peaks[1:]) / 1e6, 1),
                "held_after_mb": round(held / 1e6, 1)}
    rest = sorted(times[1:])
    out = {"first_s": round(times[0], 3), "p50_s": round(statistics.median(rest), 3), "max_s": round(rest[-1], 3),
           "renders": [table.table.job_renders, table.table.node_renders] if renderer == "incremental" else None}
    if rss is not None:
        after = _proc_status()
        out.update(rss_peak_growth_mb=round(after["VmHWM"] - rss["VmRSS"], 1),
                   rss_held_after_mb=round(after["VmRSS"] - rss["VmRSS"], 1))
    return out


def _same_bytes(snapshots: list[Snapshot], stats: SchedulerStats) -> dict[str, Any]:
    """The first three scrapes of both renderers, on one clock (uptime), compared."""
    current = [snapshots[0]]
    full, incremental = _table(current, stats), _table(current, stats)
    now = time.time()
    full._clock = incremental._clock = lambda: now
    for snapshot in snapshots[:3]:
        current[0] = snapshot
        if render(full.families()) != incremental.render():
            return {"same_bytes": False}
    return {"same_bytes": True}


def _scenario(name: str, nodes: dict[str, Node], jobs: dict[int, Job], stats: SchedulerStats,
              args: argparse.Namespace) -> dict[str, Any]:
    """One scenario's figures: its snapshots built here, each renderer scraping them in a process of its own."""
    snapshots = scenario(name, nodes, jobs, args.repeat + 1, args.changed_jobs, args.changed_nodes)
    figures: dict[str, Any] = dict(_in_child(partial(_same_bytes, snapshots, stats)))
    for renderer in ("full", "incremental"):
        timed = _in_child(partial(_scrapes, renderer, snapshots, stats, traced=False))
        traced = _in_child(partial(_scrapes, renderer, snapshots[:4], stats, traced=True))
        figures[renderer] = {**timed, **traced}
    return figures


def compare(args: argparse.Namespace) -> None:
    nodes, jobs = synthetic(args.nodes, args.jobs, args.running)
    stats = SchedulerStats(server_thread_count=3, jobs_submitted=args.jobs, rpcs=RPCS)
    results: dict[str, Any] = {"nodes": args.nodes, "jobs": args.jobs, "scrapes": args.repeat + 1,
                               "changed_jobs": args.changed_jobs, "changed_nodes": args.changed_nodes}
    for name in ("steady", "relisted", "all_changed"):
        # In a process of its own, so no scenario starts with the memory another one freed.
        results[name] = _in_child(partial(_scenario, name, nodes, jobs, stats, args))
    print(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--running", type=float, default=0.6)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--compare", action="store_true",
                        help="the full and the incremental renderer side by side, in three scenarios")
    parser.add_argument("--changed-jobs", type=float, default=0.01, help="--compare steady: jobs changed per scrape")
    parser.add_argument("--changed-nodes", type=float, default=0.001,
                        help="--compare steady: nodes changed per scrape")
    args = parser.parse_args()
    if args.compare:
        compare(args)
        return

    nodes, jobs = synthetic(args.nodes, args.jobs, args.running)
    diag = DiagPoller(lambda: SchedulerStats(server_thread_count=3, jobs_submitted=args.jobs, rpcs=RPCS), interval=15)
    diag.poll()
    table = SlurmMetrics(nodes=lambda: nodes, jobs=lambda: jobs, diag=diag,
                         freshness=lambda: {"node": True, "job": True})

    textsources.register_text("slurm", table.pieces)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, size = [], 0
    for _ in range(args.repeat):
        started = time.perf_counter()
        size, chunks = textsources.body()  # what /metrics does; each chunk is written to the socket there
        for chunk in chunks:
            del chunk
        times.append(time.perf_counter() - started)
    series = sum(1 for line in table.render().splitlines() if line and not line.startswith("#"))
    tracemalloc.start()
    for chunk in textsources.body()[1]:
        del chunk
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
