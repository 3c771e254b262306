"""Cold pre-hooks: C prologs at once across N nodes, jobs of k nodes, nothing cached or locked (issue 37, goal 3).

    python -m benchmarks.prehook --cold --callers 100 --nodes 100 --job-nodes 10 --rounds 5
    python -m benchmarks.prehook --cold --callers 1000 --nodes 100 --job-nodes 100 --rounds 5
    sunk-dev run python -m benchmarks.prehook --cold --slurm-backend rest --callers 100 --job-nodes 4
    sunk-dev run python -m benchmarks.prehook --cold --slurm-backend pyslurm ...   # Slurm 25.11 (issue 36)

What a job's start costs the hook API when its prologs arrive: each caller is one node's prolog of
one job (C / k jobs of k nodes each; a node runs several jobs when C > N), all released at once (a
barrier), each a fresh HTTP connection as curl makes. Cold: every round builds a new hook service,
so no job is in its shared reads, the Slurm cache shows no job (as for a job allocated since its
last poll) and every node starts unlocked.

In process: the real hook Blueprint behind the real HTTP front (``sunk.controller.httpfront``, the
Syncer's 256 threads), the real ``LockService`` with its real Slurm client; Kubernetes is stood in
by in-memory slurmd Pods whose writes reach the waiter at once, and the lock controller by a
thread that writes ``locked`` after each recorded request (no Pod to evict: what an idle node's
lock costs, apiserver latencies left out). Slurm: ``--slurm-backend fake`` (default) is the
in-process slurmrestd stand-in (``sunk_dev.fakeslurm``, answers shaped as 24.11.5's, per-node
allocations included); ``rest`` and ``pyslurm`` talk to the dev cluster's Slurm (``sunk-dev run``
gives the environment), where the benchmark submits the jobs (``sleep``, ``-N k``) and cancels them.

Apart (the default; ``--in-process`` for the old figures): the callers and the Slurm stand-in run in
processes of their own, as the prologs and slurmrestd do, so that the figures are the hook API's process
alone, not three programs sharing one interpreter lock.

Printed: p50/p99/max per round and over all rounds (spread: the rounds' p99 min..max), statuses,
and Slurm job reads per job (at the client seam: the goal is 1, not k).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import queue
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sunk.controller.httpfront import FrontThread, Limits, ListenerFront
from sunk.hooks.api import hooks_blueprint
from sunk.hooks.app import create_app
from sunk.hooks.auth import TokenFile, node_token
from sunk.kube.resources import object_key
from sunk.locking.batcher import AnnotationBatcher
from sunk.locking.config import LockConfig
from sunk.locking.evictions import EvictionLog
from sunk.locking.jobreads import SharedJobReads
from sunk.locking.requests import parse_requests
from sunk.locking.service import LockService
from sunk.locking.waiter import ObjectWaiter
from sunk.locking.waitslots import WaitSlots
from sunk.model import names
from sunk.model.slurm import Job
from sunk.model.types import Obj
from sunk.slurm import JobRequest, SlurmClient, connect
from sunk.syncer.config import SyncerConfig
from sunk.syncer.context import INDEX_NODE, INDEX_SLURM_NODE, SyncerContext
from sunk.translate.identity import is_placeholder
from sunk_dev.fakeslurm import FakeSlurmrestd

SECRET = b"prehook-benchmark-secret-of-32-bytes-or-more"
THREADS = 256  # the Syncer's --hooks-api-threads default


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class SlurmdPods:
    """The slurmd Pods as the Syncer's informer shows them (get, by_index); ``write`` applies a patch and
    tells the waiter, as the watch event would."""

    def __init__(self, nodes: Sequence[str]):
        self._lock = threading.Lock()
        self.pods: dict[str, Obj] = {f"slurm/{n}": {
            "apiVersion": "v1", "kind": "Pod", "spec": {"nodeName": f"worker-{n}"},
            "metadata": {"name": n, "namespace": "slurm", "uid": f"uid-{n}", "resourceVersion": "1",
                         "annotations": {names.LOCK_KEY: "false"}}} for n in nodes}
        self.on_write: list[Callable[[Obj], None]] = []

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self.pods.get(key)

    def by_index(self, index: str, value: str) -> list[Obj]:
        if index == INDEX_SLURM_NODE:
            pod = self.get(f"slurm/{value}")
            return [pod] if pod is not None else []
        if index == INDEX_NODE:
            return []
        raise KeyError(index)

    def write(self, pod: Obj, annotations: dict[str, str | None]) -> None:
        with self._lock:
            key = object_key(pod)
            current = self.pods[key]
            merged = dict(current["metadata"]["annotations"])
            for k, v in annotations.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            new = {**current, "metadata": {**current["metadata"], "annotations": merged,
                                           "resourceVersion": str(int(current["metadata"]["resourceVersion"]) + 1)}}
            self.pods[key] = new
        for handler in self.on_write:
            handler(new)


class NoJobs:
    """A Slurm jobs cache that has seen none of them (cold: allocated since its last poll)."""

    def get(self, _job_id: int) -> Job | None:
        return None


class Locker:
    """The lock controller's part on an idle node: a recorded request, then ``locked`` (one write), on a thread."""

    def __init__(self, pods: SlurmdPods):
        self.pods = pods
        self.queue: queue.SimpleQueue[Obj | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def on_write(self, pod: Obj) -> None:
        annotations = pod["metadata"]["annotations"]
        if annotations.get(names.LOCK_KEY) != "locked" and parse_requests(annotations).valid:
            self.queue.put(pod)

    def _run(self) -> None:
        while (pod := self.queue.get()) is not None:
            current = self.pods.get(object_key(pod))
            if current is not None and current["metadata"]["annotations"].get(names.LOCK_KEY) != "locked":
                self.pods.write(current, {names.LOCK_KEY: "locked"})

    def stop(self) -> None:
        self.queue.put(None)


class CountingSlurm:
    """Counts ``get_job`` calls by job id: the reads the goal is about."""

    def __init__(self, slurm: SlurmClient):
        self.slurm = slurm
        self.reads: dict[int, int] = {}
        self._lock = threading.Lock()

    def get_job(self, job_id: int) -> Job:
        with self._lock:
            self.reads[job_id] = self.reads.get(job_id, 0) + 1
        return self.slurm.get_job(job_id)


def service_for(pods: SlurmdPods, slurm: CountingSlurm) -> tuple[LockService, Locker]:
    waiter = ObjectWaiter(pods.get)
    locker = Locker(pods)
    pods.on_write = [waiter.notify, locker.on_write]
    config = LockConfig(token_file=None)
    ctx = SyncerContext(api=None, slurm=slurm.slurm, slurm_nodes=None, slurm_jobs=NoJobs(),  # type: ignore[arg-type]
                        slurmd_pods=pods, nodes=None, all_pods=None, recorder=None,  # type: ignore[arg-type]
                        config=SyncerConfig(), enqueue_node=lambda _n: None)
    return LockService(ctx=ctx, config=config, waiter=waiter, batcher=AnnotationBatcher(pods.write),
                       evictions=EvictionLog(), is_placeholder=is_placeholder, nudge=lambda _n: None,
                       ready=lambda: True, job_reads=SharedJobReads(slurm.get_job),
                       wait_slots=WaitSlots(overall=config.max_waiters, per_node=config.max_waiters_per_node)), locker


def call(port: int, node: str, job_id: int) -> tuple[float, int | str]:
    """One prolog's pre-hook, retried as the prolog retries a 429 or 503 (after Retry-After): its latency to
    the final answer."""
    body = json.dumps({"job_id": job_id, "timeout": 30})
    headers = {"Authorization": f"Bearer {node_token(SECRET, node)}", "Content-Type": "application/json"}
    started = time.perf_counter()
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", f"/api/v1/nodes/{node}/pre-hook", body, headers)
            resp = conn.getresponse()
            resp.read()
            status: int | str = resp.status
            retry = float(resp.getheader("Retry-After") or 0)
        except OSError as exc:
            return time.perf_counter() - started, type(exc).__name__
        finally:
            conn.close()
        if status in (429, 503) and time.perf_counter() - started < 30:
            time.sleep(retry or 2)
            continue
        return time.perf_counter() - started, status


def call_all(port: int, callers: Sequence[tuple[str, int]]) -> list[tuple[float, int | str]]:
    """Every caller at once (a barrier), each on a thread of its own: (latency, final status) each."""
    results: list[tuple[float, int | str]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(callers))

    def caller(node: str, job_id: int) -> None:
        barrier.wait()
        result = call(port, node, job_id)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=caller, args=c) for c in callers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _call_all_apart(port: int, callers: Sequence[tuple[str, int]], out: Any) -> None:
    out.send(call_all(port, callers))


