"""sunk at scale on the dev cluster's real slurmctld: 5000 nodes and 10,000 jobs (issue 22, "A scale run").

    sunk-dev down && sunk-dev up --phantom-nodes 5000       # Slurm nodes without slurmd, beside the real ones
    python -m benchmarks.scale --nodes 1000 --jobs 2000     # a smaller run first
    python -m benchmarks.scale --nodes 5000 --jobs 10000 --out /tmp/scale.json

Setup (progress on stderr, each line with the seconds since the start, so that a run too big for
the machine shows; all of it is removed at the end, also after an error or Ctrl-C):
- ``--jobs`` held jobs (priority 0: they stay PENDING and need no node), submitted through
  sunk's REST client on ``--workers`` threads, all named ``scale-bench-<run>``;
- ``--nodes`` Slurm nodes with a stand-in slurmd Pod each on a Node of its own
  (benchmarks/syncer.py's KubeSide): the real nodes first, then phantoms (``sunk-dev up
  --phantom-nodes N``: DOWN and NOT_RESPONDING, no slurmd). slurmctld must have that many;
- each node's Extra written as the Syncer writes it (by its own rule), so the Syncer starts as
  it restarts on a cluster it has synced. ``--cold-start`` leaves that to the Syncer: its first
  start writes every node's Extra, each write after a fresh full node list shared by at most
  its 4 workers, so that start grows with the square of the node count;
- a real ``sunk-syncer`` with the metrics plugin (the Slurm table on /metrics) and a real
  ``sunk-scheduler``, each reaching slurmrestd through a relay of its own
  (benchmarks/slurmrelay.py) that counts every answer's bytes: sunk exports calls, not bytes.

Measured. A cycle is the Syncer's job poll (``--poll-interval``, 1 s); within it the Syncer polls
nodes every ``--node-poll-interval`` (0.25 s) and the scheduler jobs every
``--scheduler-poll-interval`` (0.5 s).
- Start-up: until the Syncer has written every Pod's conditions and gone quiet, then until
  both job caches are idle (checking ``update_time``, or steadily listing states where a full job
  list is slower than their interval, as at 10,000 jobs); what each
  process read meanwhile, and what one full job list costs.
- Idle, over ``--cycles`` cycles: per cycle, each process's Slurm calls by message type (its
  /metrics), the bytes of slurmrestd's answers by request kind (its relay) and its CPU; the CPU of
  slurmctld, slurmrestd and the whole machine (/proc); each process's memory.
- One scrape of the Syncer's /metrics: the first of the run (every series rendered) and later
  ones: time, size, the Syncer's CPU.
- Drain propagation, ``--samples`` each, as benchmarks/syncer.py measures it: Slurm -> Kubernetes
  on phantom nodes (a drain written to Slurm until the Pod's SlurmDrain=True, the undrain until
  False); Kubernetes -> Slurm on real nodes, ``--change`` (Pod not Ready, Ready, Node cordon, until
  Slurm shows the ``k8s:`` drain or its removal; the Syncer never drains a DOWN node, so never a
  phantom). Each direction's cost per change, idle polling during the samples included.
- One job changed among ``--jobs``: a held job cancelled, then each process's job cache refresh
  that met the change (its requests, bytes, time), once while the caches are idle and once right
  after another change (when they list states again).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote

import requests

from benchmarks.scheduler import (
    PORTS,
    cpu_seconds,
    machine_cpu_seconds,
    rpc_counts,
    scheduler_process,
    wait_until_scheduling,
)
from benchmarks.slurmrelay import CountingRelay, Exchange, by_kind
from benchmarks.syncer import (
    BENCH_REASON,
    KubeSide,
    SlurmSide,
    cost,
    counters,
    kube_to_slurm,
    slurm_cpu,
    slurm_to_kube,
    syncer_process,
    wait_for,
)
from sunk.kube.client import load_api_client
from sunk.model import names
from sunk.model.slurm import Node
from sunk.model.types import Obj
from sunk.slurm import JobRequest, NodeUpdate, v0042
from sunk.slurm.errors import SlurmError
from sunk.slurm.rest import RestClient
from sunk.slurm.settings import SlurmSettings
from sunk.syncer.context import SyncerContext
from sunk.syncer.facts import KubeFacts
from sunk.translate import objects
from sunk.translate.extra import parse_object
from sunk.translate.podcordon import pod_cordon
from sunk.translate.syncplan import merged_extra
from sunk_dev.cluster import DevCluster
from tests.cluster.kube_testns import create_namespace, purge_namespace

PROCESSES = ("syncer", "scheduler")
PHANTOM = re.compile(r"phantom(\d+)")  # sunk_dev.slurmconf.SlurmLayout.phantom_names
HELD_SCRIPT = "#!/bin/bash\nsleep 3600\n"
PROGRESS_EVERY = 10.0  # seconds between progress lines of a long step
QUIET_S = 10.0  # the Syncer counts as settled once its reconciles and writes stood still this long
JOB_IDLE_WAIT = 300.0  # longest wait for the job caches to go idle (idle_caches)
STEADY_LISTS = 10  # idle state lists in a row that make a cache that does not check idle
STEADY_WAIT = 60.0  # ... once the wait has lasted this long (a cache that will check has gone over by then)
CHANGE_TIMEOUT = 300.0  # longest wait for both job caches to meet one job change
FULL_LIST_MARGIN = 30.0  # a job change is made no closer than this to a cache's periodic full job list
LOOKBACK = 100  # exchanges looked back at for a job cache's mode (100: 20 s of the Syncer's, 50 s of the scheduler's)
# A job cache refresh opens with one of these requests (sunk/slurm/cache.py); single-job reads follow it.
OPENERS = frozenset({"job states", "job check: no change", "job check: every job", "job list"})
# A refresh that read a job, or got every job, met a change; one that did neither saw none.
MET = frozenset({"job read", "job check: every job", "job list"})
MODES = {"job states": "state lists", "job check: no change": "update_time checks",
         "job check: every job": "update_time checks", "job list": "full lists"}

T = TypeVar("T")
R = TypeVar("R")
Say = Callable[[str], None]


# ---- options --------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="Slurm nodes given a stand-in slurmd Pod (real ones "
                                                                "first, then phantoms)")
    parser.add_argument("--jobs", type=int, default=10_000, help="held jobs submitted for the run")
    parser.add_argument("--samples", type=int, default=20, help="drain propagation samples per direction")
    parser.add_argument("--apart", type=float, default=0.0,
                        help="also time Slurm -> Kubernetes with each change this many seconds after the last was "
                             "seen (1.5: each alone in slurmctld's whole second; 0: only back to back)")
    parser.add_argument("--cycles", type=int, default=60, help="cycles (--poll-interval each) of the idle window")
    parser.add_argument("--change", default="",
                        help="real nodes the Kubernetes -> Slurm samples drain, comma-separated (default: every "
                             "real node that is not DOWN)")
    parser.add_argument("--cold-start", action="store_true",
                        help="leave every node's Extra to the Syncer's first start (at 5000 nodes give "
                             "--settle-timeout 7200: it lists every node before each write)")
    parser.add_argument("--workers", type=int, default=8, help="this benchmark's threads for set-up and clean-up")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="the Syncer's --slurm-poll-interval: a cycle")
    parser.add_argument("--node-poll-interval", type=float, default=0.25,
                        help="the Syncer's --slurm-node-poll-interval")
    parser.add_argument("--scheduler-poll-interval", type=float, default=0.5,
                        help="the scheduler's --slurm-poll-interval")
    parser.add_argument("--settle-timeout", type=float, default=1200.0,
                        help="seconds the Syncer may take to start and go quiet")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-dir", default="/tmp/sunk-bench-scale")
    parser.add_argument("--out", default="", help="also write the JSON here")
    args = parser.parse_args(argv)
    if problem := check_args(args):
        parser.error(problem)
    return args


def check_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, or None."""
    if args.nodes < 1 or args.samples < 1 or args.cycles < 1 or args.workers < 1:
        return "--nodes, --samples, --cycles and --workers must be at least 1"
    if args.jobs < 2:
        return "--jobs must be at least 2: the job change is measured twice, with a job cancelled each time"
    if min(args.poll_interval, args.node_poll_interval, args.scheduler_poll_interval) <= 0:
        return "the poll intervals must be positive"
    return None


