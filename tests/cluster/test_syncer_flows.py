"""The Syncer's flows against the real dev cluster: one side changed for real, the other side asserted for real.

The syncer runs as a subprocess (``python -m sunk.commands.syncer``) on stand-in slurmd Pods
for node3 and node4 in a namespace of its own (see syncer_harness.py). Each test undoes
its changes in ``finally``: cordons, drains, Pod readiness, Extra.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_testns import create_namespace, purge_namespace
from syncer_harness import (
    NODES_UNDER_TEST,
    TEST_LABEL,
    Cluster,
    SyncerUnderTest,
    never,
    restore_slurm_node,
    wait_for,
)

from sunk.base.times import rfc3339
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.resources import NODES, PODS
from sunk.model import names
from sunk.translate import objects
from sunk.translate.nodestate import pending_deletion_reason
from sunk.translate.podcordon import COND_POD_CORDONED
from sunk_dev import kubelet, slurmconf

A, B = NODES_UNDER_TEST  # node3, node4
PROPAGATION = 10.0  # generous bound for one propagation on a loaded 2-core machine (the benchmark measures it)
RTS = 20.0  # slurmctld returning a DOWN node whose slurmd answers (ReturnToService=2): about 3 s in CI
# slurmctld pings every slurmd each SlurmdTimeout/3 (slurmconf: SlurmdTimeout=30) and marks one that does not
# answer NOT_RESPONDING at once: within 10 s of its stop, 20 s with a ping in flight; the rest is load.
NOT_RESPONDING_AFTER = 60.0


@pytest.fixture(scope="module")
def env(dev_cluster, kube_api, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """Namespace, stand-in Pods (Ready), clean Slurm nodes; removed afterwards."""
    namespace = create_namespace(kube_api)
    run_id = uuid.uuid4().hex[:8]
    cluster = Cluster(dev_cluster, kube_api, namespace)
    for name in NODES_UNDER_TEST:
        restore_slurm_node(cluster, name)
    try:
        for name in NODES_UNDER_TEST:
            cluster.create_pod(name, run_id)
        for name in NODES_UNDER_TEST:
            cluster.wait_pod_ready(name)
        log_dir = Path(tempfile.gettempdir()) / "sunk-syncer-tests" / run_id  # outlives pytest's tmp rotation
        yield {"namespace": namespace, "run_id": run_id, "cluster": cluster, "log_dir": log_dir}
    finally:
        for name in NODES_UNDER_TEST:
            cluster.uncordon(dev_cluster.k8s_node_for(name))
        purge_namespace(kube_api, namespace)
        for name in NODES_UNDER_TEST:
            restore_slurm_node(cluster, name)


@pytest.fixture(scope="module")
def syncer(env, dev_cluster) -> Iterator[SyncerUnderTest]:
    proc = SyncerUnderTest(dev_cluster, env["namespace"], env["run_id"], env["log_dir"]).start()
    cluster: Cluster = env["cluster"]
    try:
        for name in NODES_UNDER_TEST:  # leading and reconciling: our facts reached Slurm
            wait_for(lambda n=name: _syncer_extra(cluster, n).get("pod"), 30, f"Extra of {name} written")
        yield proc
    finally:
        proc.stop()
        if proc.process.proc is not None:
            print(proc.process.tail(80))


@pytest.fixture
def cluster(env, syncer) -> Iterator[Cluster]:
    """Per test: the shared syncer running, both nodes clean and Ready before and after."""
    c: Cluster = env["cluster"]
    _clean(c, env)
    try:
        yield c
    finally:
        _clean(c, env)
        assert syncer.alive, syncer.process.tail()


def _clean(c: Cluster, env: dict[str, Any]) -> None:
    for name in NODES_UNDER_TEST:
        c.uncordon(c.dev.k8s_node_for(name))
        if c.pod(name) is None:
            c.create_pod(name, env["run_id"])
        c.set_pod_ready(name, True)
    for name in NODES_UNDER_TEST:
        node = c.node(name)
        if node.drained and node.reason.startswith("syncer-test"):
            c.undrain(name)
        if node.down and node.reason.startswith("syncer-test"):
            c.scontrol(f"nodename={name}", "state=resume")
    for name in NODES_UNDER_TEST:
        wait_for(lambda n=name: not c.node(n).drained, PROPAGATION, f"{name} undrained")


def _syncer_extra(c: Cluster, name: str) -> dict[str, Any]:
    try:
        value = json.loads(c.node(name).extra or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _k8s_drained(c: Cluster, name: str) -> str | None:
    node = c.node(name)
    return node.reason if node.drained and node.reason.startswith(names.K8S_DRAIN_PREFIX) else None


# ---- Kubernetes -> Slurm ---------------------------------------------------------------------------------


def test_cordon_drains_with_k8s_reason_carrying_the_cordon_reason(cluster: Cluster):
    worker = cluster.dev.k8s_node_for(A)
    try:
        cluster.cordon(worker, "syncer-test: swapping a PSU")
        reason = wait_for(lambda: _k8s_drained(cluster, A), PROPAGATION, f"k8s: drain of {A}")
        assert "swapping a PSU" in reason
        marker = cluster.pod_condition(A, COND_POD_CORDONED)
        assert marker and marker["status"] == "True" and marker.get("message") == "syncer-test: swapping a PSU"
        assert not cluster.node(B).drained  # only the cordoned Node's Slurm node

        cluster.uncordon(worker)
        wait_for(lambda: not cluster.node(A).drained, PROPAGATION, f"{A} undrained after uncordon")
        marker = cluster.pod_condition(A, COND_POD_CORDONED)
        assert marker and marker["status"] == "False"
    finally:
        cluster.uncordon(worker)


def test_cordon_without_reason_still_drains_with_k8s_prefix(cluster: Cluster):
    worker = cluster.dev.k8s_node_for(B)
    try:
        cluster.cordon(worker, None)
        reason = wait_for(lambda: _k8s_drained(cluster, B), PROPAGATION, f"k8s: drain of {B}")
        assert "cordon" in reason.lower()
    finally:
        cluster.uncordon(worker)
    wait_for(lambda: not cluster.node(B).drained, PROPAGATION, f"{B} undrained")


def _offer_gpus(cluster: Cluster, worker: str, gpus: str | None) -> None:
    """The stand-in kubelet's Node offers ``gpus`` (None: as many as Slurm counts), now and at its next status."""
    kc.patch(cluster.api, NODES, worker, {"metadata": {"annotations": {kubelet.GPUS_ANNOTATION: gpus}}})
    capacity = kubelet.capacity_of({"metadata": {"annotations": {kubelet.GPUS_ANNOTATION: gpus}}} if gpus else None)
    kc.patch(cluster.api, NODES, worker, {"status": {"capacity": capacity, "allocatable": capacity}},
             subresource="status")


