"""Gangs through sunk-scheduler vs the same multi-node jobs straight into Slurm (issue 21).

    SUNK_DEV_NODES=16 python -m benchmarks.gangs --gangs 50 --size 4 --rounds 3 --pin-cpus

Pod path: ``--gangs`` batch/v1 Jobs (Indexed, parallelism = completions = ``--size``) created at
once; the real Job controller (kube-controller-manager) makes their Pods, and sunk-scheduler, run as
a subprocess, places each Job's Pods as one gang: one Slurm job of ``--size`` nodes, the members
bound once Slurm starts it. A gang is timed from just before its Job's create call to the binding
of its last member (seen by a watch).
Raw path: the same number of jobs of ``--size`` nodes (``sbatch -N<size>`` through slurmrestd, with
the per-node resources the gang's job asks: one CPU and 256 MB per member) submitted straight to
Slurm, each marking itself started and calling this process from its batch host, as the scheduler
benchmark's raw jobs do. A job is timed from just before its submission to that call.

``--workload podgroup``: each gang is a PodGroup (``minMember`` = ``--size``) and its Pods, made by
this process's client (no controller between it and the scheduler, as none is between the raw
path's client and Slurm), and the scheduler runs with ``--gang-pod-groups=true`` (a
``--baseline-tree`` checkout older than that flag cannot run this workload); the PodGroup CRD is
made for the run when the cluster lacks it, and deleted after.

Both paths reuse benchmarks/scheduler.py (its Pod path, raw path, rounds, --pin-cpus and
--baseline-tree); what is new here is the unit (a Job of Pods), the node checks and the summary.
Every job holds its nodes until the round ends, so every gang must fit at once: the benchmark
stops before starting when the dev cluster's nodes cannot hold them (`sunk-dev down`, then
SUNK_DEV_NODES=N). The issue's figure is 50 gangs of 4 on 16 nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Sequence

from benchmarks.scheduler import Workload, add_round_options, pod, run_rounds
from sunk.kube import client as kc
from sunk.kube.resources import JOBS, PODGROUPS, PODS
from sunk.translate import gang as g
from sunk_dev import workloads
from sunk_dev.cluster import DevCluster

ISSUE_NODES = 16  # issue 21: "50 gangs of 4 on 16 nodes"
# What sinfo shows for a node that takes jobs (a suffix such as "*", not responding, or "~",
# powered off, means it does not).
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing", "planned"})


def gang_job(name: str, size: int) -> dict:
    """A batch/v1 Job of ``size`` Pods, each the scheduler benchmark's Pod (one CPU, 256 MiB); Indexed,
    as multi-node training runs. The Job controller labels its Pods (``batch.kubernetes.io/job-name``,
    ``controller-uid``) and owns them; the scheduler makes them one gang of ``parallelism``."""
    spec = {**pod(name)["spec"], "restartPolicy": "Never"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": size, "completions": size, "completionMode": "Indexed", "backoffLimit": 0,
                     "template": {"spec": spec}}}


def job_name_of(obj: dict) -> str | None:
    """The Job a Pod belongs to, from the label its controller sets; None for any other Pod."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(g.JOB_NAME_LABELS[0])


def gangs_of(size: int) -> Workload:
    return Workload("gang", size, "g", lambda api, namespace, name: kc.create(api, JOBS, gang_job(name, size),
                                                                            namespace), job_name_of)


def create_pod_group(api, namespace: str, name: str, size: int) -> None:
    """A PodGroup of ``minMember`` ``size`` and its Pods, made by this process one after the other."""
    kc.create(api, PODGROUPS, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                               "metadata": {"name": name}, "spec": {"minMember": size}}, namespace)
    for index in range(size):
        member = pod(f"{name}-{index}")
        member["metadata"].setdefault("labels", {})[g.POD_GROUP] = name
        kc.create(api, PODS, member, namespace)


def pod_group_of(obj: dict) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(g.POD_GROUP)


def pod_groups_of(size: int) -> Workload:
    return Workload("gang", size, "p", lambda api, namespace, name: create_pod_group(api, namespace, name, size),
                    pod_group_of, scheduler_flags=("--gang-pod-groups=true",), custom_kinds=(PODGROUPS,))


WORKLOADS = {"job": gangs_of, "podgroup": pod_groups_of}


def check_args(gangs: int, size: int, rounds: int, nodes: int) -> str | None:
    """What is wrong with the options, or None."""
    if gangs < 1 or rounds < 1:
        return "--gangs and --rounds must be at least 1"
    if size < 2:
        return "--size must be at least 2 (a gang of one is a single Pod: benchmarks/scheduler.py)"
    if nodes < size:
        return f"--nodes {nodes} is fewer than a gang's {size} nodes"
    return None