# ---- progress and threads -------------------------------------------------------------------------------------


class Progress:
    """Lines on stderr, each with the seconds since the run began."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock, self.began = clock, clock()

    def __call__(self, text: str) -> None:
        print(f"[{self.clock() - self.began:7.1f} s] {text}", file=sys.stderr, flush=True)


def progress_line(what: str, done: int, total: int, seconds: float) -> str:
    rate = f", {done / seconds:.0f}/s" if seconds > 0 and done else ""
    return f"{what}: {done}/{total} after {seconds:.1f} s{rate}"


def parallel(fn: Callable[[T], R], items: Sequence[T], workers: int, what: str, say: Say) -> list[R]:
    """``fn`` over ``items`` on ``workers`` threads, the results in order; a progress line every
    PROGRESS_EVERY seconds and at the end. The first error, or Ctrl-C, drops the items not begun
    (an executor's with-statement would first run them all: 10,000 submissions after a Ctrl-C)."""
    began = time.monotonic()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="scale")
    try:
        futures = [pool.submit(fn, item) for item in items]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=PROGRESS_EVERY, return_when=FIRST_EXCEPTION)
            for future in done:
                future.result()
            if pending:
                say(progress_line(what, len(futures) - len(pending), len(futures), time.monotonic() - began))
        results = [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    say(progress_line(what, len(items), len(items), time.monotonic() - began))
    return results


# ---- the Slurm side -------------------------------------------------------------------------------------------


def natural(name: str) -> tuple[str, int, str]:
    """node2 before node10."""
    match = re.fullmatch(r"(\D*)(\d*)(.*)", name)
    assert match is not None  # (every string matches)
    return match.group(1), int(match.group(2) or 0), match.group(3)


@dataclass(frozen=True)
class Picked:
    used: list[str]  # Slurm nodes given a stand-in Pod: the real ones first, then phantoms
    phantoms: list[str]  # of those, the phantoms: the Slurm -> Kubernetes samples
    change: list[str]  # real nodes, up: the Kubernetes -> Slurm samples


def pick_nodes(down: Mapping[str, bool], wanted: int, change: Sequence[str]) -> Picked:
    """The nodes of the run, from every Slurm node and whether it is DOWN; SystemExit says what to do."""
    real = sorted((n for n in down if not PHANTOM.fullmatch(n)), key=natural)
    phantoms = sorted((n for n in down if PHANTOM.fullmatch(n)), key=natural)
    if len(down) < wanted:
        raise SystemExit(f"slurmctld has {len(down)} nodes ({len(real)} real, {len(phantoms)} phantoms); --nodes "
                         f"{wanted} needs {wanted}. Bring up phantom nodes: `sunk-dev down && sunk-dev up "
                         f"--phantom-nodes {wanted - len(real)}` (a running cluster keeps its node count), or pass "
                         f"--nodes {len(down)}.")
    used = (real + phantoms)[:wanted]
    up = [n for n in used if not PHANTOM.fullmatch(n) and not down[n]]
    if change:
        wrong = [n for n in change if n not in up]
        if wrong:
            raise SystemExit(f"--change {','.join(wrong)}: not a real node that is up among the {wanted} used "
                             f"(those are: {','.join(up) or 'none'})")
        up = list(change)
    if not up:
        raise SystemExit("no real node that is up among the nodes used: the Kubernetes -> Slurm samples need one "
                         "(the Syncer never drains a DOWN node, and phantoms are DOWN)")
    return Picked(used, [n for n in used if PHANTOM.fullmatch(n)], up)


class SlurmNodes(SlurmSide):
    """benchmarks/syncer.py's SlurmSide, reading one node per drain check (``GET /node/NAME``) rather than
    the whole list: the Kubernetes -> Slurm samples check every 20 ms, and at 5000 nodes a list is about
    12 MB and most of a second of slurmctld's and slurmrestd's time, which would load what is measured.
    A single-node answer's state flags and reason are current (only its allocation figures lag:
    sunk/slurm/rest.py), and they are all a drain check reads."""

    def drained(self, name: str, prefix: str) -> bool:
        node = self.read_node(name)
        return node.drained and node.reason.startswith(prefix)

    def read_node(self, name: str) -> Node:
        client = cast(RestClient, self.client)
        answer = client.session.get(client.base + f"node/{quote(name, safe='')}", timeout=30,
                                    headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": self.token})
        body = answer.json()
        listed = body.get("nodes") or []
        if body.get("errors") or not listed:
            raise SlurmError(f"read node {name}: HTTP {answer.status_code} {body.get('errors')}")
        return v0042.parse_node(listed[0])


@dataclass
class HeldJobs:
    """The run's held jobs, one name for all; every id kept as its submission answers."""

    slurm: SlurmSide
    name: str
    ids: list[int] = field(default_factory=list)

    def submit(self, _number: int) -> int:
        job_id = self.slurm.client.submit_job(JobRequest(name=self.name, script=HELD_SCRIPT, priority=0,
                                                         time_limit=60))
        self.ids.append(job_id)  # (list.append is atomic: the submitting threads share the list)
        return job_id

    def cancel_all(self, cluster: DevCluster, workers: int, say: Say) -> None:
        """Every known id (cancelling a job already cancelled succeeds), then by name: a submission
        interrupted before its answer made a job whose id never came."""
        parallel(self.slurm.client.cancel_job, list(self.ids), workers, "cancelling held jobs", say)
        cluster.slurm("scancel", f"--name={self.name}", check=False)


def syncer_extra(pod: Obj, namespace: str, node: Node) -> str | None:
    """The Extra the Syncer writes for ``node`` when ``pod`` is its slurmd Pod (None: it holds that
    already), by the Syncer's own rule. That rule reads the Pod, its namespace and its cordon only,
    so the facts it gets here have no Syncer context."""
    facts = KubeFacts(slurm_node=node.name, namespace=namespace, pod=pod, k8s_node=None, cordon=pod_cordon(pod),
                      ctx=cast(SyncerContext, None))
    merged = merged_extra(facts, node)
    return merged.text if merged.changed else None


def run_owns(node: Node, namespace: str, run_id: str) -> tuple[bool, bool]:
    """Whether this run left a drain on ``node`` (the benchmark's own, or a ``k8s:`` one naming its
    namespace or Nodes), and an Extra naming its namespace: what the clean-up takes back."""
    reason = node.reason if node.drained else ""
    drained = reason.startswith(BENCH_REASON) or (
        reason.startswith(names.K8S_DRAIN_PREFIX) and (namespace in reason or run_id in reason))
    extra = parse_object(node.extra or "") or {}
    return drained, extra.get("namespace") == namespace


def reset_nodes(slurm: SlurmSide, before: Mapping[str, Node], used: Sequence[str], namespace: str, run_id: str,
                workers: int, say: Say) -> None:
    """The used nodes as ``before`` the run: the run's drains lifted, an Extra naming its namespace put back
    as it was (one list, then the writes on threads)."""
    listed = slurm.nodes()
    owned = {n: run_owns(listed[n], namespace, run_id) for n in used if n in listed}
    parallel(slurm.undrain, [n for n, (drained, _) in owned.items() if drained], workers, "lifting drains", say)
    parallel(lambda n: slurm.client.update_node(n, NodeUpdate(extra=before[n].extra if n in before else "")),
             [n for n, (_, extra) in owned.items() if extra], workers, "putting Extra back", say)


# ---- readings ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clocks:
    at: float  # time.monotonic()
    cpu: Mapping[str, float]  # CPU seconds so far: syncer, scheduler, slurmctld, slurmrestd, machine
    exchanges: Mapping[str, int]  # process -> exchanges its relay has seen so far


@dataclass(frozen=True)
class Counts:
    syncer: dict[str, float]  # the Syncer's counters (benchmarks/syncer.py's keys)
    calls: Mapping[str, Mapping[str, float]]  # process -> its Slurm calls so far, by message type


def syncer_calls(syncer: Mapping[str, float]) -> dict[str, float]:
    """Slurm calls by message type from the Syncer's counters (``sunk_syncer_slurm_requests_total``)."""
    prefix = "sunk_syncer_slurm_requests_total|message_type="
    return {key.removeprefix(prefix): value for key, value in syncer.items() if key.startswith(prefix)}


class Meter:
    """Reads the processes' counters (their /metrics), CPU (/proc) and relays."""

    def __init__(self, cluster: DevCluster, pids: Mapping[str, int], relays: Mapping[str, CountingRelay],
                 syncer_metrics: str, scheduler_metrics: str):
        self.cluster, self.pids, self.relays = cluster, pids, relays
        self.syncer_metrics, self.scheduler_metrics = syncer_metrics, scheduler_metrics
        self.scrapes: list[tuple[float, int]] = []  # every scrape of the Syncer's /metrics: seconds, bytes

    def clocks(self) -> Clocks:
        cpu = {process: cpu_seconds(pid) for process, pid in self.pids.items()}
        cpu.update(slurm_cpu(self.cluster))
        cpu["machine"] = machine_cpu_seconds()
        return Clocks(time.monotonic(), cpu, {p: relay.count() for p, relay in self.relays.items()})

    def counts(self) -> Counts:
        syncer = counters(self.scrape())
        return Counts(syncer, {"syncer": syncer_calls(syncer), "scheduler": rpc_counts(self.scheduler_metrics)})

    def scrape(self) -> str:
        """The Syncer's /metrics, timed: the Slurm table included, as Prometheus takes it."""
        started = time.perf_counter()
        answer = requests.get(self.syncer_metrics, timeout=120)
        answer.raise_for_status()
        self.scrapes.append((time.perf_counter() - started, len(answer.content)))
        return answer.text

    def between(self, c0: Clocks, c1: Clocks) -> dict[str, list[Exchange]]:
        return {p: relay.exchanges(c0.exchanges[p])[:c1.exchanges[p] - c0.exchanges[p]]
                for p, relay in self.relays.items()}


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def figures(c0: Clocks, c1: Clocks, k0: Counts, k1: Counts, exchanges: Mapping[str, Sequence[Exchange]],
            per: float) -> dict[str, Any]:
    """What the stretch between two readings cost, divided by ``per`` (its cycles, or its changes).

    For each sunk process: its Slurm calls by message type (its /metrics), the bytes of slurmrestd's
    answers and the requests by kind (its relay: ``exchanges``, those of the stretch), its CPU. For
    slurmctld, slurmrestd and the machine, their CPU. ``cpu_percent``: of one core, over the stretch.
    """
    seconds = c1.at - c0.at
    out: dict[str, Any] = {"seconds": round(seconds, 2), "per": round(per, 2)}
    for process, stretch in exchanges.items():
        calls = delta(k0.calls[process], k1.calls[process])
        kinds = by_kind(stretch)
        out[process] = {
            "slurm_calls": round(sum(calls.values()) / per, 2),
            "slurm_calls_by_type": {t: round(v / per, 2) for t, v in sorted(calls.items())},
            "bytes": round(sum(k["bytes"] for k in kinds.values()) / per),
            "requests": {kind: {"count": round(k["requests"] / per, 2), "bytes_each": round(k["bytes"] / k["requests"]),
                                "seconds_each": round(k["seconds"] / k["requests"], 4)} for kind, k in kinds.items()},
        }
    for name in sorted(c1.cpu):
        if name in c0.cpu:
            used = c1.cpu[name] - c0.cpu[name]
            out.setdefault(name, {}).update(cpu_s=round(used / per, 4),
                                            cpu_percent=round(used / seconds * 100, 1) if seconds > 0 else None)
    return out


# ---- job cache refreshes, from a relay's exchanges ----------------------------------------------------------------


def job_cycles(exchanges: Sequence[Exchange]) -> list[list[Exchange]]:
    """One process's job cache refreshes: each opens with a state list, an ``update_time`` check or a
    full list, and takes the single-job reads after it; other requests are not the job cache's. (A
    state list that found more changes than reads would cover is followed by a full list in the same
    refresh: that list counts here as a refresh of its own.)"""
    cycles: list[list[Exchange]] = []
    for exchange in exchanges:
        kind = exchange.kind
        if kind in OPENERS:
            cycles.append([exchange])
        elif kind == "job read" and cycles:
            cycles[-1].append(exchange)
    return cycles


def change_cycle(cycles: Sequence[list[Exchange]], since: float) -> tuple[int | None, bool]:
    """The index of the first refresh that met a change made at ``since`` (it read a job or got every
    job), and whether that refresh is over: a later one began (the relay does not see where an answer
    ends, only its bytes). A refresh begun just before ``since`` may have met it too (slurmctld may
    take the change first); one whose answers had all arrived by then cannot have."""
    for index, cycle in enumerate(cycles):
        ends = [exchange.ended for exchange in cycle]
        running = any(end is None or end >= since for end in ends)
        if running and any(exchange.kind in MET for exchange in cycle):
            return index, index + 1 < len(cycles)
    return None, False


def cycle_figures(cycles: Sequence[list[Exchange]], index: int, since: float) -> dict[str, Any]:
    """The refresh that met a change made at ``since``: its requests, bytes and time, and the mode the
    cache was in (that of the refresh before it)."""
    cycle = cycles[index]
    end = max(exchange.ended or exchange.started for exchange in cycle)
    kinds = by_kind(cycle)
    return {"mode_before": MODES[cycles[index - 1][0].kind] if index > 0 else "unknown",
            "requests": {kind: int(k["requests"]) for kind, k in kinds.items()},
            "bytes": sum(exchange.received for exchange in cycle),
            "refresh_s": round(end - cycle[0].started, 3),
            "seen_after_s": round(end - since, 3)}


def idle_mode(exchanges: Sequence[Exchange]) -> str | None:
    """How the job cache refreshes now: its last refresh's mode (None before its first)."""
    cycles = job_cycles(exchanges)
    return MODES[cycles[-1][0].kind] if cycles else None


def refresh_modes(exchanges: Sequence[Exchange]) -> dict[str, int]:
    """How many of a process's job cache refreshes were of each mode (an idle cache checks ``update_time``,
    and lists states once a minute to confirm it: ``resync_every``)."""
    modes: dict[str, int] = {}
    for cycle in job_cycles(exchanges):
        modes[MODES[cycle[0].kind]] = modes.get(MODES[cycle[0].kind], 0) + 1
    return dict(sorted(modes.items(), key=lambda item: -item[1]))


def first_full_list(exchanges: Sequence[Exchange], cycle_s: float) -> dict[str, float] | None:
    """The first full job list a process made (at its start): bytes and seconds, and what the one every
    ``--slurm-job-full-list-interval`` (the daemons' default) costs per cycle, amortized: an idle window
    holds one or none of them."""
    every = SlurmSettings().job_full_list_interval
    for exchange in exchanges:
        if exchange.kind == "job list" and exchange.ended is not None:
            return {"bytes": exchange.received, "seconds": round(exchange.seconds, 3), "every_s": every,
                    "bytes_per_cycle": round(exchange.received * cycle_s / every),
                    "seconds_per_cycle": round(exchange.seconds * cycle_s / every, 4)}
    return None


# ---- memory ---------------------------------------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (a daemon's gunicorn worker), from /proc."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        found.append(current)
        pending.extend(int(c) for c in children)
    return found


def kb_field(text: str, name: str) -> int:
    """``name:   1234 kB`` from /proc/<pid>/status or smaps_rollup, in kB (0 when absent)."""
    match = re.search(rf"^{name}:\s+(\d+) kB$", text, re.M)
    return int(match.group(1)) if match else 0


def memory(pid: int) -> dict[str, float]:
    """The process tree's memory in MB: PSS (shared pages split between the processes: what the tree
    holds), and RSS now and at its peak (VmHWM) summed over the processes."""
    pss = rss = peak = 0
    for member in process_tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
            rollup = Path(f"/proc/{member}/smaps_rollup").read_text()
        except OSError:
            continue
        rss += kb_field(status, "VmRSS")
        peak += kb_field(status, "VmHWM")
        pss += kb_field(rollup, "Pss")
    return {"pss_mb": round(pss / 1024, 1), "rss_mb": round(rss / 1024, 1), "peak_rss_mb": round(peak / 1024, 1)}


# ---- phases -----------------------------------------------------------------------------------------------------


def human_bytes(count: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"


def activity(syncer: Mapping[str, float]) -> float:
    """The Syncer's reconciles and writes so far, one number: it is quiet while this stands still."""
    wanted = ("sunk_reconcile_total|controller=syncer-", "sunk_syncer_kube_writes_total",
              "sunk_syncer_slurm_writes_total")
    return sum(value for key, value in syncer.items() if key.startswith(wanted))


def startup_line(meter: Meter) -> str:
    traffic = meter.relays["syncer"].exchanges()
    writes = sum(1 for exchange in traffic if exchange.kind == "node update")
    return (f"the Syncer has written {writes} Slurm nodes and read "
            f"{human_bytes(sum(exchange.received for exchange in traffic))} from slurmrestd")


def settle(meter: Meter, kube: KubeSide, slurm: SlurmSide, used: Sequence[str], timeout: float,
           say: Say) -> dict[str, Any]:
    """Until the Syncer has written every stand-in Pod's conditions and gone quiet (QUIET_S without a
    reconcile or a write: the node lifecycle controller marks Nodes that never reported Ready=Unknown
    40 s after their creation, and each such update wakes a reconcile; on a cold start the Extra
    writes go on long after the conditions), then until both job caches check ``update_time`` (at
    most JOB_IDLE_WAIT; the run goes on either way, saying so). Then one node list: the used nodes
    whose Extra does not name their Pod (none, unless the Syncer could not write them)."""
    began = time.monotonic()
    deadline, said = began + timeout, began

    def progress(what: str) -> None:
        nonlocal said
        now = time.monotonic()
        if now > deadline:
            raise SystemExit(f"start-up: {what} after {timeout:.0f} s (--settle-timeout); {startup_line(meter)}; "
                             "see the Syncer's log in --log-dir")
        if now - said >= PROGRESS_EVERY:
            say(f"start-up: {what}; {startup_line(meter)}")
            said = now

    while (written := sum(1 for n in used if kube.drain_status(n)[0])) < len(used):
        progress(f"the conditions of {written}/{len(used)} Pods written")
        time.sleep(1)
    conditions_s = time.monotonic() - began
    say(f"start-up: every Pod has the Syncer's conditions after {conditions_s:.1f} s; waiting for it to go quiet")
    last, still_since = activity(meter.counts().syncer), time.monotonic()
    while time.monotonic() - still_since < QUIET_S:
        progress("the Syncer is still reconciling or writing")
        time.sleep(QUIET_S / 4)
        now = activity(meter.counts().syncer)
        if now != last:
            last, still_since = now, time.monotonic()
    quiet_s = time.monotonic() - began
    say(f"start-up: the Syncer is quiet after {quiet_s:.1f} s ({startup_line(meter)})")
    modes = idle_caches(meter.relays, say)
    listed = slurm.nodes()
    missing = [n for n in used if n in listed and (parse_object(listed[n].extra or "") or {}).get("pod") != n]
    if missing:
        say(f"start-up: {len(missing)} nodes' Extra does not name their Pod, e.g. {', '.join(missing[:5])}")
    return {"pod_conditions_s": round(conditions_s, 1), "quiet_s": round(quiet_s, 1),
            "job_caches_idle_s": round(time.monotonic() - began, 1), "job_cache_modes": modes,
            "extra_not_naming_the_pod": len(missing)}


def idle_caches(relays: Mapping[str, CountingRelay], say: Say) -> dict[str, str | None]:
    """Until every job cache refreshes as it does when idle, at most JOB_IDLE_WAIT (the run goes on
    either way, saying so); the modes. Idle is ``update_time`` checks where a full job list is quick
    (the cache goes over to them after a stretch of state lists that found nothing), and state lists
    that read nothing where it is not (a full list slower than the cache's interval: the cache never
    checks, ``job_check_max_full``): those count once STEADY_LISTS have come in a row for
    STEADY_WAIT seconds, long enough for a cache that will check to have gone over."""
    say("waiting for the job caches to go idle")
    began = time.monotonic()
    deadline = began + JOB_IDLE_WAIT
    while True:
        exchanges = {p: relay.exchanges(max(0, relay.count() - LOOKBACK)) for p, relay in relays.items()}
        modes = {p: idle_mode(e) for p, e in exchanges.items()}
        recent = {p: job_cycles(e) for p, e in exchanges.items()}
        if all(mode == "update_time checks" for mode in modes.values()):
            return modes
        if time.monotonic() - began >= STEADY_WAIT and all(steady_state_lists(c) for c in recent.values()):
            return modes
        if time.monotonic() > deadline:
            say(f"the job caches are not all idle after {JOB_IDLE_WAIT:.0f} s ({modes}); measuring anyway")
            return modes
        time.sleep(1)


def steady_state_lists(cycles: Sequence[list[Exchange]]) -> bool:
    """The last STEADY_LISTS job cache refreshes were all idle: a check with no change, or a state
    list that read no job (nothing had changed)."""
    last = cycles[-STEADY_LISTS:]
    return len(last) == STEADY_LISTS and all(
        len(cycle) == 1 and cycle[0].kind in ("job states", "job check: no change") for cycle in last)


def full_list_due(exchanges: Sequence[Exchange], now: float, every: float, margin: float) -> bool:
    """Whether a process's periodic full job list (one every ``every`` s since its last) comes within
    ``margin`` s, or is under way: a change it met would be measured as that list, not as what one
    changed job costs."""
    full = [exchange for exchange in exchanges if exchange.kind == "job list"]
    if not full:
        return False
    return full[-1].ended is None or now - full[-1].started > every - margin


def one_job_change(meter: Meter, jobs: HeldJobs, job_id: int, say: Say) -> dict[str, Any]:
    """Cancel one held job, away from the caches' periodic full lists; each process's job cache refresh
    that met it, and the CPU meanwhile."""
    every, began = SlurmSettings().job_full_list_interval, time.monotonic()
    while due := [p for p, relay in meter.relays.items()
                  if full_list_due(relay.exchanges(), time.monotonic(), every, FULL_LIST_MARGIN)]:
        if time.monotonic() - began > FULL_LIST_MARGIN + CHANGE_TIMEOUT:
            raise SystemExit(f"the periodic full job list of {', '.join(due)} never came")
        time.sleep(0.5)
    if time.monotonic() - began > 1:
        say(f"waited {time.monotonic() - began:.0f} s for the periodic full job list(s) to pass")
    c0 = meter.clocks()
    since = c0.at
    jobs.slurm.client.cancel_job(job_id)
    start = {p: max(0, c0.exchanges[p] - LOOKBACK) for p in meter.relays}
    deadline, said = since + CHANGE_TIMEOUT, since
    while True:
        cycles = {p: job_cycles(relay.exchanges(start[p])) for p, relay in meter.relays.items()}
        found = {p: change_cycle(c, since) for p, c in cycles.items()}
        if all(index is not None and over for index, over in found.values()):
            break
        now = time.monotonic()
        waiting = ", ".join(f"{p}: {'refreshing' if index is not None else 'not met yet'}"
                            for p, (index, over) in found.items() if index is None or not over)
        if now > deadline:
            raise SystemExit(f"job {job_id} cancelled {CHANGE_TIMEOUT:.0f} s ago: {waiting}")
        if now - said >= PROGRESS_EVERY:
            say(f"job {job_id} cancelled {now - since:.0f} s ago: {waiting}")
            said = now
        time.sleep(0.2)
    c1 = meter.clocks()
    out: dict[str, Any] = {p: cycle_figures(cycles[p], cast(int, found[p][0]), since) for p in cycles}
    out["cpu_s"] = {name: round(c1.cpu[name] - c0.cpu[name], 3) for name in c1.cpu if name in c0.cpu}
    say(f"job {job_id} cancelled: " + "; ".join(
        f"{p} met it in a refresh of {out[p]['refresh_s']} s, {human_bytes(out[p]['bytes'])}" for p in cycles))
    return out


def scrape_figures(meter: Meter, pid: int, count: int = 5) -> dict[str, Any]:
    """The run's first scrape (every series rendered), then ``count`` in a row: time, size, the Syncer's CPU."""
    first = meter.scrapes[0]
    cpu = cpu_seconds(pid)
    for _ in range(count):
        meter.scrape()
    cpu = cpu_seconds(pid) - cpu
    later = meter.scrapes[-count:]
    return {"first_s": round(first[0], 3), "first_bytes": first[1],
            "p50_s": round(statistics.median(s for s, _ in later), 3), "bytes": later[-1][1],
            "syncer_cpu_s_per_scrape": round(cpu / count, 3)}


def costed(meter: Meter, changes: int, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``measure()``'s latencies, with what its ``changes`` cost each (``figures`` per change, and the
    Syncer's reconciles and writes per change: benchmarks/syncer.py's ``cost``)."""
    k0, c0 = meter.counts(), meter.clocks()
    result = measure()
    c1, k1 = meter.clocks(), meter.counts()
    result["cost"] = {**figures(c0, c1, k0, k1, meter.between(c0, c1), changes),
                      "syncer_writes": cost(k0.syncer, k1.syncer, changes)}
    return result


# ---- the run ----------------------------------------------------------------------------------------------------


def ready(pod: Obj | None) -> bool:
    cond = objects.get_condition(pod or {}, "Ready")
    return bool(cond and cond.get("status") == "True")


def remove_kube_objects(api: Any, kube: KubeSide, used: Sequence[str], workers: int, say: Say) -> None:
    """The stand-in Pods, their namespace and their Nodes, deleted on threads (purge_namespace deletes
    one object at a time, minutes at 5000 Pods)."""
    kube.informer.stop()
    parallel(kube.delete_pod, used, workers, "deleting Pods", say)
    purge_namespace(api, kube.namespace)
    parallel(kube.delete_node, kube.node_names(), workers, "deleting Nodes", say)


def run(args: argparse.Namespace, say: Say, results: dict[str, Any]) -> None:
    """The whole run, its figures put in ``results`` as they come (so a run that fails late keeps them)."""
    cluster = DevCluster.for_tests()
    env = cluster.env()
    run_id = uuid.uuid4().hex[:8]
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip()
    log_dir = Path(args.log_dir)
    results["settings"] = {
        "cycle_s": args.poll_interval, "node_poll_s": args.node_poll_interval,
        "scheduler_poll_s": args.scheduler_poll_interval, "cycles": args.cycles, "samples": args.samples,
        "seed": args.seed, "start": "cold" if args.cold_start else "restart (every Extra written before)",
        "cpus": os.cpu_count(), "logs": str(log_dir)}
    setup: dict[str, float] = {}
    results["setup_s"] = setup
    with cluster.claimed("benchmarks/scale.py"), ExitStack() as stack:
        cluster.up()  # (for_tests: stops sunk's own daemons; a running cluster keeps its nodes)
        slurm = SlurmNodes(env["SLURM_REST_URL"], token)
        listed = slurm.nodes()
        picked = pick_nodes({name: node.down for name, node in listed.items()}, args.nodes,
                            [n for n in args.change.split(",") if n])
        results["sizes"] = {"slurm_nodes": len(listed), "pods": len(picked.used), "phantoms": len(picked.phantoms),
                            "real": len(picked.used) - len(picked.phantoms), "change_nodes": picked.change,
                            "jobs": args.jobs}
        api = load_api_client(env["KUBECONFIG"])
        namespace = create_namespace(api)
        kube = KubeSide(api, namespace, run_id)
        jobs = HeldJobs(slurm, f"scale-bench-{run_id}")
        # Undone in the reverse order: the processes, the relays, the Kubernetes objects, the jobs, the Slurm nodes.
        stack.callback(reset_nodes, slurm, listed, picked.used, namespace, run_id, args.workers, say)
        stack.callback(jobs.cancel_all, cluster, args.workers, say)
        stack.callback(remove_kube_objects, api, kube, picked.used, args.workers, say)
        say(f"run {run_id}: {len(listed)} Slurm nodes, {len(picked.used)} with a stand-in Pod in {namespace} "
            f"({len(picked.phantoms)} phantoms), {args.jobs} held jobs; logs in {log_dir}")

        began = time.monotonic()
        parallel(jobs.submit, range(args.jobs), args.workers, "submitting held jobs", say)
        setup["submit_jobs"] = round(time.monotonic() - began, 1)
        began = time.monotonic()
        parallel(kube.create_one, picked.used, args.workers, "creating Nodes and Pods", say)
        kube.informer.start()
        if not kube.informer.wait_for_sync(300):
            raise SystemExit("the benchmark's Pod informer did not sync in 300 s")
        wait_for(lambda: all(ready(kube.informer.get(f"{namespace}/{n}")) for n in picked.used), 300,
                 "every stand-in Pod Ready in the benchmark's informer", interval=0.5)
        setup["create_objects"] = round(time.monotonic() - began, 1)
        if not args.cold_start:
            began = time.monotonic()
            todo = [(n, text) for n in picked.used
                    if (text := syncer_extra(cast(Obj, kube.informer.get(f"{namespace}/{n}")), namespace, listed[n]))]
            parallel(lambda item: slurm.client.update_node(item[0], NodeUpdate(extra=item[1])), todo, args.workers,
                     "writing Extra as the Syncer would", say)
            setup["write_extra"] = round(time.monotonic() - began, 1)

        relays = {p: stack.enter_context(CountingRelay(env["SLURM_REST_URL"], p)) for p in PROCESSES}
        syncer, syncer_metrics = syncer_process(env["KUBECONFIG"], relays["syncer"].url, token, namespace, run_id,
                                                log_dir, args.poll_interval, args.node_poll_interval,
                                                plugins="sunk.metrics.plugin")
        scheduler = scheduler_process(cluster, namespace, 16, log_dir, slurm_url=relays["scheduler"].url,
                                      extra=(f"--slurm-poll-interval={args.scheduler_poll_interval}",))
        stack.callback(syncer.stop)
        stack.callback(scheduler.stop)
        began = time.monotonic()
        syncer.start(timeout=300)
        scheduler.start(timeout=300)
        scheduler_metrics = f"http://127.0.0.1:{PORTS['metrics']}/metrics"
        wait_until_scheduling(scheduler_metrics, timeout=600)
        startup: dict[str, Any] = {"processes_up_s": round(time.monotonic() - began, 1)}
        results["startup"] = startup
        say(f"sunk-syncer and sunk-scheduler up after {startup['processes_up_s']} s")
        assert syncer.proc is not None and scheduler.proc is not None
        pids = {"syncer": syncer.proc.pid, "scheduler": scheduler.proc.pid}
        meter = Meter(cluster, pids, relays, syncer_metrics, scheduler_metrics)
        startup.update(settle(meter, kube, slurm, picked.used, args.settle_timeout, say))
        for p, relay in relays.items():
            traffic = relay.exchanges()
            startup[p] = {"read": by_kind(traffic), "first_full_job_list": first_full_list(traffic, args.poll_interval)}

        say(f"idle: {args.cycles} cycles of {args.poll_interval} s")
        k0, c0 = meter.counts(), meter.clocks()
        time.sleep(args.cycles * args.poll_interval)
        c1, k1 = meter.clocks(), meter.counts()
        idle = figures(c0, c1, k0, k1, meter.between(c0, c1), (c1.at - c0.at) / args.poll_interval)
        idle["syncer_writes"] = cost(k0.syncer, k1.syncer, 0)
        idle["job_cache_refreshes"] = {p: refresh_modes(stretch) for p, stretch in meter.between(c0, c1).items()}
        idle["memory"] = {p: memory(pid) for p, pid in pids.items()}
        results["idle"] = idle
        results["scrape"] = scrape_figures(meter, pids["syncer"])

        rng = random.Random(args.seed)
        sample = [rng.choice(picked.phantoms or picked.used) for _ in range(args.samples)]
        say(f"Slurm -> Kubernetes: {args.samples} drains and undrains")
        results["slurm_to_kubernetes"] = costed(
            meter, 2 * len(sample), lambda: slurm_to_kube(slurm, kube, sample, args.node_poll_interval))
        if args.apart:
            say(f"Slurm -> Kubernetes: {args.samples} drains and undrains, each {args.apart} s after the last seen")
            results["slurm_to_kubernetes_apart"] = {
                "apart_s": args.apart, **slurm_to_kube(slurm, kube, sample, args.node_poll_interval, args.apart)}
        sample = [rng.choice(picked.change) for _ in range(args.samples)]
        say(f"Kubernetes -> Slurm: {args.samples} times Pod not Ready, Ready, Node cordoned, uncordoned")
        results["kubernetes_to_slurm"] = costed(
            meter, 4 * len(sample), lambda: kube_to_slurm(slurm, kube, sample, args.poll_interval, True))

        modes = idle_caches(relays, say)
        results["job_change"] = {"while_idle": {**one_job_change(meter, jobs, jobs.ids[0], say), "modes": modes},
                                 "right_after_a_change": one_job_change(meter, jobs, jobs.ids[1], say)}
        results["memory"] = {p: memory(pid) for p, pid in pids.items()}
        results["alive"] = {"syncer": syncer.proc.poll() is None, "scheduler": scheduler.proc.poll() is None}
        say("measured; cleaning up")


# ---- the table ----------------------------------------------------------------------------------------------------


def latency(summary: Mapping[str, Any]) -> str:
    """benchmarks/syncer.py's ``summary``: p50 / p99."""
    return f"{summary['p50_ms']:.0f} / {summary['p99_ms']:.0f} ms" if summary.get("n") else "—"


def cpu(figure: Mapping[str, Any]) -> str:
    return f"{figure['cpu_s'] * 1000:.1f} ms ({figure['cpu_percent']} % of a core)"


def calls(figure: Mapping[str, Any]) -> str:
    by_type = ", ".join(f"{t.removeprefix('REQUEST_')} {v:g}" for t, v in figure["slurm_calls_by_type"].items())
    return f"{figure['slurm_calls']:g}" + (f" ({by_type})" if by_type else "")


def refresh(figure: Mapping[str, Any]) -> str:
    kinds = ", ".join(f"{n} {kind}" for kind, n in figure["requests"].items())
    return f"{figure['refresh_s']} s, {human_bytes(figure['bytes'])} ({kinds}); was on {figure['mode_before']}"


def per_change(figure: Mapping[str, Any]) -> str:
    syncer = figure["syncer"]
    return (f"{syncer['slurm_calls']:g} Slurm calls, {human_bytes(syncer['bytes'])} read, "
            f"{figure['syncer_writes']['apiserver_writes_per_change']:g} apiserver writes; Syncer CPU "
            f"{syncer['cpu_s'] * 1000:.0f} ms, slurmctld CPU {figure['slurmctld']['cpu_s'] * 1000:.0f} ms")


def render(results: Mapping[str, Any]) -> str:
    """The JSON's figures as two Markdown tables: per sunk process, and Slurm's side with the latencies."""
    sizes, settings, idle = results["sizes"], results["settings"], results["idle"]
    startup, change = results["startup"], results["job_change"]
    lines = [f"{sizes['slurm_nodes']} Slurm nodes, {sizes['pods']} with a stand-in slurmd Pod ({sizes['real']} real, "
             f"{sizes['phantoms']} phantoms); {sizes['jobs']} held jobs; start: {settings['start']}; a cycle is "
             f"{settings['cycle_s']:g} s (the Syncer's job poll; its node poll {settings['node_poll_s']:g} s, the "
             f"scheduler's job poll {settings['scheduler_poll_s']:g} s); idle window {idle['per']:g} cycles", ""]

    def row(*cells: str) -> None:
        lines.append("| " + " | ".join(cells) + " |")

    row("per cycle, idle", "sunk-syncer", "sunk-scheduler")
    row("---", "---", "---")
    row("Slurm calls", *(calls(idle[p]) for p in PROCESSES))
    row("bytes read from slurmrestd", *(human_bytes(idle[p]["bytes"]) for p in PROCESSES))
    for kind in sorted({kind for p in PROCESSES for kind in idle[p]["requests"]}):
        row(f"&nbsp;&nbsp;{kind}", *(
            f"{r['count']:g} × {human_bytes(r['bytes_each'])}, {r['seconds_each'] * 1000:.0f} ms each"
            if (r := idle[p]["requests"].get(kind)) else "" for p in PROCESSES))
    row("CPU", *(cpu(idle[p]) for p in PROCESSES))
    row("memory: PSS, peak RSS (end of run)",
        *(f"{results['memory'][p]['pss_mb']:g} MB, {results['memory'][p]['peak_rss_mb']:g} MB" for p in PROCESSES))
    row("job cache refreshes while idle, by mode", *(
        ", ".join(f"{mode} {n}" for mode, n in idle["job_cache_refreshes"][p].items()) for p in PROCESSES))
    row("a full job list (the first; one comes every 5 min): its bytes and time, and per cycle", *(
        f"{human_bytes(f['bytes'])}, {f['seconds']} s; {human_bytes(f['bytes_per_cycle'])}, "
        f"{f['seconds_per_cycle'] * 1000:.0f} ms a cycle" if (f := startup[p]["first_full_job_list"]) else "—"
        for p in PROCESSES))
    row("one job cancelled, caches idle: the refresh that met it", *(refresh(change["while_idle"][p])
                                                                     for p in PROCESSES))
    row("one job cancelled right after another", *(refresh(change["right_after_a_change"][p]) for p in PROCESSES))

    s2k, k2s, scrape = results["slurm_to_kubernetes"], results["kubernetes_to_slurm"], results["scrape"]
    lines += [""]
    row("Slurm and the Syncer", "")
    row("---", "---")
    for name in ("slurmctld", "slurmrestd", "machine"):
        if name in idle:
            row(f"{name} CPU per idle cycle", cpu(idle[name]))
    row("the Syncer's /metrics: first scrape, later scrapes (p50), size",
        f"{scrape['first_s']} s, {scrape['p50_s']} s, {human_bytes(scrape['bytes'])}; Syncer CPU "
        f"{scrape['syncer_cpu_s_per_scrape'] * 1000:.0f} ms a scrape")
    row("Slurm drain → Pod `SlurmDrain=True`, p50 / p99", latency(s2k["drain"]))
    row("Slurm undrain → Pod `SlurmDrain=False`", latency(s2k["undrain"]))
    if apart := results.get("slurm_to_kubernetes_apart"):
        row(f"the same, each change {apart['apart_s']} s after the last: drain; undrain",
            f"{latency(apart['drain'])}; {latency(apart['undrain'])}")
    row("Pod not Ready → Slurm `k8s:` drain", latency(k2s["drain_on_not_ready"]))
    row("Pod Ready → Slurm undrain", latency(k2s["undrain_on_ready"]))
    row("Node cordon → Slurm `k8s:` drain", latency(k2s["drain_on_cordon"]))
    row("per Slurm → Kubernetes change", per_change(s2k["cost"]))
    row("per Kubernetes → Slurm change", per_change(k2s["cost"]))
    row("start-up: sunk's processes up; from then, every Pod's conditions written, the Syncer quiet, the job "
        "caches idle", f"{startup['processes_up_s']} s; {startup['pod_conditions_s']} s, {startup['quiet_s']} s, "
        f"{startup['job_caches_idle_s']} s")
    row("set-up: " + ", ".join(results["setup_s"]), ", ".join(f"{v} s" for v in results["setup_s"].values()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    say = Progress()
    results: dict[str, Any] = {}
    try:
        run(args, say, results)
    finally:  # (after a failure, what was measured until then)
        text = json.dumps(results, indent=2)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
    say("done")
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
