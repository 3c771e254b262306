"""The fault matrix's invariants (tests/cluster/invariants.py) on worlds made by hand: each one holds for a
sound cluster and names the breach for a broken one, so that a green matrix means something. The Slurm
objects start from what slurmctld 24.11 really answered (slurm_v0042/*.json)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "cluster"))  # (the cluster tests import it by name)

from invariants import JobHistory, Scope, World, violations

from sunk.model import names
from sunk.translate.identity import PlaceholderIdentity
from sunk.translate.keys import PodKey

RECORDED = Path(__file__).parent / "slurm_v0042"
NS = "matrix"
SCOPE = Scope(NS, frozenset({"sunk-scheduler-test"}), ("node3", "node4"),
              {f"node{i}": f"worker-{i}" for i in range(1, 5)})


def job(job_id: int, uid: str | None = None, state: tuple[str, ...] = ("RUNNING",), nodes: str = "node3",
        name: str = "p", scheduler: str = "sunk-scheduler-test") -> dict[str, Any]:
    """A job as slurmrestd shows it; a placeholder's identity in its AdminComment (its Extra stays the user's),
    naming the scheduler that submitted it."""
    recorded = json.loads((RECORDED / "job_running_gpu.json").read_text())["jobs"][0]
    identity = PlaceholderIdentity(PodKey(uid), NS, name=name, scheduler=scheduler).encode() if uid else ""
    return {**recorded, "job_id": job_id, "job_state": list(state), "nodes": nodes, "admin_comment": identity}


def forged(job_id: int, uid: str, nodes: str = "node3") -> dict[str, Any]:
    """A tenant's job whose Extra (theirs to write) copies a placeholder's identity; its AdminComment is empty."""
    identity = PlaceholderIdentity(PodKey(uid), NS, name="p", scheduler="sunk-scheduler-test")
    return {**job(job_id, nodes=nodes), "extra": identity.encode()}


def slurm_node(name: str, state: tuple[str, ...] = ("IDLE",), reason: str = "") -> dict[str, Any]:
    recorded = next(n for n in json.loads((RECORDED / "nodes.json").read_text())["nodes"] if n["name"] == name)
    return {**copy.deepcopy(recorded), "state": list(state), "reason": reason}


def pod(name: str, uid: str, node: str | None = None, *, namespace: str = NS, scheduler: str = "sunk-scheduler-test",
        annotations: dict[str, str] | None = None, deleting: bool = False, ready: bool = True,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations or {},
                     "labels": labels or {}},
        "spec": {"schedulerName": scheduler, **({"nodeName": node} if node else {})},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-11-24T06:00:00Z"
    return obj


def placed(name: str, uid: str, node: str, job_id: int) -> dict[str, Any]:
    """A Pod sunk-scheduler bound: the binding's annotations name its job and Slurm node."""
    return pod(name, uid, f"worker-{node[-1]}", annotations={names.ANN_JOB_ID: str(job_id), names.ANN_SLURM_NODE: node})


def slurmd(name: str, lock: str = "false", ready: bool = True) -> dict[str, Any]:
    obj = pod(name, f"slurmd-{name}", f"worker-{name[-1]}", namespace="slurm", scheduler="default-scheduler",
              annotations={names.LOCK_KEY: lock}, ready=ready, labels={"app.kubernetes.io/name": "slurmd"})
    obj["spec"]["hostname"] = name
    return obj


