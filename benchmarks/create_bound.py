"""One Pod's create → bound on an idle cluster (issue 37, goal 2: p50 < 1.0 s, p99 < 1.5 s).

    python -m benchmarks.create_bound --rounds 5 --samples 10
    python -m benchmarks.create_bound --rounds 5 --samples 10 --pin-cpus

One scheduler (the chart's defaults: REST backend, 4 workers) runs for the whole benchmark, as a
deployed one does; each sample is one Pod created on an idle Slurm (no active job, the last pass
for the previous sample's job over), timed from just before its create call to the watch event
that shows it bound. Samples start at phases spread evenly over the second, so Slurm's scheduling
tick does not favour a run. Each sample's time is split three ways: create → the scheduler's
submission (its log), Slurm's own queue wait (slurmctld's log: submission → allocation), and the
rest (the scheduler learning that the job started, then binding).

Printed: every sample, then p50/p99/max of each part over all samples, and each round's p50 and p99
of the whole (the spread: min..max over the rounds); the goal is on the whole.

    python -m benchmarks.create_bound --dra --rounds 5 --samples 10

``--dra`` (issue 38): the scheduler with ``--dra-device-mapping`` for the real Node's DRA test driver, and the
samples alternate between a Pod asking for ``nvidia.com/gpu: 1`` (the device plugin's way; the real kubelet,
which has no such plugin, rejects it after its binding, which is what is timed) and a Pod whose GPU comes through
a ResourceClaimTemplate (kube-controller-manager makes its claim; sunk fills it from the job's GRES index before
the binding), both on the real Node's partition. Printed besides: each kind's figures, and per round the ratio of
the claim Pods' median to the device-plugin Pods'.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.scheduler import (
    PORTS,
    SCHEDULER,
    SINGLE_PODS,
    Workload,
    drain_pods,
    percentile,
    pinned_cpus,
    pod_path,
    scheduler_process,
    scheduling,
)
from sunk.kube import client as kc
from sunk.kube.resources import PODS, Resource
from sunk.model import names
from sunk_dev import realnode
from sunk_dev.cluster import DevCluster
from tests.cluster.kube_testns import create_namespace

GOAL_P50_S = 1.0
GOAL_P99_S = 1.5


def summary(samples: list[dict]) -> dict:
    """p50/p99/max of each part over the samples, and whether the goal holds."""
    parts = {"create_to_bound": "p50_s", "create_to_submit": "create_to_submit_p50_s",
             "slurm_queue": "slurm_queue_p50_s", "outside_queue": "outside_queue_p50_s"}
    out: dict = {"samples": len(samples)}
    for name, key in parts.items():
        values = [s[key] for s in samples if key in s]
        if values:
            out[name] = {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3),
                         "max": round(max(values), 3), "mean": round(statistics.fmean(values), 3)}
    whole = out.get("create_to_bound", {})
    out["goal"] = {"p50_s": GOAL_P50_S, "p99_s": GOAL_P99_S,
                   "met": bool(whole) and whole["p50"] < GOAL_P50_S and whole["p99"] < GOAL_P99_S}
    return out


def sample_phase(number: int, samples: int, rounds: int) -> float:
    """Sample ``number``'s phase of the second: each round's samples spread evenly over the whole second
    (Slurm's tick makes the phase worth up to a second of queue wait), the rounds offset from each other."""
    within, round_ = number % samples, number // samples
    return (within + round_ / rounds) / samples


def spread(rounds: list[list[dict]]) -> dict:
    """Each round's p50 and p99 of create → bound, and their range over the rounds."""
    p50s = [percentile([s["p50_s"] for s in r], 50) for r in rounds if r]
    p99s = [percentile([s["p50_s"] for s in r], 99) for r in rounds if r]
    return {"round_p50s": [round(v, 3) for v in p50s], "round_p99s": [round(v, 3) for v in p99s],
            "p50_range": [round(min(p50s), 3), round(max(p50s), 3)] if p50s else [],
            "p99_range": [round(min(p99s), 3), round(max(p99s), 3)] if p99s else []}


CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
DRA_MAPPING = f"driver={realnode.DRA_DRIVER},device-class={realnode.DEVICE_CLASS},name={realnode.DEVICE_NAME}"
TEMPLATE = "one-gpu"


def gpu_pod(name: str, claim: bool) -> dict:
    """One GPU on the real Node's partition: through a claim of ``TEMPLATE``, or as nvidia.com/gpu."""
    resources: dict = {"requests": {"cpu": "1", "memory": "64Mi"}}
    spec: dict = {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 1}
    if claim:
        resources["claims"] = [{"name": "gpu"}]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]
    else:
        resources["limits"] = {"nvidia.com/gpu": "1"}
    spec["containers"] = [{"name": "c", "image": realnode.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                           "command": ["/bin/sleep", "3600"], "resources": resources}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {names.ANN_PARTITION: realnode.SLURM_PARTITION}}, "spec": spec}


