"""Slurm client list and cache-refresh cost at 1000 nodes and 10,000 jobs.

    python -m benchmarks.slurm_client --synthetic            # in-process slurmrestd stand-in
    python -m benchmarks.slurm_client --spawn                # a separate real slurmctld + slurmrestd
    python -m benchmarks.slurm_client --url URL --token JWT  # any slurmrestd already filled with work

What is measured, per target:
- a full ``list_nodes`` and ``list_jobs``: wall time (HTTP, JSON decoding, mapping to
  models) and answer size, with the JSON-to-models share timed on its own;
- ``SlurmCache.refresh()`` when nothing changed, when one job changed and when one node
  changed since the previous refresh: wall time, Slurm calls and events per cycle (the cache
  listing jobs in full, with ``update_time``);
- a job refresh at that size with one job changed, both ways the cache can refresh jobs:
  full lists (``job_states=False``) and the job state list with reads of what changed
  (``job_states=True``, the default over REST): wall time, Slurm calls, bytes received and
  events per cycle, for a job submitted, a job cancelled (both state changes) and a comment
  changed (no state change: the state path shows it only at its next full list). The jobs
  it submits are held (priority 0) and cancelled by the benchmark itself;
- ``job_checks``: the state path once idle, when it checks ``update_time`` instead of listing
  states (``job_check_after=1`` to get there at once): an idle refresh, the first change a
  check meets (its answer is the full list), and a change after a nudge (a state list and a
  read, as after sunk's own submissions).

``--spawn`` starts, inside the sunk-dev chroot (``sunk-dev up`` made it), a second
slurmctld (cluster "bench", port 6917, no accounting) whose slurm.conf declares 1000 nodes
that have no slurmd, and its own slurmrestd (port 6920); it submits 10,000 held jobs (held
so the scheduler does not churn them), measures, and stops both by PID. The dev cluster is
not touched. Held jobs have no ``job_resources``; ``--synthetic`` serves a running/pending
mix with per-node allocations, so both answer shapes are covered.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import requests

from sunk.slurm import JobRequest, NodeUpdate, SlurmCache, connect, v0042
from sunk_dev.fakeslurm import FakeSlurmrestd

BENCH_CTLD_PORT = 6917
BENCH_REST_PORT = 6920
BENCH_DIR = "sunk-bench"  # /etc/<>, /var/spool/<> inside the chroot


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return times, result


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median_s": round(statistics.median(ordered), 4),
            "p90_s": round(ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))], 4),
            "min_s": round(ordered[0], 4)}


def measure(url: str, token: str, repeat: int, change_node: str, change_job: int) -> dict[str, Any]:
    client = connect("rest", url=url, token=token, read_timeout=120)
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
    base = url.rstrip("/") + "/slurm/v0.0.42/"
    out: dict[str, Any] = {}

    client.list_nodes()  # warm the connection
    session = requests.Session()
    for kind, path, lister, parse, name in (
            ("nodes", "nodes/", client.list_nodes, v0042.parse_node, "list_nodes"),
            ("jobs", "jobs/", client.list_jobs, v0042.parse_job, "list_jobs"),
            ("jobs", "jobs/state/", client.list_job_states, v0042.parse_job_state, "list_job_states")):
        times, snapshot = timed(lister, repeat)
        # One more, by hand, to split the time: server (until the first byte), download, decode, mapping.
        started = time.perf_counter()
        raw = session.get(base + path, headers=headers, timeout=120, stream=True)
        first = raw.raw.read(1)
        served = time.perf_counter()
        content = first + raw.raw.read()
        downloaded = time.perf_counter()
        body = json.loads(content)
        decoded = time.perf_counter()
        [parse(d) for d in body[kind]]
        mapped = time.perf_counter()
        items = snapshot if isinstance(snapshot, tuple) else snapshot.items
        out[name] = {
            "items": len(items), "bytes": len(content), **summary(times),
            "split_s": {"server": round(served - started, 3), "download": round(downloaded - served, 3),
                        "json_decode": round(decoded - downloaded, 3), "to_models": round(mapped - decoded, 3)}}

    lean = connect("rest", url=url, token=token, read_timeout=120, with_allocations=False)
    times, snapshot = timed(lean.list_jobs, repeat)
    lean_raw = requests.get(base + "jobs/", params={"flags": "ALL"}, headers=headers, timeout=120)
    out["list_jobs_without_allocations"] = {"items": len(snapshot.items), "bytes": len(lean_raw.content),
                                            **summary(times)}

    cache = SlurmCache(client, interval=1.0, resync_every=3600, job_states=False)
    first = cache.refresh()
    out["cache_first_refresh"] = {"seconds": round(first.seconds, 4), "calls": first.calls, "events": first.events}

    def cycles(change: Optional[Callable[[], None]]) -> dict[str, Any]:
        results, calls = [], []
        for _ in range(repeat):
            time.sleep(1.05)  # as the cache's 1 s interval would; update_time has one-second resolution
            if change:
                change()
            before = sum(s.count for s in client.rpc_stats().values())
            result = cache.refresh()
            calls.append(sum(s.count for s in client.rpc_stats().values()) - before)
            assert result.ok, result.error
            results.append(result)
        return {**summary([r.seconds for r in results]), "calls_per_cycle": statistics.mean(calls),
                "events_per_cycle": statistics.mean(r.events for r in results)}

    counter = iter(range(10**9))
    out["refresh_unchanged"] = cycles(None)
    out["refresh_one_job_changed"] = cycles(lambda: client.update_job(change_job, comment=f"bench {next(counter)}"))
    out["refresh_one_node_changed"] = cycles(
        lambda: client.update_node(change_node, NodeUpdate(comment=f"bench {next(counter)}")))
    lookups_before = sum(s.count for s in client.rpc_stats().values())
    for _ in range(10_000):
        cache.job(change_job)
        cache.node(change_node)
    out["calls_for_20000_cache_reads"] = sum(s.count for s in client.rpc_stats().values()) - lookups_before
    client.update_node(change_node, NodeUpdate(comment=""))
    out["job_refresh"] = {name: job_refresh(url, token, repeat, states)
                          for name, states in (("full_lists", False), ("state_list", True))}
    out["job_checks"] = job_checks(url, token, repeat)
    return out


def received_bytes(client: Any) -> Callable[[], int]:
    """Count the body bytes of every answer the client's session receives; returns the running total."""
    total = [0]

    def hook(response: requests.Response, *_args: Any, **_kw: Any) -> None:
        total[0] += len(response.content)

    client.session.hooks["response"].append(hook)
    return lambda: total[0]


