"""sunk's own drains are lifted once their cause is gone (issue 18, item 2), on the real dev cluster.

The measured bug: with the scheduler killed, running placeholders cancelled with scancel;
their node was drained by the placeholder after KillWait, and 45 s after the scheduler came
back and the Pods were gone it was still drained. Here: a scheduler under test places Pods
on node3; a Syncer under test (stand-in slurmd Pods for node3/node4, no plugins, see
syncer_harness.py) manages node3; the scheduler is killed, the jobs are cancelled, the
placeholder drains node3 itself; the drain must stay while the Pods run there, and go
within seconds once the restarted scheduler has deleted them.

The placeholder is told KillWait is 12 s (``--slurm-kill-wait``), so it drains 9 s after
scancel, not 27 s; Slurm's own KillWait (30 s) only bounds how long it may take.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_testns import create_namespace, purge_namespace
from slurmtools import slurm_job, state
from syncer_harness import NODES_UNDER_TEST, Cluster, SyncerUnderTest, never, restore_slurm_node, wait_for
from test_scheduler import create_pod, gone, placed, pod_manifest, scheduler_process, serving

from sunk.kube import client as kc
from sunk.kube.resources import PODS
from sunk.model import names
from sunk.translate import drains

NODE = NODES_UNDER_TEST[0]  # node3
KILL_WAIT = 12  # what the placeholder is told; grace (5 s) must stay within KillWait - 5
PORTS = {"hooks": 18400, "metrics": 18480, "probes": 18481}
FINALIZER = "sunk.test/outlive"
LIFTED_WITHIN = 10.0  # "within seconds": one Pod event, one reconcile, one fresh read, one write


@pytest.fixture(scope="module")
def syncer(dev_cluster, kube_api) -> Iterator[tuple[Cluster, SyncerUnderTest]]:
    """A Syncer managing node3/node4 through stand-in slurmd Pods (Ready), and both nodes clean."""
    namespace, run_id = create_namespace(kube_api), uuid.uuid4().hex[:8]
    cluster = Cluster(dev_cluster, kube_api, namespace)
    for name in NODES_UNDER_TEST:
        restore_slurm_node(cluster, name)
    proc = SyncerUnderTest(dev_cluster, namespace, run_id, Path(tempfile.gettempdir()) / "sunk-drain-tests" / run_id)
    try:
        for name in NODES_UNDER_TEST:
            cluster.create_pod(name, run_id)
        for name in NODES_UNDER_TEST:
            cluster.wait_pod_ready(name)
        proc.start()
        for name in NODES_UNDER_TEST:  # leading and reconciling: its facts reached Slurm
            wait_for(lambda n=name: '"pod"' in cluster.node(n).extra, 30, f"Extra of {name} written")
        yield cluster, proc
    finally:
        proc.stop()
        if proc.process.proc is not None:
            print(proc.process.tail(80))
        purge_namespace(kube_api, namespace)
        for name in NODES_UNDER_TEST:
            restore_slurm_node(cluster, name)


@pytest.fixture(scope="module")
def scheduler(dev_cluster, kube_api, tmp_path_factory) -> Iterator[tuple[str, Any]]:
    namespace = create_namespace(kube_api)
    proc = scheduler_process(dev_cluster, namespace, tmp_path_factory.mktemp("drain-scheduler"), ports=PORTS,
                             extra_args=(f"--slurm-kill-wait={KILL_WAIT}s",))
    with serving(kube_api, dev_cluster, proc, namespace):
        yield namespace, proc


def sunk_drain(cluster: Cluster) -> drains.SunkDrain | None:
    node = cluster.node(NODE)
    return drains.parse(node.reason) if node.drained else None


def test_a_placeholder_drain_made_while_the_scheduler_was_down_is_lifted_once_its_pods_are_gone(
        dev_cluster, kube_api, syncer, scheduler):
    cluster, syncer_proc = syncer
    namespace, scheduler_proc = scheduler
    wait_for(lambda: dev_cluster.slurm("sinfo", "-h", "-n", NODE, "-o", "%T").stdout.strip() == "idle", 120,
             f"{NODE} to be idle", interval=1)
    pods = [create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: NODE})["metadata"]["name"]
            for _ in range(3)]
    jobs = {name: placed(kube_api, dev_cluster, namespace, name, timeout=60)[0] for name in pods}
    try:
        scheduler_proc.kill()
        for job_id in jobs.values():
            dev_cluster.slurm("scancel", str(job_id))
        # Nobody deletes the Pods: each placeholder waits out KillWait and drains the node itself.
        drain = wait_for(lambda: sunk_drain(cluster), KILL_WAIT + 30, f"{NODE} drained by a placeholder",
                         interval=0.5)
        assert isinstance(drain, drains.PlaceholderDrain), drain
        assert drain.namespace == namespace and jobs.get(drain.name) == drain.job_id, (drain, jobs)
        # Its cause is present: the Pods still run on the node. The Syncer keeps the drain.
        never(lambda: not cluster.node(NODE).drained, 5, f"{NODE} undrained while the Pods still run on it",
              interval=0.5)
        for job_id in jobs.values():
            wait_for(lambda j=job_id: state(slurm_job(dev_cluster, j)) in ("CANCELLED", "FAILED", None)
                     and "COMPLETING" not in slurm_job(dev_cluster, j).get("job_state", []), 40, f"job {job_id} to end")
    finally:
        scheduler_proc.start()
    # The restarted scheduler (once the old Lease expired) deletes the Pods whose jobs ended.
    for name in pods:
        wait_for(lambda n=name: gone(kube_api, namespace, n), 90, f"{name} to be deleted", interval=0.5)
    gone_at = time.monotonic()
    wait_for(lambda: not cluster.node(NODE).drained, LIFTED_WITHIN, f"{NODE} undrained after its Pods went",
             interval=0.2)
    lifted_after = time.monotonic() - gone_at
    print(f"placeholder drain lifted {lifted_after:.1f}s after the last Pod was gone")
    assert syncer_proc.alive
    undrains = [line for line in syncer_proc.log_lines() if "undrain" in str(line.get("msg", line.get("message", "")))]
    assert undrains, "the Syncer logged no undrain"


def test_a_persons_drain_that_looks_like_sunks_is_never_lifted(dev_cluster, kube_api, syncer):
    cluster, _ = syncer
    reason = "ops: k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42"  # not the whole form
    cluster.drain(NODE, reason)
    try:
        never(lambda: not cluster.node(NODE).drained, 5, f"{NODE} undrained by the Syncer", interval=0.5)
        assert cluster.node(NODE).reason == reason
    finally:
        cluster.undrain(NODE)


def _outliving_pod(kube_api, dev_cluster, namespace: str) -> tuple[str, int]:
    """A Pod placed on NODE that outlives its job's KillWait (a finalizer keeps it), and its job."""
    wait_for(lambda: dev_cluster.slurm("sinfo", "-h", "-n", NODE, "-o", "%T").stdout.strip() == "idle", 120,
             f"{NODE} to be idle", interval=1)
    manifest = pod_manifest(f"p-{uuid.uuid4().hex[:6]}", annotations={names.ANN_REQUIRED_NODES: NODE})
    manifest["metadata"]["finalizers"] = [FINALIZER]
    name = kc.create(kube_api, PODS, manifest, namespace)["metadata"]["name"]
    return name, placed(kube_api, dev_cluster, namespace, name, timeout=60)[0]