def call_all_apart(port: int, callers: Sequence[tuple[str, int]]) -> list[tuple[float, int | str]]:
    """``call_all`` in a process of its own (spawned: no thread of this one is copied into it)."""
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_call_all_apart, args=(port, list(callers), sending), daemon=True)
    child.start()
    try:
        return receiving.recv()
    finally:
        child.join(timeout=30)


def one_round(slurm: CountingSlurm, nodes: Sequence[str], callers: Sequence[tuple[str, int]],
              token_file: Path, apart: bool = True) -> dict[str, Any]:
    pods = SlurmdPods(nodes)
    service, locker = service_for(pods, slurm)
    app = create_app(hooks_blueprint(service, TokenFile(token_file)))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    front = FrontThread("bench-prehook", [ListenerFront("hooks", sock, app, limits=Limits(
        threads=THREADS, max_connections=4096, max_connections_per_peer=4096))])
    front.start()
    port = front.fronts[0].port
    slurm.reads.clear()
    try:
        results = call_all_apart(port, callers) if apart else call_all(port, callers)
    finally:
        front.stop()
        locker.stop()
    latencies = [elapsed for elapsed, _ in results]
    statuses: dict[int | str, int] = {}
    for _, status in results:
        statuses[status] = statuses.get(status, 0) + 1
    jobs = {job_id for _, job_id in callers}
    return {"p50_ms": round(percentile(latencies, 50) * 1000, 1), "p99_ms": round(percentile(latencies, 99) * 1000, 1),
            "max_ms": round(max(latencies) * 1000, 1), "statuses": statuses,
            "job_reads_per_job": round(sum(slurm.reads.values()) / len(jobs), 2),
            "most_reads_of_a_job": max(slurm.reads.values(), default=0), "_latencies": latencies}