def test_a_node_offering_fewer_gpus_than_slurm_counts_drains_until_it_offers_them_all(cluster: Cluster):
    """A GPU fell off the bus: the device plugin's allocatable drops, Slurm's count does not, and the kubelet
    would reject every Pod Slurm places there asking for them all (a loop), a batch job would get a missing GPU."""
    worker = cluster.dev.k8s_node_for(A)
    counted = slurmconf.NODE_GPUS
    try:
        _offer_gpus(cluster, worker, str(counted - 1))
        reason = wait_for(lambda: _k8s_drained(cluster, A), PROPAGATION, f"k8s: drain of {A}")
        assert reason == (f"{names.K8S_DRAIN_PREFIX} node {worker} offers {counted - 1} of the {counted} GPUs "
                          f"Slurm counts (nvidia.com/gpu allocatable)")
        assert not cluster.node(B).drained
    finally:
        _offer_gpus(cluster, worker, None)
    wait_for(lambda: not cluster.node(A).drained, PROPAGATION, f"{A} undrained once its Node offers every GPU")


@pytest.mark.every_release
def test_pod_not_ready_drains_and_ready_undrains(cluster: Cluster):
    cluster.set_pod_ready(A, False)
    reason = wait_for(lambda: _k8s_drained(cluster, A), PROPAGATION, f"k8s: drain of {A}")
    assert "ready" in reason.lower()
    cluster.set_pod_ready(A, True)
    wait_for(lambda: not cluster.node(A).drained, PROPAGATION, f"{A} undrained")


def _downs(syncer: SyncerUnderTest, name: str) -> list[str]:
    """The Syncer's log lines setting ``name`` DOWN (a deleted slurmd Pod, sunk.translate.poddown)."""
    return [str(r.get("msg", "")) for r in syncer.log_lines() if str(r.get("msg", "")).startswith(
        f"slurm node {name}: DOWN ")]