def gpu_workload(claim: bool, number: int) -> Workload:
    return Workload("pod", 1, f"{'claim' if claim else 'plugin'}{number:03d}",
                    lambda api, namespace, name: kc.create(api, PODS, gpu_pod(name, claim), namespace),
                    lambda obj: obj["metadata"]["name"])


def one_gpu_template(api, namespace: str) -> None:
    kc.create(api, CLAIM_TEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                     "metadata": {"name": TEMPLATE}, "spec": {"spec": {"devices": {"requests": [
                                         {"name": "gpu", "exactly": {"deviceClassName": realnode.DEVICE_CLASS,
                                                                     "count": 1}}]}}}}, namespace)


def by_kind(rounds: list[list[dict]]) -> dict:
    """Each kind's figures over all samples, and per round the claim Pods' median ÷ the device-plugin Pods'."""
    out: dict = {kind: summary([s for r in rounds for s in r if s["kind"] == kind]) for kind in ("plugin", "claim")}
    ratios = []
    for r in rounds:
        medians = {kind: percentile([s["p50_s"] for s in r if s["kind"] == kind], 50) for kind in ("plugin", "claim")
                   if any(s["kind"] == kind for s in r)}
        if len(medians) == 2 and medians["plugin"] > 0:
            ratios.append(round(medians["claim"] / medians["plugin"], 3))
    out["claim_over_plugin_per_round"] = ratios
    out["claim_over_plugin_range"] = [min(ratios), max(ratios)] if ratios else []
    return out


def run(cluster: DevCluster, args: argparse.Namespace) -> int:
    cluster.up()
    from sunk.kube.client import load_api_client

    api = load_api_client(str(cluster.kubeconfig))
    log_dir = Path(tempfile.mkdtemp(prefix="sunk-bench-create-bound-"))
    metrics_url = f"http://127.0.0.1:{PORTS['metrics']}/metrics"
    namespace = create_namespace(api)
    if args.dra:
        one_gpu_template(api, namespace)
    scheduler = scheduler_process(cluster, namespace, args.workers, log_dir,
                                  extra=(f"--dra-device-mapping={DRA_MAPPING}",) if args.dra else ())
    rounds: list[list[dict]] = [[] for _ in range(args.rounds)]
    total = args.rounds * args.samples
    with pinned_cpus(cluster, args.pin_cpus) as pinning, scheduling(cluster, api, namespace, scheduler) as running:
        assert running.proc is not None
        for number in range(total):
            drain_pods(cluster, api, namespace)  # (the previous sample's Pod, and an idle Slurm)
            claim = number % 2 == 1
            workload = gpu_workload(claim, number) if args.dra else \
                dataclasses.replace(SINGLE_PODS, prefix=f"one{number:03d}")
            sample = pod_path(cluster, api, namespace, 1, metrics_url, running.proc.pid, running.log,
                              workload, phase=sample_phase(number, args.samples, args.rounds))
            sample.pop("scheduler_profile", None)
            if args.dra:
                sample["kind"] = "claim" if claim else "plugin"
            rounds[number // args.samples].append(sample)
            print(json.dumps({"round": number // args.samples, "sample": number,
                              **{k: v for k, v in sample.items() if k.endswith("_s") or k in ("slurm_calls", "kind")}}),
                  flush=True)
    samples = [s for r in rounds for s in r]
    kinds = by_kind(rounds) if args.dra else {}
    print(json.dumps({**summary(samples), **spread(rounds), **kinds, "pinned": pinning, "logs": str(log_dir)},
                     indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=10, help="Pods per round, one at a time")
    parser.add_argument("--workers", type=int, default=4, help="the scheduler's workers (the chart's default)")
    parser.add_argument("--dra", action="store_true",
                        help="alternate a device-plugin GPU Pod and a ResourceClaim GPU Pod on the real Node")
    parser.add_argument("--pin-cpus", action="store_true",
                        help="the scheduler on CPUs of its own, as benchmarks/scheduler.py does")
    args = parser.parse_args(argv)
    cluster = DevCluster.for_tests()
    with cluster.claimed("benchmarks/create_bound.py"):
        return run(cluster, args)


if __name__ == "__main__":
    raise SystemExit(main())