@pytest.mark.parametrize("path", ["hook", "fallback"])
def test_an_operators_drain_survives_the_placeholders_drain(dev_cluster, kube_api, syncer, scheduler, path):
    """An operator drains the node ("hardware: fan") while a placeholder's Pod outlives KillWait. Slurm keeps one
    reason per node: the scheduler's drain hook, or the placeholder's own fallback when the scheduler is down,
    used to write a ``k8s:`` reason over it, which the Syncer lifted once the Pod was gone: a faulty node back
    in service. Both now leave it, and so does the Syncer."""
    cluster, _ = syncer
    namespace, scheduler_proc = scheduler
    name, job_id = _outliving_pod(kube_api, dev_cluster, namespace)
    try:
        if path == "fallback":
            scheduler_proc.kill()  # the placeholder's calls then fail: it drains by itself
        dev_cluster.slurm("scancel", str(job_id))
        cluster.drain(NODE, "hardware: fan")
        wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", None)
                 and "COMPLETING" not in slurm_job(dev_cluster, job_id).get("job_state", []), KILL_WAIT + 40,
                 "the placeholder to give up on its Pod after KillWait", interval=0.5)
        assert cluster.node(NODE).reason == "hardware: fan", cluster.node(NODE).reason
        if path == "hook":
            assert f"left {NODE} as it is" in scheduler_proc.log.read_text()
        else:
            scheduler_proc.start()  # (it deletes the Pod whose job ended, once the old Lease expired)
        kc.patch(kube_api, PODS, name, {"metadata": {"finalizers": None}}, namespace)
        wait_for(lambda: gone(kube_api, namespace, name), 90, "the Pod to be gone", interval=0.5)
        never(lambda: cluster.node(NODE).reason != "hardware: fan", 5, "the operator's reason replaced or lifted",
              interval=0.5)
        assert cluster.node(NODE).drained
    finally:
        if scheduler_proc.proc is None or scheduler_proc.proc.poll() is not None:
            scheduler_proc.start()
        try:
            kc.patch(kube_api, PODS, name, {"metadata": {"finalizers": None}}, namespace)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
        cluster.undrain(NODE)