def test_pod_terminating_then_deleted_drains_and_a_new_pod_undrains(cluster: Cluster, env, syncer):
    """Terminating: drained. Gone: set DOWN once (``... deleted``); node4's slurmd runs on the host, so
    ReturnToService=2 returns it within seconds, its DRAIN flag kept; then the drain for the missing Pod
    holds until a Pod is back, with no second DOWN (the deletion is marked in Extra)."""
    before = len(_downs(syncer, B))
    finalizer = "sunk.dev/syncer-test"
    pod = cluster.pod(B)
    assert pod is not None
    kc.patch(cluster.api, PODS, B, {"metadata": {"finalizers": [finalizer]}}, cluster.namespace)
    try:
        kc.delete(cluster.api, PODS, B, cluster.namespace, grace_period_seconds=3)
        terminating = wait_for(lambda: _k8s_drained(cluster, B), PROPAGATION, f"k8s: drain of {B} (terminating)")
        assert "being deleted" in terminating
    finally:  # the finalizer holds the Pod in Terminating until here
        kc.patch(cluster.api, PODS, B, {"metadata": {"finalizers": None}}, cluster.namespace)
    wait_for(lambda: cluster.pod(B) is None, 30, "the deletion to finish")
    gone = wait_for(lambda: (r := _k8s_drained(cluster, B)) and "does not exist" in r and r, PROPAGATION + RTS,
                    f"{B} drain reason to say the Pod is gone (after its DOWN, and ReturnToService)")
    assert cluster.namespace in gone
    downs = _downs(syncer, B)[before:]
    assert len(downs) == 1 and f"k8s: slurmd pod {cluster.namespace}/{B} deleted" in downs[0], downs
    assert _syncer_extra(cluster, B).get("deleted") is True
    cluster.undrain(B)  # someone undrains by hand while the Pod is still missing: drained again
    wait_for(lambda: _k8s_drained(cluster, B), PROPAGATION, f"{B} drained again while its Pod is missing")
    assert not cluster.node(B).down and len(_downs(syncer, B)) == before + 1  # drained, never DOWN again
    cluster.create_pod(B, env["run_id"])
    cluster.wait_pod_ready(B)
    wait_for(lambda: not cluster.node(B).drained, PROPAGATION, f"{B} undrained once its Pod is back")
    assert _syncer_extra(cluster, B).get("deleted") is False  # a new Pod: its own deletion is news again


def test_pod_outside_the_selector_is_not_read_as_deleted(cluster: Cluster):
    """A Pod that exists, seen by another Syncer's selector in the same namespace, is not a deleted Pod.
    Once it is really gone, the node is set DOWN (ReturnToService=2 returns it: node4's slurmd runs on),
    then drained for the missing Pod."""
    kc.patch(cluster.api, PODS, B, {"metadata": {"labels": {TEST_LABEL: "another-syncer"}}}, cluster.namespace)
    never(lambda: _k8s_drained(cluster, B), 3.0, f"{B} drained while its Pod still exists")
    kc.delete(cluster.api, PODS, B, cluster.namespace, grace_period_seconds=0)
    gone = wait_for(lambda: (r := _k8s_drained(cluster, B)) and "does not exist" in r and r, PROPAGATION + RTS,
                    f"{B} drained once the Pod is really gone (after its DOWN, and ReturnToService)")
    assert cluster.namespace in gone


def test_a_slurmd_pod_pending_deletion_is_drained_by_the_syncer_itself(cluster: Cluster):
    """The seeds' "pending deletion" drain, with no NodeSet operator in the namespace: the Syncer drains with the
    operator's own reason (so neither rewrites the other's), keeps it while the Pod also turns not Ready, never
    deletes the Pod (that is the operator's), and lifts the drain once the mark is gone and the Pod Ready."""
    why = "syncer-test: scale-in"
    expected = pending_deletion_reason(f"{cluster.namespace}/{A}", why)
    pod = cluster.pod(A)
    assert pod is not None
    try:
        kp.set_annotations(cluster.api, pod, {names.ANN_PENDING_DELETION: why})
        assert wait_for(lambda: _k8s_drained(cluster, A), PROPAGATION, f"{A} drained for its pending deletion") \
            == expected
        assert not cluster.node(B).drained  # only the marked Pod's Slurm node
        cond = wait_for(lambda: (c := cluster.pod_condition(A, names.COND_SLURM_DRAIN)) and c["status"] == "True"
                        and c, PROPAGATION, "SlurmDrain=True on the marked Pod")
        assert cond.get("message") == expected
        cluster.set_pod_ready(A, False)  # a second Kubernetes cause: the pending deletion's reason stays
        never(lambda: not ((n := cluster.node(A)).drained and n.reason == expected) and (n.state, n.reason), 3.0,
              "the pending-deletion drain lifted or its reason replaced")
        cluster.set_pod_ready(A, True)
        assert cluster.pod(A) is not None and not cluster.pod(A)["metadata"].get("deletionTimestamp")
        kp.set_annotations(cluster.api, cluster.pod(A), {names.ANN_PENDING_DELETION: None})
        wait_for(lambda: not cluster.node(A).drained, PROPAGATION, f"{A} undrained once the mark is gone")
    finally:
        if (current := cluster.pod(A)) is not None:
            kp.set_annotations(cluster.api, current, {names.ANN_PENDING_DELETION: None})