def job_refresh(url: str, token: str, repeat: int, states: bool) -> dict[str, Any]:
    """A job-only cache refreshing one way (full lists, or the state list), one job changed per cycle."""
    client = connect("rest", url=url, token=token, read_timeout=120)
    received = received_bytes(client)
    cache = SlurmCache(client, kinds=("job",), interval=1.0, resync_every=3600, job_full_every=3600,
                       job_states=states, job_check_after=math.inf)  # (job_checks below measures checks)
    first = cache.refresh()
    assert first.ok, first.error
    out: dict[str, Any] = {"first_refresh": {"seconds": round(first.seconds, 3), "calls": first.calls,
                                             "bytes": received()}}
    held = JobRequest(name="bench-change", script="#!/bin/bash\nsleep 3600\n", priority=0, time_limit=60)
    commented = client.submit_job(held)  # a job of our own whose comment changes
    submitted: list[int] = []

    def cycles(change: Optional[Callable[[], None]]) -> dict[str, Any]:
        rows = []
        for _ in range(repeat):
            time.sleep(1.05)  # as the cache's 1 s interval would; update_time has one-second resolution
            if change:
                change()
            calls_before = sum(s.count for s in client.rpc_stats().values())
            bytes_before = received()
            result = cache.refresh()
            assert result.ok, result.error
            rows.append((result.seconds, sum(s.count for s in client.rpc_stats().values()) - calls_before,
                         received() - bytes_before, result.events))
        return {**summary([r[0] for r in rows]), "calls_per_cycle": statistics.mean(r[1] for r in rows),
                "bytes_per_cycle": round(statistics.mean(r[2] for r in rows)),
                "max_bytes": max(r[2] for r in rows), "events_per_cycle": statistics.mean(r[3] for r in rows)}

    cache.refresh()  # (our own submission, so that the rows below each see exactly one change)
    counter = iter(range(10**9))
    try:
        out["unchanged"] = cycles(None)
        out["one_job_submitted"] = cycles(lambda: submitted.append(client.submit_job(held)))
        out["one_job_cancelled"] = cycles(lambda: client.cancel_job(submitted.pop()))
        out["one_comment_changed"] = cycles(lambda: client.update_job(commented, comment=f"bench {next(counter)}"))
    finally:
        for job_id in [*submitted, commented]:
            client.cancel_job(job_id)
    out["job_reads"] = cache.stats().job_reads
    out["full_job_lists"] = cache.stats().job_full_lists
    return out