def k8s_node(name: str, *, tainted: bool = False, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"taints": [{"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}] if tainted else []},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}]}}


def world(jobs=(), pods=(), events=(), *, node3=("IDLE",), reason3="", lock3="false", tainted3=False,
          slurmd3_ready=True, worker3_ready=True) -> World:
    return World(
        jobs=tuple(jobs),
        nodes={"node3": slurm_node("node3", node3, reason3), "node4": slurm_node("node4")},
        pods=(slurmd("node3", lock3, slurmd3_ready), slurmd("node4"), *pods),
        events=tuple(events),
        k8s_nodes={"worker-3": k8s_node("worker-3", tainted=tainted3, ready=worker3_ready),
                   "worker-4": k8s_node("worker-4")})


MANY_DRAIN = "k8s: sunk-lock: job 12138: strict lock timeout after 45s: 5 Pods bound to Node worker-3 by " \
             "2026-11-24T06:00:00Z, taint effect NoSchedule"


def stuck(name: str, bound_at: str, *tolerations: dict[str, str]) -> dict[str, Any]:
    """A Pod of another scheduler bound to worker-3 at ``bound_at``, terminating (its kubelet gone, say)."""
    obj = pod(name, f"uid-{name}", "worker-3", scheduler="default-scheduler", deleting=True)
    obj["status"]["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": bound_at})
    obj["spec"]["tolerations"] = list(tolerations)
    return obj


GANG_LABELS = {"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "ju"}
GANG_DRAIN = f"k8s: sunk-placeholder: gang {NS}/job/ju outlived KillWait after job 9"


def gang_job(job_id: int, state: tuple[str, ...] = ("RUNNING",), nodes: str = "node3",
             scheduler: str = "sunk-scheduler-test") -> dict[str, Any]:
    """The placeholder job of a Job's gang (its AdminComment: sunk.translate.identity.PlaceholderIdentity)."""
    return {**job(job_id, state=state, nodes=nodes),
            "admin_comment": f"sunk-gang=job/ju ns={NS} size=2 members=aaaaaaaa,bbbbbbbb sched={scheduler}"}


def member(name: str, uid: str, node: str | None, job_id: int | None = None, phase: str = "Running") -> dict[str, Any]:
    """A Pod of that Job; bound by the gang's job ``job_id`` on Slurm node ``node`` when given."""
    annotations = {names.ANN_JOB_ID: str(job_id), names.ANN_SLURM_NODE: node} if job_id and node else {}
    obj = pod(name, uid, f"worker-{node[-1]}" if node else None, annotations=annotations, labels=GANG_LABELS)
    obj["status"]["phase"] = phase
    return obj


OTHER = "other-scheduler"  # a scheduler not sunk's (another install's sharing Slurm, kube-scheduler)


def copycat(name: str, uid: str, node: str, job_id: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Pod of another scheduler on ``node``'s Node whose author copied the annotations of a Pod sunk placed there
    (and ``labels``, a gang's, say): anyone may write them; they speak for sunk only on its schedulers' Pods."""
    return pod(name, uid, f"worker-{node[-1]}", scheduler="default-scheduler", labels=labels,
               annotations={names.ANN_JOB_ID: str(job_id), names.ANN_SLURM_NODE: node})


PLACEHOLDER_DRAIN = f"k8s: sunk-placeholder: pod {NS}/p outlived KillWait after job 1"


def busy(jobs=(), pods=(), **kw) -> World:
    """node3 running a placeholder, strictly locked, its Node tainted: as it should be."""
    return world(jobs, pods, node3=kw.pop("node3", ("MIXED",)), lock3=kw.pop("lock3", "locked_strict"),
                 tainted3=kw.pop("tainted3", True), **kw)


SOUND = {
    "idle": world(),
    "a bound Pod whose job runs there": busy([job(1, "u1")], [placed("p", "u1", "node3", 1)]),
    "a waiting Pod told why": world([job(1, "u1", ("PENDING",), "")], [pod("p", "u1")],
                                    [{"reason": "WaitingForSlurm", "involvedObject": {"name": "p", "uid": "u1"}}]),
    "a job that ended, its Pod gone": world([job(1, "u1", ("CANCELLED",))]),
    "an evicted Pod still terminating on a locked node": busy(
        [job(1, "u1")], [placed("p", "u1", "node3", 1), pod("web", "w", "worker-3", scheduler="default-scheduler",
                                                             deleting=True)]),
    "the placeholder's drain while its Pod is still there": busy(
        [job(2, "u1")], [placed("p", "u1", "node3", 2)], node3=("MIXED", "DRAIN"),
        reason3=f"k8s: sunk-placeholder: pod {NS}/p outlived KillWait after job 1"),
    "the stuck-Pod drain while the Node is NotReady": world(
        node3=("IDLE", "DRAIN"), worker3_ready=False,
        reason3=f"k8s: sunk-stuck: pod {NS}/p uid=u1 stuck terminating on Node worker-3 (NotReady or gone) "
                "after job 4"),
    "the Syncer's drain while the slurmd Pod is not Ready": world(
        node3=("IDLE", "DRAIN"), reason3="k8s: slurmd pod slurm/node3 is not ready", slurmd3_ready=False),
    "a gang's member bound where its job runs, another waiting": busy(
        [gang_job(9)], [member("train-0", "m0", "node3", 9), member("train-1", "m1", None)],
        events=[{"reason": "WaitingForSlurm", "involvedObject": {"name": "train-1", "uid": "m1"}}]),
    "a gang's finished member kept by its Job, its job over": world(
        [gang_job(9, ("COMPLETED",))], [member("train-0", "m0", "node3", 9, phase="Succeeded")]),
    "the gang's drain while a job of the gang holds the node": busy(
        [gang_job(9, ("CANCELLED",)), gang_job(10)], [member("train-0", "m0", "node3", 10)],
        node3=("MIXED", "DRAIN"), reason3=GANG_DRAIN),
    "a drain that counts the Pods while one bound by its time still terminates": world(
        [], [stuck("web-0", "2026-11-24T05:59:59Z")], node3=("IDLE", "DRAIN"), reason3=MANY_DRAIN),
    "a drain that counts the Pods while one tolerating another effect than its taint's is there": world(
        [], [stuck("web-0", "2026-11-24T05:59:59Z", {"key": names.LOCK_KEY, "operator": "Exists",
                                                     "effect": "NoExecute"})],
        node3=("IDLE", "DRAIN"), reason3=MANY_DRAIN),
    # Extra is the tenant's: an identity copied there makes no placeholder (no orphan, no strict lock owed) ...
    "a tenant's job with a gone Pod's identity in its Extra, under a normal lock": world(
        [forged(5, "u9")], node3=("MIXED",), lock3="locked", tainted3=True),
    # ... and no second job of the Pod it names.
    "a tenant's job with a bound Pod's identity in its Extra beside that Pod's job": busy(
        [job(1, "u1"), forged(5, "u1")], [placed("p", "u1", "node3", 1)]),
    # Another scheduler's jobs are not sunk's: never to cancel, never a second job of sunk's Pod ...
    "another scheduler's job whose Pod is gone, left to it": world([job(1, "u9", ("PENDING",), "", scheduler=OTHER)]),
    "another scheduler's gang job whose Pods are gone, left to it": busy([gang_job(9, scheduler=OTHER)]),
    "a Pod sunk bound beside another scheduler's job naming its UID": busy(
        [job(1, "u1"), job(2, "u1", scheduler=OTHER)], [placed("p", "u1", "node3", 1)]),
}


@pytest.mark.parametrize("name", SOUND)
def test_a_sound_cluster_breaks_no_invariant(name):
    assert violations(SOUND[name], SCOPE) == []


BROKEN = {
    "two jobs for one Pod": (busy([job(1, "u1"), job(2, "u1", ("CANCELLED",))], [placed("p", "u1", "node3", 1)]),
                             "2 placeholder jobs"),
    "a job whose Pod is gone": (world([job(1, "u9", ("PENDING",), "")]), "which is gone"),
    "a Pod bound without its job": (world(pods=[placed("p", "u1", "node3", 1)]), "Slurm holds no job of it"),
    "a Pod bound where its job does not run": (busy([job(1, "u1")], [placed("p", "u1", "node4", 1)]),
                                               "bound to Node worker-4, but no job of it runs there"),
    "a waiting Pod nobody told why": (world([job(1, "u1", ("PENDING",), "")], [pod("p", "u1")]), "no Event says why"),
    "an idle node left locked": (world(lock3="locked", tainted3=True), "idle node"),
    "a busy node not locked": (world([job(5)], node3=("MIXED",)), "wanted: locked, tainted"),
    "a placeholder under a normal lock": (busy([job(1, "u1")], [placed("p", "u1", "node3", 1)], lock3="locked"),
                                          "wanted: locked_strict"),
    "a Pod the lock did not evict": (busy([job(1, "u1")], [placed("p", "u1", "node3", 1),
                                                          pod("web", "w", "worker-3", scheduler="default-scheduler")]),
                                     "should have evicted"),
    "the placeholder's drain after its Pod went": (
        world(node3=("IDLE", "DRAIN"), reason3=f"k8s: sunk-placeholder: pod {NS}/p outlived KillWait after job 1"),
        "its cause is gone"),
    "the prolog's outage drain once the lock agrees again": (
        world(node3=("IDLE", "DRAIN"), reason3="k8s: sunk-lock: job 12: hook API unreachable (HTTP 000, 20 attempts)"),
        "its cause is gone"),
    "the stuck-Pod drain once the Pod is gone and the Node Ready": (
        world(node3=("IDLE", "DRAIN"),
              reason3=f"k8s: sunk-stuck: pod {NS}/p uid=u1 stuck terminating on Node worker-3 (NotReady or gone) "
                      "after job 4"),
        "its cause is gone"),
    "the Syncer's drain once its slurmd Pod is Ready": (
        world(node3=("IDLE", "DRAIN"), reason3="k8s: slurmd pod slurm/node3 is not ready"), "the condition is gone"),
    "a prolog drain nothing lifts": (
        world(node3=("IDLE", "DRAIN"), reason3="sunk-lock: job 3: pre-hook failed with HTTP 401"), "nothing lifts"),
    "a drain that counts the Pods once those bound by its time are gone": (
        world([], [stuck("web-9", "2026-11-24T06:00:01Z")], node3=("IDLE", "DRAIN"), reason3=MANY_DRAIN),
        "its cause is gone"),
    "a drain that counts the Pods once only Pods tolerating its taint are left": (
        world([], [stuck("log-0", "2026-11-24T05:59:59Z", {"key": names.LOCK_KEY, "operator": "Exists",
                                                           "effect": "NoSchedule"})],
              node3=("IDLE", "DRAIN"), reason3=MANY_DRAIN),
        "its cause is gone"),
    "Slurm's own drain": (world(node3=("IDLE", "DRAIN"), reason3="Prolog error"), "not by sunk"),
    "a gang's job whose Pods are all gone": (busy([gang_job(9)]), "whose Pods are all gone"),
    "a gang's member bound where no job of its gang runs": (
        world([gang_job(9, ("COMPLETED",))], [member("train-0", "m0", "node3", 9)]), "no job of it runs there"),
    "a gang's job under a normal lock": (
        busy([gang_job(9)], [member("train-0", "m0", "node3", 9)], lock3="locked"), "wanted: locked_strict"),
    # ... and a Pod of another scheduler is never sunk's, whatever it copied: no drain, no gang's job kept by it,
    # and the lock evicts it.
    "the placeholder's drain kept only by another scheduler's Pod of the same name": (
        world(pods=[pod("p", "u2", "worker-3", scheduler="default-scheduler")], node3=("IDLE", "DRAIN"),
              reason3=PLACEHOLDER_DRAIN), "its cause is gone"),
    "the placeholder's drain kept only by a copycat of a Pod sunk placed": (
        world(pods=[copycat("c", "uc", "node3", 1)], node3=("IDLE", "DRAIN"), reason3=PLACEHOLDER_DRAIN),
        "its cause is gone"),
    "the gang's drain kept only by a copycat member": (
        world([gang_job(9, ("CANCELLED",))], [copycat("train-0", "uc", "node3", 9, GANG_LABELS)],
              node3=("IDLE", "DRAIN"), reason3=GANG_DRAIN), "its cause is gone"),
    "a gang's job kept only by another scheduler's Pod with its labels": (
        busy([gang_job(9)], [pod("train-0", "ux", scheduler="default-scheduler", labels=GANG_LABELS)]),
        "whose Pods are all gone"),
    "a copycat the lock did not evict": (
        busy([job(1, "u1")], [placed("p", "u1", "node3", 1), copycat("c", "uc", "node3", 1)]), "should have evicted"),
    "the gang's drain once its member finished": (
        world([gang_job(9, ("CANCELLED",))], [member("train-0", "m0", "node3", 9, phase="Succeeded")],
              node3=("IDLE", "DRAIN"), reason3=GANG_DRAIN), "its cause is gone"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_each_broken_invariant_is_named(name):
    broken, needle = BROKEN[name]
    found = violations(broken, SCOPE)
    assert len(found) == 1 and needle in found[0], found


def test_a_second_job_slurm_already_forgot_is_still_caught():
    history = JobHistory(NS, SCOPE.schedulers)
    history.record([job(7, "u1", ("COMPLETED",))])  # seen earlier; purged since (MinJobAge)
    found = violations(SOUND["a bound Pod whose job runs there"], SCOPE, history)
    assert len(found) == 1 and "job 7 (COMPLETED on node3)" in found[0] and "job 1 (RUNNING on node3)" in found[0]


def test_the_cluster_tests_started_placeholder_reads_a_lone_pods_and_a_gangs_owner():
    """tests/cluster/slurmtools.started_placeholder, which the cluster tests wait on: a job read as slurmrestd
    shows it, started, names its owner (a Pod's UID, a gang's gang:<ns>/<key>) in its AdminComment only."""
    from slurmtools import started_placeholder

    lone = {"job_id": 1, "job_state": ["RUNNING"], "admin_comment": f"sunk-pod=u1 ns={NS} name=p sched=s"}
    gang = {**gang_job(2), "job_id": 2}
    assert started_placeholder(lone, "u1") and not started_placeholder(lone, "u2")
    assert started_placeholder(gang, f"gang:{NS}/job/ju")
    assert not started_placeholder({**lone, "admin_comment": "", "comment": lone["admin_comment"]}, "u1")
    assert not started_placeholder({**lone, "state_reason": "Prolog"}, "u1")