def layout(nodes: Sequence[str], callers: int, job_nodes: int) -> list[list[str]]:
    """The nodes of each job: ``callers / job_nodes`` jobs of ``job_nodes`` consecutive nodes, wrapping round."""
    jobs = max(1, callers // job_nodes)
    return [[nodes[(j * job_nodes + i) % len(nodes)] for i in range(job_nodes)] for j in range(jobs)]


def fake_slurm(node_count: int, callers: int, job_nodes: int) -> tuple[FakeSlurmrestd, list[str], list[Job]]:
    """The in-process slurmrestd stand-in with ``node_count`` nodes and the jobs of ``layout``, running."""
    fake = FakeSlurmrestd(token="bench").start()
    nodes = [f"node{i}" for i in range(1, node_count + 1)]
    for name in nodes:
        fake.put_node(name, state=("ALLOCATED",))
    jobs = []
    for index, members in enumerate(layout(nodes, callers, job_nodes)):
        job_id = 1000 + index
        fake.put_job(job_id, state=("RUNNING",), state_reason="Prolog", nodes=",".join(members),
                     allocation=[(m, 1, 1000) for m in members])
        jobs.append(Job(id=job_id, state="RUNNING", nodes=",".join(members)))
    return fake, nodes, jobs


def _serve_fake_slurm(node_count: int, callers: int, job_nodes: int, out: Any) -> None:
    fake, nodes, jobs = fake_slurm(node_count, callers, job_nodes)
    out.send((fake.url, nodes, [(j.id, j.nodes) for j in jobs]))
    out.recv()  # (until told to stop, or the parent is gone)
    fake.stop()


@contextlib.contextmanager
def fake_slurm_apart(node_count: int, callers: int, job_nodes: int) -> Iterator[tuple[str, list[str], list[Job]]]:
    """``fake_slurm`` in a process of its own: its URL, nodes and jobs."""
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    child = context.Process(target=_serve_fake_slurm, args=(node_count, callers, job_nodes, there), daemon=True)
    child.start()
    try:
        url, nodes, jobs = here.recv()
        yield url, nodes, [Job(id=job_id, state="RUNNING", nodes=members) for job_id, members in jobs]
    finally:
        here.send(None)
        child.join(timeout=10)


def real_jobs(slurm: SlurmClient, callers: int, job_nodes: int, timeout: float = 120) -> list[Job]:
    """``callers / job_nodes`` sleep jobs of ``job_nodes`` nodes each, running (the caller cancels them)."""
    ids = [slurm.submit_job(JobRequest(name="prehook-bench", script="#!/bin/sh\nsleep 600\n", node_count=job_nodes,
                                       cpus_per_task=1, memory_per_node=64))
           for _ in range(max(1, callers // job_nodes))]
    deadline = time.monotonic() + timeout
    while True:
        jobs = [slurm.get_job(i) for i in ids]
        if all(j.state == "RUNNING" for j in jobs):
            return jobs
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs {ids} not all running after {timeout:g}s: {[j.state for j in jobs]}")
        time.sleep(1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", required=True,
                        help="nothing cached or locked beforehand (the only mode; the warm one is benchmarks.hooks)")
    parser.add_argument("--callers", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=100, help="Slurm nodes (fake Slurm; real: the jobs' own)")
    parser.add_argument("--job-nodes", type=int, default=10, help="nodes per job (k)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slurm-backend", choices=("fake", "rest", "pyslurm"), default="fake")
    parser.add_argument("--in-process", action="store_true",
                        help="callers and the Slurm stand-in in this process, beside the hook API (the old figures)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sunk-bench-prehook-"))
    token_file = work / "secret"
    token_file.write_bytes(SECRET)
    apart = not args.in_process
    standing_in = contextlib.ExitStack()
    submitted: list[Job] = []
    if args.slurm_backend == "fake" and apart:
        url, nodes, jobs = standing_in.enter_context(fake_slurm_apart(args.nodes, args.callers, args.job_nodes))
        client = connect("rest", url=url, token="bench")
    elif args.slurm_backend == "fake":
        fake, nodes, jobs = fake_slurm(args.nodes, args.callers, args.job_nodes)
        standing_in.callback(fake.stop)
        client = connect("rest", url=fake.url, token="bench")
    else:
        client = (connect("pyslurm") if args.slurm_backend == "pyslurm" else
                  connect("rest", url=os.environ["SLURM_REST_URL"], token_file=os.environ["SLURM_JWT_FILE"]))
        submitted = jobs = real_jobs(client, args.callers, args.job_nodes)
        nodes = sorted({n for j in jobs for n in j.node_list})
    slurm = CountingSlurm(client)
    callers = [(n, j.id) for j in jobs for n in j.node_list]
    callers = (callers * (args.callers // len(callers) + 1))[:args.callers]  # (real jobs: fewer nodes than callers)
    rounds: list[dict[str, Any]] = []
    try:
        for _ in range(args.rounds):
            rounds.append(one_round(slurm, nodes, callers, token_file, apart))
    finally:
        if submitted:
            for job in submitted:
                client.cancel_job(job.id)
        standing_in.close()
    everything = [latency for r in rounds for latency in r.pop("_latencies")]
    p99s = [r["p99_ms"] for r in rounds]
    result = {
        "backend": args.slurm_backend, "apart": apart, "callers": len(callers), "nodes": len(nodes),
        "job_nodes": args.job_nodes,
        "jobs": len({j for _, j in callers}), "rounds": rounds,
        "p50_ms": round(percentile(everything, 50) * 1000, 1), "p99_ms": round(percentile(everything, 99) * 1000, 1),
        "p99_spread_ms": [min(p99s), max(p99s)], "p99_median_of_rounds_ms": statistics.median(p99s),
        "job_reads_per_job": max(r["job_reads_per_job"] for r in rounds), "cores": os.cpu_count(),
        "goal": "p99 < 50 ms at 100 callers across 100 nodes, < 200 ms at 1000; 1 read per job",
    }
    print(json.dumps(result, indent=2))
    return 0 if all(set(r["statuses"]) == {200} for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
