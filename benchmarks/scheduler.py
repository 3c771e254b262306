"""Pods through sunk-scheduler vs the same placeholder jobs straight into Slurm.

    python -m benchmarks.scheduler --pods 200

Pod path: N Pods created at once; time until all are bound, and each Pod's
creation-to-binding latency (client clock at create, watch event at binding).
Raw path: N identical placeholder jobs POSTed to slurmrestd; time until all are RUNNING
and marked ": started". The ratio of the two is sunk's overhead; Slurm calls per Pod are
the scheduler's own calls, from its /metrics (sunk_scheduler_slurm_requests_total).
Runs against the dev cluster (`sunk-dev up`); needs nothing else running.

benchmarks/gangs.py runs the same two paths with gangs (Jobs whose Pods Slurm places as one
job of N nodes): the paths here take a Workload (what one unit is) and a node count per job.
"""

from __future__ import annotations

import argparse
import calendar
import http.server
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from sunk.kube import client as kc
from sunk.kube.informer import Informer
from sunk.kube.resources import EVENTS, PODS, Resource
from sunk_dev.cluster import DevCluster
from sunk_dev.procs import Daemon
from tests.cluster.kube_testns import create_namespace, delete_jobs, purge_namespace
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


@dataclass(frozen=True)
class Workload:
    """What the Pod path creates: units, each done once its ``size`` Pods are all bound.

    A unit is one bare Pod here; in benchmarks/gangs.py a batch/v1 Job whose Pods the Job
    controller makes and the scheduler places as one gang. Each unit is timed from just
    before its create call to the binding of its last Pod.
    """

    noun: str  # "pod", "gang": names the per-unit figures ("slurm_calls_per_pod")
    size: int  # Pods per unit, and nodes per raw job
    prefix: str  # unit names: f"{prefix}-0000", ...
    create: Callable[[Any, str, str], object]  # (api, namespace, unit name)
    unit_of: Callable[[dict], str | None]  # the unit a Pod belongs to; None: not the benchmark's
    scheduler_flags: tuple[str, ...] = ()  # what the scheduler needs for these units
    custom_kinds: tuple[Resource, ...] = ()  # custom resources the units make: deleted before the namespace


SINGLE_PODS = Workload("pod", 1, "b", lambda api, namespace, name: kc.create(api, PODS, pod(name), namespace),
                       lambda obj: obj["metadata"]["name"])


