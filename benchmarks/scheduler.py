"""Pods through sunk-scheduler vs the same placeholder jobs straight into Slurm.

    python -m benchmarks.scheduler --pods 200

Pod path: N Pods created at once; time until all are bound, and each Pod's
creation-to-binding latency (client clock at create, watch event at binding).
Raw path: N identical placeholder jobs POSTed to slurmrestd; time until all are RUNNING
and marked ": started". The ratio of the two is sunk's overhead; Slurm calls per Pod are
the scheduler's own calls, from its /metrics (slurm_controller_rpc_count).
Runs against the dev cluster (`sunk-dev up`); needs nothing else running.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from sunk import names
from sunk.dev.cluster import DevCluster
from sunk.kube import client as kc
from sunk.kube.informer import Informer
from sunk.kube.resources import PODS
from tests.cluster.kube_testns import create_namespace, purge_namespace
from tests.cluster.procs import Process, secret_file

SCHEDULER = "sunk-bench"
PORTS = {"hooks": 19100, "metrics": 19180, "probes": 19181}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}]}}


def rpc_counts(metrics_url: str) -> dict[str, float]:
    text = requests.get(metrics_url, timeout=5).text
    return {s.labels["message_type"]: s.value for f in text_string_to_metric_families(text)
            if f.name == "slurm_controller_rpc_count" for s in f.samples}


def pod_path(cluster: DevCluster, api, namespace: str, count: int, metrics_url: str) -> dict:
    bound_at: dict[str, float] = {}
    created_at: dict[str, float] = {}
    done = threading.Event()
    lock = threading.Lock()

    def seen(obj: dict) -> None:
        name = obj["metadata"]["name"]
        with lock:
            if obj["spec"].get("nodeName") and name not in bound_at:
                bound_at[name] = time.time()
                if len(bound_at) == count:
                    done.set()

    # The project's informer, not a bare watch: it survives a broken stream (a bare watch once
    # died silently under load and the run waited for bindings it had missed).
    informer = Informer(api, PODS, namespace=namespace, name="bench-pods")
    informer.add_handler(on_add=seen, on_update=lambda _old, new: seen(new))
    informer.start()
    if not informer.wait_for_sync(30):
        raise SystemExit("the Pod informer did not sync in 30 s")
    before = rpc_counts(metrics_url)
    names_ = [f"b-{i:04d}" for i in range(count)]
    began = time.time()

    def create(name: str) -> None:
        created_at[name] = time.time()
        kc.create(api, PODS, pod(name), namespace)

    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, names_))
        if not done.wait(600):
            raise SystemExit(f"only {len(bound_at)} of {count} Pods bound in 600 s")
    finally:
        informer.stop()
    total = max(bound_at.values()) - began
    after = rpc_counts(metrics_url)
    latencies = [bound_at[n] - created_at[n] for n in names_]
    calls = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    return {"total_s": total, "p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99),
            "slurm_calls": calls, "slurm_calls_per_pod": sum(calls.values()) / count}


# The placeholder's start, without its SIGTERM contract (there is no Pod to wait for):
# the same submission, the same "started" marking, so the two paths differ only by sunk.
RAW_SCRIPT = """#!/bin/bash
scontrol update jobid="$SLURM_JOB_ID" extra="$SUNK_EXTRA: started" || exit 1
exec sleep 3600
"""


def raw_path(cluster: DevCluster, count: int) -> dict:
    """Identical placeholder jobs submitted straight to slurmrestd, until all run and are started."""
    from sunk.slurm import connect
    from sunk.slurm.models import JobRequest

    rest = cluster.slurm_rest
    slurm = connect("rest", url=rest.url, token=rest.token, user=rest.user)
    script = RAW_SCRIPT
    ids: list[int] = []
    began = time.time()

    def submit(i: int) -> int:
        extra = f"bench-raw-{uuid.uuid4().hex}"
        return slurm.submit_job(JobRequest(
            name=f"raw-{i}", script=script, cpus_per_task=1, memory_per_node=256, extra=extra, requeue=False,
            environment=("PATH=/usr/sbin:/usr/bin:/sbin:/bin", f"SUNK_EXTRA={extra}")))

    with ThreadPoolExecutor(16) as pool:
        ids = list(pool.map(submit, range(count)))
    wanted = set(ids)
    while True:
        jobs = slurm.list_jobs().items or ()
        started = {j.id for j in jobs if j.id in wanted and j.state == "RUNNING"
                   and j.extra.endswith(names.STARTED_MARKER)}
        if started == wanted:
            break
        if time.time() - began > 600:
            raise SystemExit(f"only {len(started)} of {count} raw jobs started in 600 s")
        time.sleep(0.1)
    total = time.time() - began
    for job_id in ids:
        slurm.cancel_job(job_id)
    return {"total_s": total}


def drain_pods(cluster: DevCluster, api, namespace: str) -> None:
    """Delete the Pods while the scheduler still runs, so it cancels their jobs."""
    for obj in kc.list_objects(api, PODS, namespace):
        kc.delete(api, PODS, obj["metadata"]["name"], namespace)
    deadline = time.time() + 120
    while time.time() < deadline:
        if not cluster.slurm("squeue", "-h", "-t", "PD,R,CG", "-o", "%i").stdout.split():
            return
        time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8, help="the scheduler's --workers")
    args = parser.parse_args(argv)
    cluster = DevCluster.for_tests()
    cluster.up()
    from sunk.kube.client import load_api_client

    api = load_api_client(str(cluster.kubeconfig))
    namespace = create_namespace(api)
    tmp = Path(tempfile.mkdtemp(prefix="sunk-bench-"))
    env = cluster.env()
    scheduler = Process("sunk-scheduler", "scheduler.cli", [
        f"--scheduler-name={SCHEDULER}", "--scope=namespace", f"--watch-namespace={namespace}",
        f"--kubeconfig={env['KUBECONFIG']}", f"--slurm-api-base={env['SLURM_REST_URL']}",
        f"--slurm-auth-token-file={env['SLURM_JWT_FILE']}", "--slurm-kill-wait=30s",
        f"--hooks-api-bind-address=127.0.0.1:{PORTS['hooks']}", f"--hooks-url=http://127.0.0.1:{PORTS['hooks']}",
        f"--hook-secret-file={secret_file(cluster.run_dir, 'test-hook.secret')}",
        f"--metrics-bind-address=127.0.0.1:{PORTS['metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{PORTS['probes']}",
        f"--leader-election-namespace={namespace}", "--zap-log-level=info", f"--workers={args.workers}",
    ], ready_url=f"http://127.0.0.1:{PORTS['probes']}/readyz", log_dir=tmp)
    try:
        raw = raw_path(cluster, args.pods)
        time.sleep(5)  # let the raw jobs' nodes drain of COMPLETING jobs
        scheduler.start()
        pods = pod_path(cluster, api, namespace, args.pods, f"http://127.0.0.1:{PORTS['metrics']}/metrics")
    finally:
        # Always while the scheduler still runs: it cancels the jobs of deleted Pods. Stopped
        # first, each placeholder would wait for its Pod past KillWait and drain its node.
        if scheduler.proc is not None:
            drain_pods(cluster, api, namespace)
        scheduler.stop()
        purge_namespace(api, namespace)
    result = {"pods": args.pods, "workers": args.workers, "raw": raw, "pod_path": pods,
              "ratio": pods["total_s"] / raw["total_s"]}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