def test_k8s_drain_undone_in_slurm_is_reapplied(cluster: Cluster):
    cluster.set_pod_ready(A, False)
    reason = wait_for(lambda: _k8s_drained(cluster, A), PROPAGATION, f"k8s: drain of {A}")
    cluster.undrain(A)
    assert wait_for(lambda: _k8s_drained(cluster, A), PROPAGATION, "the drain reapplied") == reason


def test_manual_drain_is_never_touched(cluster: Cluster):
    manual = "syncer-test: bad DIMM, ticket 42"
    cluster.drain(A, manual)
    cluster.set_pod_ready(A, False)  # a Kubernetes reason to drain now exists too
    never(lambda: cluster.node(A).reason != manual and cluster.node(A).reason, 3.0, "the manual reason was replaced")
    cluster.set_pod_ready(A, True)  # ... and goes away: the manual drain must stay
    never(lambda: not cluster.node(A).drained, 3.0, "the manual drain was removed")
    assert cluster.node(A).reason == manual


def _fresh_reads(syncer: SyncerUnderTest) -> dict[str, float]:
    """The Syncer's fresh reads before its writes, and its Slurm calls that could be one (its /metrics)."""
    return {"verify": syncer.metric("sunk_syncer_slurm_verify_reads_total"),
            "single": syncer.metric("sunk_syncer_slurm_requests_total", message_type="REQUEST_NODE_INFO_SINGLE"),
            "updates": syncer.metric("sunk_syncer_slurm_requests_total", message_type="REQUEST_UPDATE_NODE")}


def test_one_pod_not_ready_costs_one_read_of_its_node_not_a_list(cluster: Cluster, syncer: SyncerUnderTest):
    """Issue 37 goal 6: the fresh read before a lone write reads the node alone (the lists the node cache
    makes on a change are its own: sunk_syncer_slurm_verify_reads_total counts the fresh reads)."""
    before = _fresh_reads(syncer)
    cluster.set_pod_ready(A, False)
    wait_for(lambda: _k8s_drained(cluster, A), PROPAGATION, f"k8s: drain of {A}")
    wait_for(lambda: _fresh_reads(syncer)["updates"] > before["updates"], PROPAGATION, "the update counted")
    after = _fresh_reads(syncer)
    delta = {k: after[k] - before[k] for k in before}
    assert delta["updates"] == 1, delta  # the drain and Extra in one write
    # Each fresh read a single-node read, none a list. (More than one read may come: a reconcile that the
    # node cache wakes before it shows the drain decides again from a fresh read, which shows it, and writes
    # nothing; CI saw 4 reads for the one write under load.)
    assert delta["verify"] >= 1 and delta["single"] == delta["verify"], delta
    cluster.set_pod_ready(A, True)
    wait_for(lambda: not cluster.node(A).drained, PROPAGATION, f"{A} undrained")


def test_a_persons_drain_just_before_the_syncers_undrain_is_kept(cluster: Cluster, syncer: SyncerUnderTest):
    """The guarantee the fresh read keeps: the Syncer's cache still shows its own ``k8s:`` drain (it polls
    nodes every 250 ms) when the Pod turns Ready; a person replaced that drain a moment before, and the read of
    the node alone, which began after the decision, sees it: no UNDRAIN. Several rounds, so that some of them
    fall before the cache caught up (the fresh read decides) and none may lose the person's drain."""
    manual = "syncer-test: replacing a DIMM, ticket 7"
    for _ in range(5):
        cluster.set_pod_ready(A, False)
        wait_for(lambda: _k8s_drained(cluster, A), PROPAGATION, f"k8s: drain of {A}")
        # the cache shows the k8s: drain (the Pod's SlurmDrain condition is written from it)
        wait_for(lambda: (cluster.pod_condition(A, names.COND_SLURM_DRAIN) or {}).get("status") == "True",
                 PROPAGATION, "SlurmDrain=True on the Pod")
        undrains = syncer.metric("sunk_syncer_slurm_writes_total", action="undrain")
        before = _fresh_reads(syncer)
        cluster.drain(A, manual)  # a person, a moment before the Pod turns Ready
        cluster.set_pod_ready(A, True)
        wait_for(lambda: _syncer_extra(cluster, A).get("ready") is True, PROPAGATION, "the Syncer reconciled")
        never(lambda: not cluster.node(A).drained or cluster.node(A).reason != manual, 2.0,
              "the person's drain was removed or replaced")
        after = _fresh_reads(syncer)
        assert syncer.metric("sunk_syncer_slurm_writes_total", action="undrain") == undrains
        assert after["verify"] > before["verify"] and after["single"] - before["single"] == after["verify"] - before[
            "verify"]  # the Extra write's fresh read (and the withheld undrain's): the node alone
        cluster.undrain(A)
        wait_for(lambda: not cluster.node(A).drained, PROPAGATION, f"{A} undrained by the test")