def rpc_counts(metrics_url: str) -> dict[str, float]:
    text = requests.get(metrics_url, timeout=5).text
    return {s.labels["message_type"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "sunk_scheduler_slurm_requests_total"}


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its live children (the gunicorn worker), from /proc."""
    total, pending = 0.0, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while pending:
        current = pending.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) / tick
        pending.extend(int(c) for c in children)
    return total


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat): what a path cost in all."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


SLURM_DAEMONS = ("munged", "mariadb", "slurmdbd", "slurmctld", "slurmrestd")
KUBE_DAEMONS = ("etcd", "kube-apiserver", "kube-controller-manager", "kubelet")


def _set_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of the process; the processes it starts later inherit it."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:  # the daemon is gone
        return
    for task in tasks:
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, PermissionError):
            pass


@contextmanager
def pinned_cpus(cluster: DevCluster, enabled: bool) -> Iterator[dict]:
    """Slurm on one CPU, Kubernetes, sunk and this process on the others, as on a real cluster.

    On the dev machine every component shares its few CPUs, and both paths are CPU-bound
    (the CPUs are 100% busy while jobs start): the ratio then measures how much CPU the
    Kubernetes side burns, not how much latency sunk adds. On a real cluster slurmd runs on
    compute nodes and the control planes on machines of their own; this keeps the two
    sides off each other's CPU. Both paths run pinned, and the daemons are unpinned after.
    """
    everything = os.sched_getaffinity(0)
    if not enabled:
        yield {}
        return
    if len(everything) < 2:
        raise SystemExit("--pin-cpus needs at least two CPUs")
    slurm_cpus, kube_cpus = {max(everything)}, everything - {max(everything)}
    daemons = [Daemon(path.stem, (), cluster.run_dir) for path in (cluster.run_dir / "pids").glob("*.pid")]
    running = {pid: (slurm_cpus if d.name.startswith(SLURM_DAEMONS) else kube_cpus)
               for d in daemons if d.name.startswith(SLURM_DAEMONS + KUBE_DAEMONS) and (pid := d.pid())}
    # the stand-in nodes' slurmds, which the stand-in kubelet runs (set after it: they would inherit its CPUs)
    running.update({r.pid: slurm_cpus for r in cluster.kubelet_state.records() if r.alive()})
    try:
        for pid, cpus in running.items():
            _set_affinity(pid, cpus)
        os.sched_setaffinity(0, kube_cpus)  # this process and the scheduler it starts
        yield {"slurm_cpus": sorted(slurm_cpus), "kube_cpus": sorted(kube_cpus)}
    finally:
        os.sched_setaffinity(0, everything)
        for pid in running:
            _set_affinity(pid, everything)


def where_time_went(metrics_url: str) -> dict[str, float]:
    """Means from the scheduler's own histograms: which step of the pipeline is slow."""
    text = requests.get(metrics_url, timeout=5).text
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    wanted = {"sunk_reconcile_duration_seconds": "reconcile",
              "sunk_workqueue_queue_duration_seconds": "queue_wait",
              "sunk_hooks_request_duration_seconds": "hook"}
    for family in text_string_to_metric_families(text):
        if family.name == "sunk_scheduler_slurm_request_mean_duration_seconds":
            for s in family.samples:
                sums[f"slurm_{s.labels['message_type']}_mean_s"] = round(s.value, 4)
        if family.name not in wanted:
            continue
        for s in family.samples:
            label = wanted[family.name] + ("_" + s.labels["route"].rsplit("/", 1)[-1] if "route" in s.labels else "")
            if s.name.endswith("_sum"):
                sums[label] = sums.get(label, 0.0) + s.value
            elif s.name.endswith("_count"):
                counts[label] = counts.get(label, 0.0) + s.value
    means = {f"{k}_mean_s": round(v / counts[k], 4) for k, v in sums.items() if counts.get(k)}
    means.update({f"{k}_count": v for k, v in counts.items()})
    means.update({k: v for k, v in sums.items() if k.startswith("slurm_")})
    return dict(sorted(means.items()))


def utc_seconds(stamp: str) -> float:
    """``2026-11-25T04:23:19.920`` (a trailing Z or none; slurmctld's are local time, the same here, and
    only differences are used) as seconds since the epoch."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{fraction or 0}")


def _submitted(log: Path) -> Iterator[tuple[str, float, int]]:
    """(unit name, when, job id) for each submission in the scheduler's log (no Pod write marks it)."""
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        match = SUBMITTED.match(entry.get("msg", ""))
        if match:
            yield match.group(1), utc_seconds(entry["ts"]), int(match.group(2))


def submissions(log: Path) -> dict[str, float]:
    """Pod name (a gang's: its workload's name) -> when the scheduler submitted its job."""
    return {unit: at for unit, at, _job in _submitted(log)}


def submitted_jobs(log: Path) -> dict[str, int]:
    """Pod name (a gang's: its workload's name) -> the job the scheduler submitted for it (the last one)."""
    return {unit: job for unit, _at, job in _submitted(log)}


# A Pod's ("pod ns/name: ...") or a gang's ("Job ns/name (4 members): ...", scheduler/reconciler.py).
SUBMITTED = re.compile(r"(?:pod|Job|PodGroup) [^/\s]+/(\S+?)(?: \(\d+ members\))?: submitted placeholder job (\d+)")


# slurmctld's log (SlurmctldDebug=info): a submission, and the allocation by the main scheduler or by backfill.
_CTLD_LINE = re.compile(r"^\[(?P<ts>[0-9T:.-]+)\] (?:_slurm_rpc_submit_batch_job: JobId=(?P<submitted>\d+) "
                        r"|sched: Allocate JobId=(?P<allocated>\d+) "
                        r"|.*backfill: _start_job: Started JobId=(?P<backfilled>\d+) )")


def slurm_waits(log_text: str) -> tuple[dict[int, float], set[int]]:
    """How long each job submitted in ``log_text`` (a stretch of slurmctld's log) waited for Slurm to allocate
    it, by job id, and the jobs backfill started. slurmctld does not try a batch job as it is submitted: its
    main scheduler takes queued jobs at a tick of its background loop, at most every ``batch_sched_delay``
    (3 s) after its last pass, and backfill every ``bf_interval``. That wait is Slurm's, the same for both
    paths in kind, but its phase differs per round and per path."""
    submitted: dict[int, float] = {}
    allocated: dict[int, float] = {}
    backfilled: set[int] = set()
    for line in log_text.splitlines():
        if not (match := _CTLD_LINE.match(line)):
            continue
        at = utc_seconds(match["ts"])
        if match["submitted"]:
            submitted[int(match["submitted"])] = at
        elif job := match["allocated"] or match["backfilled"]:
            allocated.setdefault(int(job), at)
            if match["backfilled"]:
                backfilled.add(int(job))
    waits = {job: allocated[job] - at for job, at in submitted.items() if job in allocated}
    return waits, backfilled & submitted.keys()


def queue_figures(latencies: dict[int, float], waits: dict[int, float], backfilled: set[int]) -> dict[str, float]:
    """Slurm's queue wait of the path's jobs (``latencies``: per job id, the unit's whole time), and the rest
    of each unit's time without it: what the path itself took, whatever the phase of Slurm's passes."""
    jobs = [job for job in latencies if job in waits]
    if not jobs:
        return {}
    queued = [waits[job] for job in jobs]
    outside = [latencies[job] - waits[job] for job in jobs]
    return {"slurm_queue_p50_s": percentile(queued, 50), "slurm_queue_p99_s": percentile(queued, 99),
            "outside_queue_p50_s": percentile(outside, 50), "outside_queue_p99_s": percentile(outside, 99),
            "started_by_backfill": len(backfilled & set(jobs))}


class SlurmctldLog:
    """The stretch of slurmctld's log written while a path ran (``mark`` before, ``since_mark`` after)."""

    def __init__(self, cluster: DevCluster):
        self.path = cluster.root / "var/log/slurm/slurmctld.log"
        self.offset = 0

    def mark(self) -> None:
        try:
            self.offset = self.path.stat().st_size
        except OSError:
            self.offset = 0

    def since_mark(self) -> str:
        """The text after the mark; all of it if the log was started anew meanwhile; "" if unreadable."""
        try:
            with self.path.open("rb") as log:
                if os.fstat(log.fileno()).st_size >= self.offset:
                    log.seek(self.offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""


def settled_events(api, namespace: str, timeout: float = 60) -> Counter:
    """The scheduler's Events by reason, once their count stops growing (outside the timing).

    Its recorder posts them from one thread, so in a burst they trail the bindings by
    seconds; counted at the last binding, a shared-CPU run showed 27 of 200.
    """
    deadline, last = time.monotonic() + timeout, None
    while True:
        events = Counter(e.get("reason", "") for e in kc.list_objects(api, EVENTS, namespace)
                         if (e.get("source") or {}).get("component") == "sunk-scheduler"
                         or e.get("reportingComponent") == "sunk-scheduler")
        if events == last or time.monotonic() > deadline:
            return events
        last = events
        time.sleep(2)


def pod_path(cluster: DevCluster, api, namespace: str, count: int, metrics_url: str, scheduler_pid: int,
             scheduler_log: Path, workload: Workload = SINGLE_PODS, phase: float | None = None) -> dict:
    """``count`` units of ``workload`` created at once; done once every unit's Pods are all bound."""
    bound_at: dict[str, float] = {}  # per unit: when its last Pod was seen bound
    seen_at: dict[str, float] = {}  # per unit: when its last Pod was first seen (a Job's: made by its controller)
    created_at: dict[str, float] = {}
    pods_bound: dict[str, set[str]] = {}
    pods_seen: dict[str, set[str]] = {}
    done = threading.Event()
    lock = threading.Lock()

    lost: list[str] = []

    def deleted(obj: dict) -> None:
        if workload.unit_of(obj) is not None and not obj["spec"].get("nodeName"):
            lost.append(obj["metadata"]["name"])
            done.set()

    def seen(obj: dict) -> None:
        unit, name = workload.unit_of(obj), obj["metadata"]["name"]
        if unit is None:
            return
        now = time.time()
        with lock:
            members = pods_seen.setdefault(unit, set())
            if name not in members:
                members.add(name)
                if len(members) == workload.size:
                    seen_at[unit] = now
            members = pods_bound.setdefault(unit, set())
            if obj["spec"].get("nodeName") and name not in members:
                members.add(name)
                if len(members) == workload.size:
                    bound_at[unit] = now
                    if len(bound_at) == count:
                        done.set()

    # The project's informer, not a bare watch: it survives a broken stream (a bare watch once
    # died silently under load and the run waited for bindings it had missed).
    informer = Informer(api, PODS, namespace=namespace, name="bench-pods")
    informer.add_handler(on_add=seen, on_update=lambda _old, new: seen(new), on_delete=deleted)
    informer.start()
    if not informer.wait_for_sync(30):
        raise SystemExit("the Pod informer did not sync in 30 s")
    names_ = [f"{workload.prefix}-{i:04d}" for i in range(count)]
    start_at_phase(phase)  # (before the readings: the wait is nobody's cost)
    ctld = SlurmctldLog(cluster)
    ctld.mark()
    before = rpc_counts(metrics_url)
    cpu_before = cpu_seconds(scheduler_pid)
    machine_before = machine_cpu_seconds()
    began = time.time()

    def create(name: str) -> None:
        created_at[name] = time.time()
        workload.create(api, namespace, name)

    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, names_))
        all_created = time.time() - began
        if not done.wait(600):
            raise SystemExit(f"only {len(bound_at)} of {count} {workload.noun}s bound in 600 s")
        machine_cpu = machine_cpu_seconds() - machine_before
        if lost:
            raise SystemExit(f"{len(lost)} Pods were deleted before being bound (their jobs ended early); "
                             "see the scheduler's log")
    finally:
        informer.stop()
    cpu = cpu_seconds(scheduler_pid) - cpu_before
    total = max(bound_at.values()) - began
    after = rpc_counts(metrics_url)
    events = settled_events(api, namespace)  # after the counts: settling takes seconds of idle polls
    submitted_at = submissions(scheduler_log)
    job_of = submitted_jobs(scheduler_log)
    latencies = [bound_at[n] - created_at[n] for n in names_]
    to_submit = [submitted_at.get(n, bound_at[n]) - created_at[n] for n in names_]
    to_bind = [bound_at[n] - submitted_at.get(n, bound_at[n]) for n in names_]
    calls = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    result = {"total_s": total, "p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99),
              "create_to_submit_p50_s": percentile(to_submit, 50), "create_to_submit_p99_s": percentile(to_submit, 99),
              "submit_to_bind_p50_s": percentile(to_bind, 50), "submit_to_bind_p99_s": percentile(to_bind, 99),
              "all_created_s": all_created, "all_submitted_s": max(submitted_at.values(), default=began) - began,
              "slurm_calls": calls, f"slurm_calls_per_{workload.noun}": sum(calls.values()) / count,
              "scheduler_cpu_s": round(cpu, 2), "machine_cpu_s": round(machine_cpu, 1),
              "events_by_reason": dict(events),
              "scheduler_profile": where_time_went(metrics_url),
              **queue_figures({job_of[n]: bound_at[n] - created_at[n] for n in names_ if n in job_of},
                              *slurm_waits(ctld.since_mark()))}
    if workload.size > 1:  # the workload's controller making every Pod of a unit, then the rest
        to_seen = [seen_at[n] - created_at[n] for n in names_]
        seen_to_bind = [bound_at[n] - seen_at[n] for n in names_]
        result |= {"create_to_all_pods_p50_s": percentile(to_seen, 50),
                   "create_to_all_pods_p99_s": percentile(to_seen, 99),
                   "all_pods_to_bind_p50_s": percentile(seen_to_bind, 50),
                   "all_pods_to_bind_p99_s": percentile(seen_to_bind, 99)}
    return result