def job_checks(url: str, token: str, repeat: int) -> dict[str, Any]:
    """The state path while idle: update_time checks, and what a change costs then, nudged or not."""
    client = connect("rest", url=url, token=token, read_timeout=120)
    received = received_bytes(client)
    cache = SlurmCache(client, kinds=("job",), interval=1.0, resync_every=3600, job_full_every=3600,
                       job_states=True, job_check_after=1)
    assert cache.refresh().ok
    held = JobRequest(name="bench-check", script="#!/bin/bash\nsleep 3600\n", priority=0, time_limit=60)
    submitted: list[int] = []

    def settle() -> None:  # idle state lists until the cache checks (others' jobs may delay it)
        checks = cache.stats().job_checks
        for _ in range(60):
            time.sleep(1.05)
            assert cache.refresh().ok
            if cache.stats().job_checks > checks:
                return
        raise SystemExit("job_checks: the cache never went over to update_time checks (jobs keep changing?)")

    def cycle(change: Optional[Callable[[], None]], nudge: bool = False) -> tuple[float, int, int, int]:
        time.sleep(1.05)  # update_time has one-second resolution
        if change:
            change()
        if nudge:
            cache.nudge()
        calls_before, bytes_before = sum(s.count for s in client.rpc_stats().values()), received()
        result = cache.refresh()
        assert result.ok, result.error
        return (result.seconds, sum(s.count for s in client.rpc_stats().values()) - calls_before,
                received() - bytes_before, result.events)

    def row(rows: list[tuple[float, int, int, int]]) -> dict[str, Any]:
        return {**summary([r[0] for r in rows]), "calls_per_cycle": statistics.mean(r[1] for r in rows),
                "bytes_per_cycle": round(statistics.mean(r[2] for r in rows)),
                "events_per_cycle": statistics.mean(r[3] for r in rows)}

    out: dict[str, Any] = {}
    try:
        settle()
        out["unchanged"] = row([cycle(None) for _ in range(repeat)])
        first, nudged = [], []
        for _ in range(repeat):
            settle()
            first.append(cycle(lambda: submitted.append(client.submit_job(held))))
            settle()
            nudged.append(cycle(lambda: submitted.append(client.submit_job(held)), nudge=True))
        out["first_change_met_by_a_check"] = row(first)
        out["change_after_a_nudge"] = row(nudged)
    finally:
        for job_id in submitted:
            client.cancel_job(job_id)
    out["checks"] = cache.stats().job_checks
    out["full_job_lists"] = cache.stats().job_full_lists
    return out


# -- targets ------------------------------------------------------------------------------------------------


def _serve_synthetic(nodes: int, jobs: int, running_share: float, port: Any) -> None:
    """Child process: fill the stand-in like a busy cluster and serve until killed."""
    rng = random.Random(42)
    fake = FakeSlurmrestd(token="bench", partition_bug=True)
    names = [f"node{i:04d}" for i in range(1, nodes + 1)]
    fake.put_partition("batch", f"node[0001-{nodes:04d}]", nodes, nodes * 64)
    for name in names:
        fake.put_node(name, cpus=64, state=("MIXED",), alloc_cpus=8, alloc_memory=16384, gres_used="gpu:1")
    now = fake.now()
    for job_id in range(1, jobs + 1):
        if rng.random() < running_share:
            hosts = rng.sample(names, 1 if rng.random() < 0.9 else 2)
            fake.put_job(job_id, name=f"job-{job_id}", state=("RUNNING",), nodes=",".join(hosts),
                         allocation=[(h, 8, 16384) for h in hosts], gres_detail=tuple("gpu:1(IDX:0)" for _ in hosts),
                         extra=f'{{"pod": "ns/pod-{job_id}"}}', submit_time=now - 100, start_time=now - 50,
                         end_time=now + 3600, time_limit=60, tres_alloc="cpu=8,mem=16G,node=1,billing=8,gres/gpu=1")
        else:
            fake.put_job(job_id, name=f"job-{job_id}", state_reason="Resources", submit_time=now - 10,
                         time_limit=60, extra=f'{{"pod": "ns/pod-{job_id}"}}')
    time.sleep(1.1)  # the fills happened "a second ago"
    fake.start()
    port.value = fake.port
    while True:
        time.sleep(3600)


@contextmanager
def synthetic(nodes: int, jobs: int, running_share: float) -> Iterator[tuple[str, str, str, int]]:
    """The stand-in in its own process (so its JSON encoding does not share our GIL)."""
    ctx = multiprocessing.get_context("fork")
    port = ctx.Value("i", 0)
    child = ctx.Process(target=_serve_synthetic, args=(nodes, jobs, running_share, port), daemon=True)
    child.start()
    try:
        _wait(lambda: port.value, 300, "the synthetic slurmrestd")
        yield f"http://127.0.0.1:{port.value}", "bench", "node0001", 1
    finally:
        child.terminate()
        child.join(10)


@contextmanager
def given(url: str, token: str, node: str, job: int) -> Iterator[tuple[str, str, str, int]]:
    yield url, token, node, job


def _run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kw)