def test_down_node_is_neither_drained_nor_resumed(cluster: Cluster):
    """A DOWN node whose Pod turns not Ready is left alone: no ``k8s:`` drain on top of DOWN, no resume.

    The dev cluster runs ``ReturnToService=2``: slurmctld returns a DOWN node to service as soon as
    its slurmd registers (then draining it would be right). node4's slurmd is stopped for the test,
    but a registration it sent just before it stopped may still reach a loaded slurmctld after the
    DOWN (a CI run saw node4 back in service and then, rightly, drained). Such a round says nothing
    about the rule: it is run again, and the test fails only on a drain of a node that stayed DOWN.
    """
    cluster.dev.stop_slurmd(B)
    try:
        for _ in range(3):
            if _down_round_is_left_alone(cluster):
                break
            cluster.set_pod_ready(B, True)  # (Slurm returned node4 to service: undrained, then DOWN again)
            wait_for(lambda: not cluster.node(B).drained, PROPAGATION, f"{B} undrained after its return")
        else:
            pytest.fail(f"slurmctld returned {B} to service in every round although its slurmd is stopped")
    finally:
        cluster.set_pod_ready(B, True)
        cluster.dev.start_slurmd(B)
        if cluster.node(B).down:
            cluster.scontrol(f"nodename={B}", "state=resume")
        wait_for(lambda: not cluster.node(B).down and not cluster.node(B).drained, PROPAGATION,
                 f"{B} back in service")


def _down_round_is_left_alone(cluster: Cluster) -> bool:
    """One round: DOWN by hand, the Pod not Ready, 3 s watched. False when Slurm itself ended the DOWN."""
    cluster.scontrol(f"nodename={B}", "state=down", "reason=syncer-test: down by hand")
    wait_for(lambda: cluster.node(B).down, 10, f"{B} DOWN")
    cluster.set_pod_ready(B, False)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        node = cluster.node(B)
        if not node.down:
            return False
        assert not node.drained, f"a DOWN node was drained: {node.reason!r}"
        time.sleep(0.05)
    node = cluster.node(B)
    if not node.down:
        return False
    assert node.reason == "syncer-test: down by hand"  # not resumed, reason untouched
    return True


# ---- Slurm -> Kubernetes -----------------------------------------------------------------------------------


@pytest.mark.every_release
def test_drain_in_slurm_shows_on_pod_conditions_labels_and_node(cluster: Cluster):
    manual = "syncer-test: checking fans"
    worker = cluster.dev.k8s_node_for(B)
    try:
        cluster.drain(B, manual)

        def pod_shows() -> bool:
            cond = cluster.pod_condition(B, names.COND_SLURM_DRAIN)
            return bool(cond and cond["status"] == "True" and manual in (cond.get("message") or ""))

        wait_for(pod_shows, PROPAGATION, "SlurmDrain=True with the reason on the Pod")
        wait_for(lambda: (cluster.pod(B) or {})["metadata"]["labels"].get(names.LABEL_DRAIN) == "true", PROPAGATION,
                 "the drain label")
        pod = cluster.pod(B)
        assert pod is not None
        responding = objects.get_condition(pod, names.COND_SLURM_NOT_RESPONDING)
        assert responding is not None  # node4's slurmd may flap: the label follows the condition, whichever it is
        assert pod["metadata"]["labels"][names.LABEL_NOT_RESPONDING] == responding["status"].lower()
        assert names.LABEL_RUNNING in pod["metadata"]["labels"]
        for ctype in (names.COND_SLURM_DRAIN, names.COND_SLURM_RUNNING, names.COND_SLURM_NOT_RESPONDING):
            assert [c["type"] for c in pod["status"]["conditions"]].count(ctype) == 1

        def node_shows() -> bool:
            cond = objects.get_condition(cluster.k8s_node(worker), names.COND_SLURM_CORDON)
            return bool(cond and cond["status"] == "True" and manual in (cond.get("message") or ""))

        wait_for(node_shows, PROPAGATION, f"{names.COND_SLURM_CORDON}=True on Node {worker}")

        cluster.undrain(B)

        def cleared() -> bool:
            cond = cluster.pod_condition(B, names.COND_SLURM_DRAIN)
            node_cond = objects.get_condition(cluster.k8s_node(worker), names.COND_SLURM_CORDON)
            labels = (cluster.pod(B) or {})["metadata"]["labels"]
            return bool(cond and cond["status"] == "False" and node_cond and node_cond["status"] == "False"
                        and labels.get(names.LABEL_DRAIN) == "false")

        wait_for(cleared, PROPAGATION, "SlurmDrain=False and drain=false on the Pod, SlurmCordon=False on the Node")
    finally:
        if cluster.node(B).reason == manual:
            cluster.undrain(B)