# The placeholder's start, without its SIGTERM contract (there is no Pod to wait for):
# the same submission, then the same kind of call out (curl, 3 s timeout) to say it
# started, here to this process rather than to the scheduler. The two
# paths then differ only by sunk, and the raw path is timed by those calls, not by
# polling job lists (which loaded slurmrestd and slurmctld with one list every 0.1 s).
RAW_SCRIPT = """#!/bin/bash
curl -sS -o /dev/null -m 3 -X POST "$BENCH_URL/$SLURM_JOB_ID" 2>/dev/null
exec sleep 3600
"""


class StartedCalls:
    """A tiny HTTP server that records when each raw job says it started."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self.changed = threading.Condition()
        calls = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                job_id = self.path.rstrip("/").rsplit("/", 1)[-1]
                if job_id.isdigit():
                    with calls.changed:
                        calls.at.setdefault(int(job_id), time.time())
                        calls.changed.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            # 200 jobs call at once: with the default listen backlog of 5, dropped connections
            # outlived curl's 3 s and a round waited for calls that never came (gunicorn's is 2048).
            request_queue_size = 2048

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/started"
        threading.Thread(target=self.server.serve_forever, name="raw-started", daemon=True).start()

    def wait_for(self, ids: set[int], timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: ids <= self.at.keys(), timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def raw_path(cluster: DevCluster, count: int, nodes: int = 1, phase: float | None = None) -> dict:
    """Identical placeholder jobs of ``nodes`` nodes (one CPU and 256 MB on each, as a Pod of ``pod``
    asks and a gang's job asks per member) submitted straight to slurmrestd, until all run and are
    started. Each job is timed from just before its submission to its started call, which its
    batch script makes from the first node of the allocation."""
    from sunk.model.slurm import JobRequest
    from sunk.slurm import connect

    rest = cluster.slurm_rest
    slurm = connect("rest", url=rest.url, token=rest.token, user=rest.user)
    calls = StartedCalls()
    ids: list[int] = []
    submitted_at: dict[int, float] = {}

    def submit(i: int) -> int:
        extra = f"bench-raw-{uuid.uuid4().hex}"
        at = time.time()
        job_id = slurm.submit_job(JobRequest(
            name=f"raw-{i}", script=RAW_SCRIPT, cpus_per_task=1, node_count=nodes, memory_per_node=256, extra=extra,
            requeue=False,
            environment=("PATH=/usr/sbin:/usr/bin:/sbin:/bin", f"BENCH_URL={calls.url}")))
        submitted_at[job_id] = at
        return job_id

    ctld = SlurmctldLog(cluster)
    try:
        start_at_phase(phase)
        ctld.mark()
        machine_before = machine_cpu_seconds()
        began = time.time()
        with ThreadPoolExecutor(16) as pool:
            ids = list(pool.map(submit, range(count)))
        all_submitted = time.time() - began
        wanted = set(ids)
        while not calls.wait_for(wanted, 2.0):
            # Every 2 s, not every call: only to fail fast on jobs that end before starting.
            jobs = [j for j in slurm.list_jobs().items or () if j.id in wanted]
            ended = {j.id: j.state for j in jobs if not j.active}
            if ended:
                raise SystemExit(f"{len(ended)} raw jobs ended before starting ({set(ended.values())}); "
                                 "see slurmctld.log and the slurmd logs")
            if time.time() - began > 600:
                running = sum(j.state == "RUNNING" for j in jobs)
                raise SystemExit(f"only {len(calls.at.keys() & wanted)} of {count} raw jobs called in within "
                                 f"600 s; Slurm shows {running} running")
        total = max(calls.at[i] for i in wanted) - began
        latencies = [calls.at[i] - submitted_at[i] for i in wanted]
        machine_cpu = machine_cpu_seconds() - machine_before
        # The calls are the jobs' word; Slurm's must agree (once, outside the timing).
        listed = {j.id: j for j in slurm.list_jobs().items or () if j.id in wanted}
        unmarked = [i for i in wanted if i not in listed or listed[i].state != "RUNNING"]
        if unmarked:
            raise SystemExit(f"{len(unmarked)} raw jobs called in but Slurm does not show them started")
        queued = ctld.since_mark()
    finally:
        calls.close()
        for job_id in ids:
            slurm.cancel_job(job_id)
    return {"total_s": total, "p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99),
            "all_submitted_s": all_submitted, "machine_cpu_s": round(machine_cpu, 1),
            **queue_figures({i: calls.at[i] - submitted_at[i] for i in wanted}, *slurm_waits(queued))}


# slurmctld takes queued batch jobs only at a tick of its background loop, at whole seconds of the wall
# clock, and at most every batch_sched_delay after that loop's last pass: a path that begins just before a
# tick has its jobs allocated at once, one that straddles a pass waits that much more. Slurm's default
# (3 s), which the dev cluster no longer has (0): so that a cluster with the default is measured fairly too.
BATCH_SCHED_DELAY = 3.0


def wait_for_idle_slurm(cluster: DevCluster, timeout: float = 120) -> None:
    """Until Slurm has no active job, then ``BATCH_SCHED_DELAY`` more: the last pass for the jobs that ended
    no longer holds back the next path's first submissions."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not cluster.slurm("squeue", "-h", "-t", "PD,R,CG", "-o", "%i").stdout.split():
            time.sleep(BATCH_SCHED_DELAY + 0.5)
            return
        time.sleep(1)
    raise SystemExit(f"Slurm still has active jobs after {timeout:.0f} s")


def start_at_phase(phase: float | None) -> None:
    """Sleep until the wall clock's second reaches ``phase`` (0 <= phase < 1; None: at once).

    Each round starts both paths at the same phase of Slurm's tick, and the rounds spread over the
    second (``round_phase``): a path no longer owes its ratio to where in the second it happened to begin.
    Unaligned, the raw path began at .84 to .99 of a second in each of seven rounds (right after the
    idle check, which the tick paces) and its jobs waited 0.04 to 0.18 s; the Pod path's, 0.3 to 2.2 s."""
    if phase is not None:
        time.sleep((phase - time.time()) % 1.0)


def round_phase(number: int, rounds: int) -> float:
    """Round ``number``'s phase of the second: the rounds spread evenly over it."""
    return (number % rounds) / rounds


def drain_pods(cluster: DevCluster, api, namespace: str) -> None:
    """Delete the Jobs, then the Pods, while the scheduler still runs, so it cancels their jobs.

    Jobs first (benchmarks/gangs.py), or their controller makes their Pods again. A Job's Pods
    carry its tracking finalizer, lifted here as tests/cluster/test_scheduler.py's end_pods does:
    a Pod left terminating would keep its placeholder waiting past KillWait, and it would drain
    its nodes for the next round.
    """
    delete_jobs(api, namespace)
    for obj in kc.list_objects(api, PODS, namespace):
        try:
            if obj["metadata"].get("finalizers"):
                kc.patch(api, PODS, obj["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace)
            kc.delete(api, PODS, obj["metadata"]["name"], namespace)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
    wait_for_idle_slurm(cluster)


def scheduler_process(cluster: DevCluster, namespace: str, workers: int, log_dir: Path,
                      tree: Path | None = None, slurm_url: str | None = None,
                      extra: tuple[str, ...] = (), backend: str = "rest") -> Process:
    """sunk-scheduler for the Pod path; from ``tree`` (another checkout) instead of this one when given.
    ``slurm_url``: slurmrestd's (default) or a relay's in front of it; ``extra``: more flags; ``backend``:
    ``pyslurm`` talks to slurmctld through libslurm (run under ``sunk-dev run`` on Slurm 25.11)."""
    env = cluster.env()
    slurm = (["--slurm-backend=pyslurm"] if backend == "pyslurm" else
             [f"--slurm-api-base={slurm_url or env['SLURM_REST_URL']}",
              f"--slurm-auth-token-file={env['SLURM_JWT_FILE']}"])
    # A checkout older than the layer folders has the command at scheduler/cli.py.
    module = "scheduler.cli" if tree and (tree / "scheduler" / "cli.py").is_file() else "sunk.commands.scheduler"
    return Process("sunk-scheduler", module, [
        f"--scheduler-name={SCHEDULER}", "--scope=namespace", f"--watch-namespace={namespace}",
        f"--kubeconfig={env['KUBECONFIG']}", *slurm, "--slurm-kill-wait=30s",
        f"--hooks-api-bind-address=127.0.0.1:{PORTS['hooks']}", f"--hooks-url=http://127.0.0.1:{PORTS['hooks']}",
        f"--hook-secret-file={secret_file(cluster.run_dir, 'test-hook.secret')}",
        f"--identity-policy={cluster.identity_policy_file()}",
        f"--metrics-bind-address=127.0.0.1:{PORTS['metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{PORTS['probes']}",
        f"--leader-election-namespace={namespace}", "--zap-log-level=info", f"--workers={workers}", *extra,
    ], ready_url=f"http://127.0.0.1:{PORTS['probes']}/readyz", log_dir=log_dir,
        env={"PYTHONPATH": str(tree)} if tree else None, cwd=tree)  # (cwd: else ``-m`` finds this checkout first)


def one_round(cluster: DevCluster, api, pods: int, workers: int, log_dir: Path,
              workload: Workload = SINGLE_PODS, phase: float | None = None, baseline_tree: Path | None = None,
              baseline_first: bool = False, pyslurm: bool = False) -> dict:
    """The raw path, then the Pod path through a freshly started scheduler, on an idle Slurm; with
    ``baseline_tree``, also the Pod path with that checkout's scheduler, after this checkout's or (with
    ``baseline_first``) before it, both after the raw path; with ``pyslurm``, also the Pod path with
    this checkout's scheduler on the pyslurm backend (``pyslurm``: its figures and ratios).

    ``ratio``: all bound against all started; ``p50_ratio``: the units' median latencies."""
    wait_for_idle_slurm(cluster)
    raw = raw_path(cluster, pods, workload.size, phase=phase)
    paths: list[tuple[str, Path | None, str]] = [("pod_path", None, "rest")]
    if baseline_tree is not None:
        paths.insert(0 if baseline_first else 1, ("baseline", baseline_tree, "rest"))
    if pyslurm:
        paths.insert(0 if baseline_first else len(paths), ("pyslurm", None, "pyslurm"))
    result: dict = {"raw": raw}
    for key, tree, backend in paths:
        path = one_pod_path(cluster, api, pods, workers, log_dir if key == "pod_path" else log_dir.with_name(
            f"{log_dir.name}-{key}"), tree, workload, phase, backend)
        result[key] = path if key == "pod_path" else {**path, **ratios(path, raw)}
    return {**result, **ratios(result["pod_path"], raw)}


def ratios(pod: dict, raw: dict) -> dict[str, float]:
    return {"ratio": pod["total_s"] / raw["total_s"], "p50_ratio": pod["p50_s"] / raw["p50_s"]}


def wait_until_scheduling(metrics_url: str, timeout: float = 60) -> None:
    """Until the scheduler has listed Slurm once. Ready (/readyz) needs only its Kubernetes caches,
    so the hook API can answer; its workers start once the Slurm cache has synced too, and that
    first full job list took 2.4 s after a gangs round: a clock started at readiness counted the
    scheduler's own start-up against the Pod path."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(metrics_url, timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            text = ""
        age = re.search(r"^sunk_scheduler_slurm_cache_age_seconds (\S+)$", text, re.M)
        if age and age.group(1) not in ("+Inf", "inf", "NaN"):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the scheduler listed no Slurm jobs within {timeout:.0f}s ({metrics_url})")


@contextmanager
def scheduling(cluster: DevCluster, api, namespace: str, scheduler: Process,
               workload: Workload = SINGLE_PODS) -> Iterator[Process]:
    """``scheduler`` started and scheduling (it has listed Slurm) for the block; after it, the namespace's Pods
    deleted while the scheduler still runs (it cancels their jobs: stopped first, each placeholder would wait
    for its Pod past KillWait and drain its node), then the scheduler stopped and the namespace purged."""
    try:
        scheduler.start()
        assert scheduler.proc is not None
        wait_until_scheduling(f"http://127.0.0.1:{PORTS['metrics']}/metrics")
        yield scheduler
    finally:
        try:
            if scheduler.proc is not None:
                drain_pods(cluster, api, namespace)
        finally:
            scheduler.stop()
            purge_namespace(api, namespace, workloads=workload.custom_kinds)


def one_pod_path(cluster: DevCluster, api, pods: int, workers: int, log_dir: Path, tree: Path | None = None,
                 workload: Workload = SINGLE_PODS, phase: float | None = None, backend: str = "rest") -> dict:
    wait_for_idle_slurm(cluster)
    namespace = create_namespace(api)
    scheduler = scheduler_process(cluster, namespace, workers, log_dir, tree, extra=workload.scheduler_flags,
                                  backend=backend)
    with scheduling(cluster, api, namespace, scheduler, workload) as running:
        assert running.proc is not None
        return pod_path(cluster, api, namespace, pods, f"http://127.0.0.1:{PORTS['metrics']}/metrics",
                        running.proc.pid, running.log, workload, phase)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=200)
    add_round_options(parser)
    args = parser.parse_args(argv)
    cluster = DevCluster.for_tests()
    with cluster.claimed("benchmarks/scheduler.py"):
        return run(cluster, args)


def add_round_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``run_rounds``, for this benchmark and benchmarks/gangs.py."""
    parser.add_argument("--workers", type=int, default=16, help="the scheduler's --workers (its default: 16)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="raw and Pod paths alternate this many times; medians are reported")
    parser.add_argument("--pin-cpus", action="store_true",
                        help="Slurm's daemons on the last CPU, Kubernetes and sunk on the others (see pinned_cpus)")
    parser.add_argument("--baseline-tree", type=Path,
                        help="another checkout (e.g. a git worktree of an older commit): each round also runs "
                             "the Pod path with its scheduler, so both are compared in one run")
    parser.add_argument("--pyslurm", action="store_true",
                        help="each round also runs the Pod path with the scheduler on the pyslurm backend (Slurm "
                             "25.11: `SUNK_DEV_SLURM=25.11 sunk-dev run python -m benchmarks.scheduler --pyslurm`)")


def check_capacity(cluster: DevCluster, pods: int) -> None:
    """Both paths hold every job at once (one CPU each): more than the nodes hold never finishes."""
    out = cluster.slurm("sinfo", "-h", "-N", "-p", "batch", "-o", "%N %c").stdout
    rows = [line.split() for line in out.splitlines()]
    cpus = sum(int(row[1]) for row in rows if len(row) == 2)
    if pods > cpus:
        raise SystemExit(f"--pods {pods} needs {pods} CPUs at once, one per Pod; the dev cluster's {len(rows)} nodes "
                         f"have {cpus}. Bring up more nodes: `sunk-dev down`, then run this again with "
                         f"SUNK_DEV_NODES={-(-pods // (cpus // max(len(rows), 1)))}.")


def run_rounds(cluster: DevCluster, api, args: argparse.Namespace, count: int,
               workload: Workload = SINGLE_PODS) -> tuple[list[dict], dict, Path]:
    """``args.rounds`` rounds (``add_round_options``), each printed as it ends: the rounds, the
    pinning, and the directory of the scheduler's logs."""
    log_dir = Path(tempfile.mkdtemp(prefix="sunk-bench-"))
    rounds = []
    with pinned_cpus(cluster, args.pin_cpus) as pinning:
        for number in range(args.rounds):
            phase = round_phase(number, args.rounds)

            # The baseline's Pod path runs after this checkout's in even rounds and before it in odd ones, so that
            # neither code always meets Slurm and the apiserver just after the raw path's, or the other's, clean-up.
            rounds.append(one_round(cluster, api, count, args.workers, log_dir / f"round-{number}", workload, phase,
                                    baseline_tree=args.baseline_tree.resolve() if args.baseline_tree else None,
                                    baseline_first=number % 2 == 1, pyslurm=getattr(args, "pyslurm", False)))
            print(json.dumps({"round": number, "phase": phase, **rounds[-1]}, indent=2), flush=True)
    return rounds, pinning, log_dir


def run(cluster: DevCluster, args: argparse.Namespace) -> int:
    cluster.up()
    check_capacity(cluster, args.pods)
    from sunk.kube.client import load_api_client

    api = load_api_client(str(cluster.kubeconfig))
    rounds, pinning, log_dir = run_rounds(cluster, api, args, args.pods)
    raw_median = statistics.median(r["raw"]["total_s"] for r in rounds)
    pod_median = statistics.median(r["pod_path"]["total_s"] for r in rounds)
    summary = {
        "pods": args.pods, "workers": args.workers, "rounds": args.rounds, "pinned": pinning,
        "raw_total_median_s": raw_median, "pod_total_median_s": pod_median,
        "pod_p50_median_s": statistics.median(r["pod_path"]["p50_s"] for r in rounds),
        "pod_p99_median_s": statistics.median(r["pod_path"]["p99_s"] for r in rounds),
        "ratio_of_medians": pod_median / raw_median,
        "ratios": [round(r["ratio"], 3) for r in rounds],
        "slurm_calls_per_pod": max(r["pod_path"]["slurm_calls_per_pod"] for r in rounds),
        "raw_machine_cpu_median_s": statistics.median(r["raw"]["machine_cpu_s"] for r in rounds),
        "pod_machine_cpu_median_s": statistics.median(r["pod_path"]["machine_cpu_s"] for r in rounds),
        "scheduler_cpu_median_s": statistics.median(r["pod_path"]["scheduler_cpu_s"] for r in rounds),
        "logs": str(log_dir),
    }
    for key, present in (("baseline", args.baseline_tree), ("pyslurm", getattr(args, "pyslurm", False))):
        if not present:
            continue
        median = statistics.median(r[key]["total_s"] for r in rounds)
        summary[key] = {
            **({"tree": str(args.baseline_tree)} if key == "baseline" else {}), "pod_total_median_s": median,
            "ratio_of_medians": median / raw_median,
            "ratios": [round(r[key]["ratio"], 3) for r in rounds],
            "slurm_calls_per_pod": max(r[key]["slurm_calls_per_pod"] for r in rounds),
            "pod_machine_cpu_median_s": statistics.median(r[key]["machine_cpu_s"] for r in rounds),
            "scheduler_cpu_median_s": statistics.median(r[key]["scheduler_cpu_s"] for r in rounds),
        }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
