"""Pre-hook latency on an already-locked node, under 100 concurrent callers.

    python -m benchmarks.hooks [--callers 100] [--rounds 10]

What a prolog pays when its node is already locked (another job runs there): the
pre-hook records its lock request on the slurmd Pod, then waits until the informer shows
that request beside a satisfying lock. Each round, ``callers`` threads call pre-hook at the
same instant (a barrier); then (untimed) their post-hooks remove the requests. Latency is
measured at the client, per call. A pre-hook counts only for a job that Slurm shows holding
the node, so the callers name real jobs: up to 60 one-CPU ``sleep`` jobs on the node, shared
round-robin when there are more callers. The Syncer checks the job cache-first: its Slurm
cache answers when it shows the job on the node, and only a job it does not show there is
read from Slurm at once. These jobs run before the rounds start, so the timed calls are
answered from the cache and make no Slurm read (a real prolog's job, allocated a moment
ago, usually costs one).

It runs the real ``sunk-syncer`` (gunicorn, its default thread count), limited to the
slurmd Pods of node3 and node4. Runs against the dev cluster (`sunk-dev up`), on node3; it locks node3 with a plain
``sleep`` job (no prolog needed: the controller locks any node that runs a job).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from benchmarks.scheduler import cpu_seconds, machine_cpu_seconds
from sunk.hooks.auth import node_token
from sunk.kube import client as kc
from sunk.kube.resources import PODS
from sunk_dev.cluster import DevCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))  # the cluster tests' helpers
from locking_harness import (
    SyncerProcess,
    clean_up,
    label_slurmd_pods,
    lock_value,
    new_token,
    wait_for,
)

NODE = "node3"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run_rounds(url: str, token: str, jobs: list[int], callers: int,
               rounds: int) -> tuple[list[float], dict[int | str, int]]:
    latencies: list[float] = []
    statuses: dict[int | str, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(callers)
    headers = {"Authorization": f"Bearer {token}"}

    def caller(index: int) -> None:
        # A connection per call, as the prolog's curl makes: a kept-alive one would be closed by the
        # server while this thread waits at the barrier (gunicorn's keep-alive is 2 s), and reused.
        job_id = jobs[index % len(jobs)]
        for _ in range(rounds):
            barrier.wait()
            started = time.perf_counter()
            try:
                resp = requests.post(f"{url}/api/v1/nodes/{NODE}/pre-hook", json={"job_id": job_id, "timeout": 30},
                                     headers=headers, timeout=60)
                status: int | str = resp.status_code
            except requests.RequestException as exc:  # counted, not fatal: the barrier needs every caller
                status = type(exc).__name__
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                statuses[status] = statuses.get(status, 0) + 1
            barrier.wait()
            try:
                requests.post(f"{url}/api/v1/nodes/{NODE}/post-hook", json={"job_id": job_id}, headers=headers,
                              timeout=60)
            except requests.RequestException:
                with lock:
                    statuses["post-hook failed"] = statuses.get("post-hook failed", 0) + 1

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--callers", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    cluster = DevCluster.for_tests()
    with cluster.claimed("benchmarks/hooks.py"):
        return run(cluster, args)


def run(cluster: DevCluster, args: argparse.Namespace) -> int:
    cluster.up()
    api = kc.load_api_client(str(cluster.kubeconfig))
    work = Path(tempfile.mkdtemp(prefix="sunk-bench-hooks-"))
    token = new_token()
    token_file = work / "token"
    token_file.write_text(token)
    node_token_ = node_token(token.encode(), NODE)  # what NODE's prolog presents
    label_slurmd_pods(api, "true")
    lease = "sunk-syncer-bench"
    syncer = SyncerProcess(cluster, token_file, work, ["--zap-log-level=warning"], lease=lease)
    url = syncer.url
    jobs: list[int] = []
    try:
        syncer.start()
        for _ in range(min(args.callers, 60)):
            out = cluster.slurm("sbatch", "--parsable", "-w", NODE, "-c", "1", "--mem=64M", "-o", "/dev/null",
                                "--wrap", "sleep 900")
            jobs.append(int(out.stdout.strip().split(";")[0]))
        wait_for(lambda: len(cluster.slurm("squeue", "-h", "-t", "R", "-w", NODE, "-o", "%i").stdout.split())
                 >= len(jobs), 60, f"{len(jobs)} jobs running on {NODE}")
        wait_for(lambda: lock_value(kc.get(api, PODS, NODE, "slurm")) in ("locked", "locked_strict"), 60,
                 f"{NODE} locked")  # (strict if another test's placeholder job holds it: enough for these calls)
        run_rounds(url, node_token_, jobs, min(args.callers, 20), 1)  # warm-up: connections, code paths
        assert syncer.proc is not None
        server_cpu, client_cpu, machine_cpu = cpu_seconds(syncer.proc.pid), time.process_time(), machine_cpu_seconds()
        started = time.perf_counter()
        latencies, statuses = run_rounds(url, node_token_, jobs, args.callers, args.rounds)
        wall = time.perf_counter() - started
        # What limits a burst on this machine: the CPU each call costs (pre-hook and its untimed
        # post-hook, in the Syncer and in this client), against the cores there are.
        server_cpu = cpu_seconds(syncer.proc.pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
        machine_cpu = machine_cpu_seconds() - machine_cpu
    finally:
        if jobs:
            cluster.slurm("scancel", *map(str, jobs), check=False)
        syncer.stop()
        label_slurmd_pods(api, None)
        clean_up(api, cluster, lease)
    result = {
        "callers": args.callers,
        "calls": len(latencies),
        "statuses": statuses,
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p90_ms": round(percentile(latencies, 90) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "max_ms": round(max(latencies) * 1000, 1),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 1),
        "pre_hooks_per_s_incl_cleanup": round(len(latencies) / wall, 1),
        # per pre-hook, its post-hook included
        "syncer_cpu_ms_per_call": round(server_cpu / len(latencies) * 1000, 2),
        "client_cpu_ms_per_call": round(client_cpu / len(latencies) * 1000, 2),
        "machine_cpu_ms_per_call": round(machine_cpu / len(latencies) * 1000, 2),
        "cores": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    return 0 if set(statuses) == {200} else 1


if __name__ == "__main__":
    sys.exit(main())