@contextmanager
def spawned(nodes: int, jobs: int) -> Iterator[tuple[str, str, str, int]]:
    """A second slurmctld + slurmrestd in the sunk-dev chroot; 1000 nodes without slurmd, N held jobs."""
    from sunk_dev.cluster import DevCluster

    cluster = DevCluster.for_tests()
    root = cluster.root
    if not (root / ".sunk-complete").exists():
        raise SystemExit("no sunk-dev chroot: run `sunk-dev up` first")
    etc, spool = root / "etc" / BENCH_DIR, root / "var/spool" / BENCH_DIR
    shutil.rmtree(spool, ignore_errors=True)
    etc.mkdir(exist_ok=True)
    spool.mkdir(parents=True)
    slurm_uid = _uid(root, "slurm")
    os.chown(spool, slurm_uid, slurm_uid)
    (etc / "slurm.conf").write_text("\n".join([
        "ClusterName=bench", "SlurmctldHost=localhost", f"SlurmctldPort={BENCH_CTLD_PORT}", "SlurmUser=slurm",
        "AuthType=auth/munge", "AuthAltTypes=auth/jwt", "AuthAltParameters=jwt_key=/etc/slurm/jwt.key",
        f"StateSaveLocation=/var/spool/{BENCH_DIR}", f"SlurmctldPidFile=/run/{BENCH_DIR}-slurmctld.pid",
        f"SlurmctldLogFile=/var/log/slurm/{BENCH_DIR}-slurmctld.log", "SlurmctldDebug=error",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory", "GresTypes=gpu", "MailProg=/bin/true", "MaxJobCount=200000",
        "MinJobAge=600", "SlurmdTimeout=0", "ReturnToService=2",
        f"NodeName=bench[0001-{nodes:04d}] NodeHostname=localhost Port=18998 CPUs=64 RealMemory=131072 "
        "Gres=gpu:2 State=UNKNOWN",
        "PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    (etc / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    (etc / "gres.conf").write_text("AutoDetect=off\n")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": f"/etc/{BENCH_DIR}/slurm.conf"}
    procs = []
    try:
        procs.append(subprocess.Popen(["chroot", str(root), "slurmctld", "-D", "-i", "-f",
                                       f"/etc/{BENCH_DIR}/slurm.conf"], env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: _run(["chroot", str(root), "scontrol", "ping"], env=env).stdout.count("UP") > 0, 60,
              "the bench slurmctld")
        procs.append(subprocess.Popen(["chroot", "--userspec=slurmrestd:slurmrestd", str(root), "env",
                                       f"SLURM_CONF=/etc/{BENCH_DIR}/slurm.conf", "SLURM_JWT=daemon", "slurmrestd",
                                       "-a", "rest_auth/jwt", "-s", "openapi/slurmctld",
                                       f"127.0.0.1:{BENCH_REST_PORT}"], env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{BENCH_REST_PORT}"
        token = cluster.slurm_rest.token  # signed with the same key, which the bench slurmctld also trusts
        client = connect("rest", url=url, token=token, read_timeout=120)
        _wait(client.ping, 60, "the bench slurmrestd")
        started = time.monotonic()
        request = JobRequest(name="bench", script="#!/bin/bash\nsleep 3600\n", priority=0, time_limit=60)
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda i: client.submit_job(request), range(jobs)))
        print(f"submitted {len(ids)} held jobs in {time.monotonic() - started:.1f}s", file=sys.stderr)
        time.sleep(1.1)
        yield url, token, "bench0001", ids[0]
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(spool, ignore_errors=True)


def _uid(root: Path, user: str) -> int:
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2])
    raise KeyError(user)


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} did not come up in {timeout}s")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--synthetic", action="store_true")
    mode.add_argument("--spawn", action="store_true")
    mode.add_argument("--url")
    parser.add_argument("--token", help="JWT for --url")
    parser.add_argument("--node", help="node to touch in --url mode", default="node1")
    parser.add_argument("--job", type=int, help="job to touch in --url mode")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--running-share", type=float, default=0.6, help="--synthetic: share of running jobs")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    if args.url:
        if not (args.token and args.job):
            parser.error("--url needs --token and --job")
        target: Any = given(args.url, args.token, args.node, args.job)
    elif args.synthetic:
        target = synthetic(args.nodes, args.jobs, args.running_share)
    else:
        target = spawned(args.nodes, args.jobs)
    with target as (url, token, node, job):
        result = measure(url, token, args.repeat, node, job)
    mode_name = "synthetic" if args.synthetic else "spawn" if args.spawn else "url"
    print(json.dumps({"mode": mode_name, "nodes": args.nodes, "jobs": args.jobs, "repeat": args.repeat,
                      "cpus": os.cpu_count(), **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