def _shows_responding(c: Cluster, name: str, responding: bool) -> bool:
    """The slurmd Pod's SlurmNotResponding condition (status and reason) and not_responding label, as the seeds
    name them, say ``responding``."""
    pod = c.pod(name)
    cond = objects.get_condition(pod, names.COND_SLURM_NOT_RESPONDING) if pod else None
    want = ("False", "SlurmResponding") if responding else ("True", "SlurmNotResponding")
    return bool(pod and cond and (cond["status"], cond.get("reason")) == want
                and pod["metadata"]["labels"].get(names.LABEL_NOT_RESPONDING) == want[0].lower())


def test_a_slurmd_that_stops_answering_shows_as_slurm_not_responding(cluster: Cluster):
    """node4's slurmd is stopped for real: slurmctld's own pings find it silent and flag the node NOT_RESPONDING
    (later DOWN, which the Syncer leaves alone); the Pod says so, and says so no longer once slurmd is back."""
    wait_for(lambda: not cluster.node(B).not_responding, RTS, f"{B}'s slurmd answering before the test")
    wait_for(lambda: _shows_responding(cluster, B, True), PROPAGATION, f"{B}'s Pod showing it responding")
    cluster.dev.stop_slurmd(B)
    try:
        wait_for(lambda: cluster.node(B).not_responding, NOT_RESPONDING_AFTER, f"slurmctld to flag {B} NOT_RESPONDING",
                 interval=0.5)
        wait_for(lambda: _shows_responding(cluster, B, False), PROPAGATION, f"SlurmNotResponding=True on {B}'s Pod")
    finally:
        cluster.dev.start_slurmd(B)  # (waits for slurmctld to see it answer: ReturnToService=2 lifts a DOWN)
    wait_for(lambda: not cluster.node(B).not_responding and not cluster.node(B).down, RTS, f"{B} answering again")
    wait_for(lambda: _shows_responding(cluster, B, True), PROPAGATION, f"SlurmNotResponding=False on {B}'s Pod")
    assert not cluster.node(B).drained, f"{B} drained by its outage: {cluster.node(B).reason}"


def test_running_job_shows_as_slurm_running(cluster: Cluster):
    out = cluster.dev.slurm("sbatch", "--parsable", "-w", A, "-J", "syncer-test", "--wrap", "sleep 60").stdout
    job_id = out.strip().split(";")[0]
    try:
        def running() -> bool:
            cond = cluster.pod_condition(A, names.COND_SLURM_RUNNING)
            pod = cluster.pod(A) or {}
            return bool(cond and cond["status"] == "True"
                        and pod["metadata"]["labels"].get(names.LABEL_RUNNING) == "true")

        wait_for(running, 30, "SlurmRunning=True and running=true while a job runs")
    finally:
        cluster.dev.slurm("scancel", job_id, check=False)

    def idle() -> bool:
        cond = cluster.pod_condition(A, names.COND_SLURM_RUNNING)
        return bool(cond and cond["status"] == "False")

    wait_for(idle, 60, "SlurmRunning=False after the job ended")


def test_no_duplicate_conditions_and_no_rewrites_when_nothing_changes(cluster: Cluster, syncer: SyncerUnderTest):
    """In a window where neither Slurm node changed, the syncer writes nothing to either side.

    Other suites run jobs on the shared cluster, so a window in which Slurm did change is
    discarded and another one taken.
    """

    def slurm_view() -> tuple[Any, ...]:
        return tuple((n.state, n.reason, n.extra) for n in (cluster.node(x) for x in NODES_UNDER_TEST))

    for _ in range(10):
        view = slurm_view()
        before = (syncer.metric("sunk_syncer_kube_writes_total"), syncer.metric("sunk_syncer_slurm_writes_total"))
        deadline = time.monotonic() + 3.0  # several Slurm polls
        changed = False
        while time.monotonic() < deadline and not changed:
            time.sleep(0.1)
            changed = slurm_view() != view
        after = (syncer.metric("sunk_syncer_kube_writes_total"), syncer.metric("sunk_syncer_slurm_writes_total"))
        if not changed and slurm_view() == view:
            assert after == before
            break
    else:
        pytest.fail("Slurm never stayed still for 3 s: cannot check for idle writes")
    for name in NODES_UNDER_TEST:
        types = [c["type"] for c in cluster.pod(name)["status"]["conditions"]]  # type: ignore[index]
        assert len(types) == len(set(types)), types