def parse_sinfo(text: str) -> list[tuple[str, int, str]]:
    """``sinfo -h -N -p batch -o '%N %c %T'`` as (node, CPUs, state) rows."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1].isdigit():
            rows.append((fields[0], int(fields[1]), fields[2]))
    return rows


def nodes_needed(gangs: int, size: int, cpus_per_node: int) -> int:
    """The fewest nodes of ``cpus_per_node`` CPUs that hold every gang at once, one CPU per member.

    A gang takes one CPU on each of ``size`` distinct nodes, so a node hosts at most
    ``min(cpus, gangs)`` members; that bound is also enough (fill the nodes round-robin).
    """
    per_node = min(cpus_per_node, gangs)
    return max(size, -(-gangs * size // per_node)) if per_node > 0 else sys.maxsize


def capacity_problem(rows: Sequence[tuple[str, int, str]], gangs: int, size: int, nodes: int) -> str | None:
    """Why the batch partition (``parse_sinfo`` rows) cannot run this benchmark, or None.

    ``nodes``: how many usable nodes the run asks for (the issue's figure: 16). Every gang holds its
    nodes to the end of the round, so all of them must fit at once: a gang left queued would
    never start.
    """
    usable = [(name, cpus) for name, cpus, state in rows if state in USABLE_STATES]
    unusable = [f"{name} ({state})" for name, _cpus, state in rows if state not in USABLE_STATES]
    cpus_per_node = max((cpus for _name, cpus in usable), default=0)
    want = max(nodes, nodes_needed(gangs, size, cpus_per_node) if cpus_per_node else nodes)
    how = f"Bring up more nodes: `sunk-dev down`, then run this again with SUNK_DEV_NODES={want}."
    also = f" Not usable: {', '.join(unusable)}." if unusable else ""
    if len(usable) < size:
        return (f"a gang of {size} needs {size} Slurm nodes at once; the dev cluster's batch partition has "
                f"{len(usable)} usable.{also} {how}")
    if len(usable) < nodes:
        return (f"--nodes {nodes}: the run asks for {nodes} usable batch nodes (issue 21's figure is "
                f"{ISSUE_NODES}); the dev cluster has {len(usable)}.{also} {how} Or pass --nodes {len(usable)} "
                f"to measure on the nodes there are (not the issue's figure).")
    room = sum(min(cpus, gangs) for _name, cpus in usable)
    if gangs * size > room:
        return (f"{gangs} gangs of {size} hold {gangs * size} CPUs at once, one per member on {size} distinct nodes "
                f"each; the {len(usable)} usable batch nodes hold {room}.{also} {how}")
    return None


def check_nodes(cluster: DevCluster, gangs: int, size: int, nodes: int) -> int:
    """Stop with what to do unless the dev cluster can run the benchmark; the usable batch nodes."""
    rows = parse_sinfo(cluster.slurm("sinfo", "-h", "-N", "-p", "batch", "-o", "%N %c %T").stdout)
    problem = capacity_problem(rows, gangs, size, nodes)
    if problem:
        raise SystemExit(problem)
    return sum(1 for _name, _cpus, state in rows if state in USABLE_STATES)


def median_of(rounds: Sequence[dict], path: str, key: str) -> float:
    return statistics.median(r[path][key] for r in rounds)


def queue_summary(rounds: Sequence[dict]) -> dict:
    """Slurm's queue wait (submission to allocation) of each path, and each gang's time without it: the
    median over rounds of the p50s, their ratio, and the jobs backfill started. Slurm takes a batch job
    only at a whole-second tick of its background loop, at most every ``batch_sched_delay`` (3 s) after its
    last pass: a wait of 0 to 3 s whose phase differs by path and round and moves ``ratio_of_medians``
    more than sunk does. Empty when slurmctld's log was not readable."""
    if not all("slurm_queue_p50_s" in r[path] for r in rounds for path in ("raw", "pod_path")):
        return {}
    raw_outside, pod_outside = (median_of(rounds, path, "outside_queue_p50_s") for path in ("raw", "pod_path"))
    return {
        "raw_slurm_queue_p50_median_s": median_of(rounds, "raw", "slurm_queue_p50_s"),
        "pod_slurm_queue_p50_median_s": median_of(rounds, "pod_path", "slurm_queue_p50_s"),
        "raw_outside_queue_p50_median_s": raw_outside, "pod_outside_queue_p50_median_s": pod_outside,
        "outside_queue_ratio_of_medians": pod_outside / raw_outside,
        "slurm_queue_p50s": [[round(r[path]["slurm_queue_p50_s"], 2) for path in ("raw", "pod_path")] for r in rounds],
        "started_by_backfill": [[r[path]["started_by_backfill"] for path in ("raw", "pod_path")] for r in rounds],
    }


def summarize(rounds: Sequence[dict], gangs: int) -> dict:
    """The rounds' medians. The headline: the median gang's latency, Pod path over raw path, each the
    median over rounds of the round's p50 (``ratio_of_medians``, issue 21's goal: <= 1.10 pinned); the
    same for the time until every gang ran (``total_ratio_of_medians``, as benchmarks/scheduler.py).
    Slurm calls per gang: the scheduler's own, from the round that made the most."""
    raw_p50, pod_p50 = median_of(rounds, "raw", "p50_s"), median_of(rounds, "pod_path", "p50_s")
    raw_total, pod_total = median_of(rounds, "raw", "total_s"), median_of(rounds, "pod_path", "total_s")
    busiest = max(rounds, key=lambda r: r["pod_path"]["slurm_calls_per_gang"])["pod_path"]
    summary = {
        "raw_gang_p50_median_s": raw_p50, "raw_gang_p99_median_s": median_of(rounds, "raw", "p99_s"),
        "pod_gang_p50_median_s": pod_p50, "pod_gang_p99_median_s": median_of(rounds, "pod_path", "p99_s"),
        "ratio_of_medians": pod_p50 / raw_p50,
        "p50_ratios": [round(r["p50_ratio"], 3) for r in rounds],
        "raw_total_median_s": raw_total, "pod_total_median_s": pod_total,
        "total_ratio_of_medians": pod_total / raw_total,
        "total_ratios": [round(r["ratio"], 3) for r in rounds],
        # Where a Pod-path gang's time went: its Pods being made (by the Job controller, or for PodGroups
        # by this process's client), then sunk and Slurm.
        "pod_create_to_all_pods_p50_median_s": median_of(rounds, "pod_path", "create_to_all_pods_p50_s"),
        "pod_all_pods_to_bind_p50_median_s": median_of(rounds, "pod_path", "all_pods_to_bind_p50_s"),
        "pod_create_to_submit_p50_median_s": median_of(rounds, "pod_path", "create_to_submit_p50_s"),
        "pod_submit_to_bind_p50_median_s": median_of(rounds, "pod_path", "submit_to_bind_p50_s"),
        # Slurm's queue (submission to allocation, slurmctld's log): the phase of its passes, per round and path.
        **queue_summary(rounds),
        "slurm_calls_per_gang": busiest["slurm_calls_per_gang"],
        "slurm_calls_per_gang_by_type": {k: round(v / gangs, 3) for k, v in sorted(busiest["slurm_calls"].items())},
        "raw_machine_cpu_median_s": median_of(rounds, "raw", "machine_cpu_s"),
        "pod_machine_cpu_median_s": median_of(rounds, "pod_path", "machine_cpu_s"),
        "scheduler_cpu_median_s": median_of(rounds, "pod_path", "scheduler_cpu_s"),
    }
    if rounds and "baseline" in rounds[0]:
        base_p50 = median_of(rounds, "baseline", "p50_s")
        summary["baseline"] = {
            "gang_p50_median_s": base_p50, "ratio_of_medians": base_p50 / raw_p50,
            "p50_ratios": [round(r["baseline"]["p50_ratio"], 3) for r in rounds],
            "total_ratio_of_medians": median_of(rounds, "baseline", "total_s") / raw_total,
            "slurm_calls_per_gang": max(r["baseline"]["slurm_calls_per_gang"] for r in rounds),
            "scheduler_cpu_median_s": median_of(rounds, "baseline", "scheduler_cpu_s"),
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gangs", type=int, default=50)
    parser.add_argument("--size", type=int, default=4, help="Pods per gang, nodes per Slurm job")
    parser.add_argument("--nodes", type=int, default=ISSUE_NODES,
                        help=f"usable batch nodes the run needs (issue 21's figure: {ISSUE_NODES}); fewer stops it "
                             "with how to bring up more")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="job",
                        help="job: batch/v1 Jobs, their Pods made by kube-controller-manager's Job controller; "
                             "podgroup: a PodGroup and its Pods, made by this process (no controller in the path)")
    add_round_options(parser)
    args = parser.parse_args(argv)
    if problem := check_args(args.gangs, args.size, args.rounds, args.nodes):
        parser.error(problem)
    cluster = DevCluster.for_tests()
    with cluster.claimed("benchmarks/gangs.py"):
        return run(cluster, args)


def run(cluster: DevCluster, args: argparse.Namespace) -> int:
    cluster.up()
    nodes = check_nodes(cluster, args.gangs, args.size, args.nodes)
    from sunk.kube.client import load_api_client

    api = load_api_client(str(cluster.kubeconfig))
    with workloads.podgroup_crd(api) if args.workload == "podgroup" else contextlib.nullcontext():
        rounds, pinning, log_dir = run_rounds(cluster, api, args, args.gangs, WORKLOADS[args.workload](args.size))
    summary = {"gangs": args.gangs, "size": args.size, "workload": args.workload, "batch_nodes": nodes,
               "workers": args.workers,
               "rounds": args.rounds, "pinned": pinning, **summarize(rounds, args.gangs), "logs": str(log_dir)}
    if args.baseline_tree:
        summary["baseline"]["tree"] = str(args.baseline_tree)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