# ---- NHC verify-undrain ----------------------------------------------------------------------------------------


def _set_verification(c: Cluster, name: str, status: str, at: float) -> None:
    stamp = rfc3339(at)

    def mutate(current: dict[str, Any]) -> dict[str, Any] | None:
        conds = [x for x in current["status"].get("conditions") or [] if x["type"] != names.COND_HPC_VERIFICATION]
        conds.append({"type": names.COND_HPC_VERIFICATION, "status": status,
                      "reason": "Passed" if status == "True" else "Failed", "message": "syncer-test",
                      "lastTransitionTime": stamp, "lastProbeTime": stamp})
        return {"status": {"conditions": conds}}

    pod = c.pod(name)
    assert pod is not None
    kp.update_with_retry(c.api, pod, mutate, resource=PODS, subresource="status")


def test_verify_undrain_waits_for_a_newer_verification_pass(cluster: Cluster):
    reason = f"syncer-test NHC: gpu burn failed {names.VERIFY_UNDRAIN}"
    try:
        _set_verification(cluster, A, "True", time.time() - 3600)  # a pass, but older than the drain
        cluster.drain(A, reason)
        drained_at = cluster.node(A).reason_time or time.time()
        never(lambda: not cluster.node(A).drained, 3.0, "undrained on a verification older than the drain")

        _set_verification(cluster, A, "False", drained_at + 1)  # a newer failure: still drained
        never(lambda: not cluster.node(A).drained, 2.0, "undrained on a failed verification")

        _set_verification(cluster, A, "True", max(time.time(), drained_at + 2))  # a newer pass
        wait_for(lambda: not cluster.node(A).drained, PROPAGATION, "undrained after a newer verification pass")
    finally:
        if cluster.node(A).reason == reason:
            cluster.undrain(A)


def test_plain_manual_drain_is_not_undrained_by_a_verification_pass(cluster: Cluster):
    manual = "syncer-test: NHC gpu burn failed"  # no verify-undrain in it
    try:
        cluster.drain(A, manual)
        _set_verification(cluster, A, "True", time.time() + 1)
        never(lambda: not cluster.node(A).drained, 3.0, "a drain without verify-undrain was removed")
    finally:
        if cluster.node(A).reason == manual:
            cluster.undrain(A)


# ---- Extra ------------------------------------------------------------------------------------------------------


@pytest.mark.every_release
def test_extra_keeps_user_keys_and_syncer_keys_win(cluster: Cluster):
    ours = _syncer_extra(cluster, A)
    assert ours, "the syncer writes its facts into Extra"
    conflicting = next(iter(ours))
    cluster.set_extra(A, json.dumps({"owner": "team-ml", "rack": 7, conflicting: "user value"}))

    def merged() -> dict[str, Any] | None:
        value = _syncer_extra(cluster, A)
        return value if value.get(conflicting) == ours[conflicting] and value.get("owner") == "team-ml" else None

    value = wait_for(merged, PROPAGATION, "user keys kept, syncer keys restored")
    assert value["rack"] == 7


def test_extra_garbage_is_replaced_and_logged(cluster: Cluster, syncer: SyncerUnderTest):
    cluster.set_extra(B, "this is {not json")
    wait_for(lambda: _syncer_extra(cluster, B).get("pod"), PROPAGATION, "Extra replaced with valid JSON")
    assert cluster.node(B).extra.lstrip().startswith("{")
    wait_for(lambda: [r for r in syncer.log_lines() if r["level"] == "warning" and "not valid JSON" in r["msg"]
                      and B in r["msg"]], 5, "a warning in the syncer's log")


def test_metrics_and_health_endpoints(syncer: SyncerUnderTest):
    assert syncer.healthz() == 200
    wait_for(lambda: syncer.metric("sunk_reconcile_total", controller="syncer-slurm") > 0, 10, "Slurm-side reconciles")
    wait_for(lambda: syncer.metric("sunk_reconcile_total", controller="syncer-kube") > 0, 10, "Kube-side reconciles")
    assert syncer.metric("sunk_syncer_slurm_requests_total", message_type="REQUEST_NODE_INFO") > 0


def test_logs_are_json_lines(syncer: SyncerUnderTest):
    lines = syncer.log_lines()
    assert lines and all({"ts", "level", "logger", "msg"} <= set(r) for r in lines)
    assert any(r["logger"].startswith("sunk.syncer") for r in lines)


# ---- restarts -----------------------------------------------------------------------------------------------------


def test_slurmctld_restart_causes_no_wrong_drains(cluster: Cluster, syncer: SyncerUnderTest, dev_cluster):
    worker = dev_cluster.k8s_node_for(B)
    try:
        dev_cluster.stop_component("slurmctld")
        time.sleep(4.0)  # the Slurm cache goes stale; the syncer must not read that as anything
        cluster.cordon(worker, "syncer-test: cordoned while Slurm was away")
        time.sleep(2.0)
        assert syncer.alive and syncer.healthz() == 200
    finally:
        dev_cluster.start_component("slurmctld")
    try:
        wait_for(lambda: _k8s_drained(cluster, B), 30, "the drain decided during the outage lands after it")
        never(lambda: _k8s_drained(cluster, A), 3.0, f"{A} drained after slurmctld came back")
    finally:
        cluster.uncordon(worker)
    wait_for(lambda: not cluster.node(B).drained, PROPAGATION, f"{B} undrained")
    assert syncer.alive


def test_apiserver_restart_causes_no_wrong_drains(cluster: Cluster, syncer: SyncerUnderTest, dev_cluster):
    """Informers reconnect and resume; an unreachable apiserver is never read as "Pod gone" or "not Ready"."""
    try:
        dev_cluster.stop_component("kube-apiserver")
        never(lambda: _k8s_drained(cluster, A) or _k8s_drained(cluster, B), 5.0, "a drain while the apiserver was down")
    finally:
        dev_cluster.start_component("kube-apiserver")
    never(lambda: _k8s_drained(cluster, A) or _k8s_drained(cluster, B), 5.0, "a drain after the apiserver came back")
    assert syncer.alive and syncer.healthz() == 200
    cluster.set_pod_ready(A, False)  # and it still syncs
    wait_for(lambda: _k8s_drained(cluster, A), 30, f"{A} drained after the apiserver restart")
    cluster.set_pod_ready(A, True)
    wait_for(lambda: not cluster.node(A).drained, PROPAGATION, f"{A} undrained")


def test_kill_and_restart_syncer_mid_flow(env, dev_cluster, syncer: SyncerUnderTest, cluster: Cluster):
    """A crash (SIGKILL, lease not released) between a change and its propagation; the next process finishes it."""
    worker = dev_cluster.k8s_node_for(A)
    second = SyncerUnderTest(dev_cluster, env["namespace"], env["run_id"], env["log_dir"], name="syncer-2")
    try:
        syncer.kill()
        cluster.cordon(worker, "syncer-test: cordoned while the syncer was down")
        cluster.set_pod_ready(B, False)
        time.sleep(1.0)
        assert _k8s_drained(cluster, A) is None  # nobody is syncing
        second.start()
        # The Lease of the killed process must expire first (15 s), then both changes land.
        wait_for(lambda: _k8s_drained(cluster, A), 40, f"{A} drained by the new syncer")
        wait_for(lambda: _k8s_drained(cluster, B), 10, f"{B} drained by the new syncer")
        cluster.uncordon(worker)
        cluster.set_pod_ready(B, True)
        wait_for(lambda: not cluster.node(A).drained and not cluster.node(B).drained, PROPAGATION,
                 "both undrained by the new syncer")
    finally:
        cluster.uncordon(worker)
        cluster.set_pod_ready(B, True)
        second.stop()
        syncer.start()  # the module's syncer again, for the tests after this one
        for name in NODES_UNDER_TEST:
            wait_for(lambda n=name: not cluster.node(n).drained, 40, f"{name} undrained")


def test_lost_leadership_is_not_a_crash_loop_and_standby_takes_over(env, dev_cluster, syncer: SyncerUnderTest,
                                                                    cluster: Cluster):
    """Two replicas: only one writes; stopping it cleanly hands over at once (lease released)."""
    standby = SyncerUnderTest(dev_cluster, env["namespace"], env["run_id"], env["log_dir"], name="syncer-standby")
    worker = dev_cluster.k8s_node_for(B)
    try:
        standby.start()
        writes = standby.metric("sunk_syncer_slurm_writes_total")
        cluster.set_pod_ready(B, False)
        wait_for(lambda: _k8s_drained(cluster, B), PROPAGATION, f"{B} drained by the leader")
        time.sleep(1.0)
        assert standby.metric("sunk_syncer_slurm_writes_total") == writes  # the standby wrote nothing
        syncer.stop()  # releases the Lease
        cluster.set_pod_ready(B, True)
        wait_for(lambda: not cluster.node(B).drained, 20, f"{B} undrained by the new leader")
        assert standby.metric("sunk_syncer_slurm_writes_total") > writes
    finally:
        cluster.uncordon(worker)
        cluster.set_pod_ready(B, True)
        standby.stop()
        syncer.start()
