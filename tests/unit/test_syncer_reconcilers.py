"""The Syncer's reconcilers over in-memory caches: fed facts (Slurm nodes, Pods, Nodes), asserting writes.

The decisions are ``sunk.translate.syncplan``'s (tested table by table there); these tests pin
what the reconcilers do with them: one Slurm read only on the write path, one combined update,
no writes from stale data, no apiserver call when nothing changed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from strategic_merge import merged_conditions
from syncer_fakes import FakeSlurm, k8s_node, make_ctx, pod

from sunk.kube import client as kc
from sunk.model.slurm import Job, Node, NodeUpdate
from sunk.syncer import triggers
from sunk.syncer.facts import gather
from sunk.syncer.kubeside import KubeSideReconciler
from sunk.syncer.slurmside import SlurmSideReconciler
from sunk.translate import dra
from sunk.translate.drains import DeviceMismatchDrain
from sunk.translate.podcordon import COND_POD_CORDONED

IDLE = Node("node1", state="IDLE")
READY = {"type": "Ready", "status": "True"}
NOT_READY = {"type": "Ready", "status": "False"}
NOT_READY_REASON = "k8s: slurmd pod slurm/node1 is not ready"
MISSING_REASON = "k8s: slurmd pod slurm/node1 does not exist"
GONE_HANDLED = '{"deleted":true,"namespace":"slurm","pod":"node1","ready":true}'  # a deleted Pod's DOWN was made
LABELS = {"app.kubernetes.io/name": "slurmd", "sunk.coreweave.com/running": "false",
          "sunk.coreweave.com/drain": "false", "sunk.coreweave.com/not_responding": "false"}


def kept_extra(name: str = "node1", *, ready: bool = True, node: str = "worker-1", **more: Any) -> str:
    """The Extra the Syncer keeps for its slurmd Pod ``name`` on ``node``, byte for byte as it writes it."""
    return json.dumps({"cordon_reason": None, "cordoned": False, "deleted": False, "deleting": False,
                       "namespace": "slurm", "node": node, "pod": name, "ready": ready, **more},
                      sort_keys=True, separators=(",", ":"))


@pytest.fixture
def api_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None, Any, str | None]]:
    """Every PATCH the reconcilers send, answered as the apiserver would (object with the patch applied)."""
    calls: list[tuple[str, str | None, Any, str | None]] = []

    def patch(api: Any, resource: Any, name: str, body: Any, namespace: str | None = None, *,
              subresource: str | None = None, **_: Any) -> dict[str, Any]:
        calls.append((resource.plural + "/" + name, namespace, body, subresource))
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "2"}, **body}

    monkeypatch.setattr(kc, "patch", patch)
    return calls


# ---- Slurm side -------------------------------------------------------------------------------------


def test_stale_cache_postpones_without_any_slurm_call():
    ctx, pods, _, cache, slurm, recorder = make_ctx(nodes=[IDLE])
    pods.put(pod("node1", conditions=[NOT_READY]))  # (a drain is due)
    cache.fresh = False
    result = SlurmSideReconciler(ctx, stale_retry=3.0).reconcile("node1")
    assert result is not None and result.requeue_after == 3.0
    assert slurm.calls == [] and recorder.events == []


def test_node_unknown_to_slurm_is_left_alone():
    ctx, pods, _, _, slurm, _ = make_ctx(nodes=[])
    pods.put(pod("node1", conditions=[NOT_READY]))
    assert SlurmSideReconciler(ctx).reconcile("node1") is None
    assert slurm.calls == []


def test_nothing_to_change_makes_no_slurm_call():
    ctx, pods, _, cache, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra=kept_extra())])
    pods.put(pod("node1", conditions=[READY]))
    SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls == [] and cache.nudges == 0


def test_drain_and_extra_go_out_as_one_update_after_one_verify_read():
    ctx, pods, _, cache, slurm, recorder = make_ctx(nodes=[IDLE])
    pods.put(pod("node1", conditions=[NOT_READY]))
    SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls == [
        ("read", "node1", None),  # the node alone, not the list of every node
        ("update", "node1", NodeUpdate(state="DRAIN", reason=NOT_READY_REASON, extra=kept_extra(ready=False))),
    ]
    assert cache.nudges == 1
    assert recorder.events == [("Normal", "SlurmNodeDrained", f"drained node1 in Slurm: {NOT_READY_REASON}")]


def test_undrain_sends_undrain_state_and_no_reason():
    drained = Node("node1", state="IDLE+DRAIN", reason=NOT_READY_REASON, extra=kept_extra())
    ctx, pods, _, _, slurm, recorder = make_ctx(nodes=[drained])
    pods.put(pod("node1", conditions=[READY]))
    SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls[-1] == ("update", "node1", NodeUpdate(state="UNDRAIN"))
    assert recorder.events == [("Normal", "SlurmNodeUndrained",
                                "undrained node1 in Slurm: the Kubernetes condition cleared")]


def test_decision_is_taken_again_from_slurm_truth_before_writing():
    """The cache says "our k8s: drain, undrain it"; Slurm now says a person drained it: no write."""
    cached = Node("node1", state="IDLE+DRAIN", reason=NOT_READY_REASON, extra=kept_extra())
    truth = Node("node1", state="IDLE+DRAIN", reason="bad DIMM, ticket 42", extra=kept_extra())
    ctx, pods, _, cache, slurm, _ = make_ctx(nodes=[cached], slurm=FakeSlurm([truth]))
    pods.put(pod("node1", conditions=[READY]))
    result = SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls == [("read", "node1", None)]
    assert cache.nudges == 0
    assert result is not None and result.requeue_after  # again once the cache shows the person's drain
    cache.items["node1"] = truth
    assert SlurmSideReconciler(ctx).reconcile("node1") is None and slurm.calls == [("read", "node1", None)]


def test_invalid_extra_replacement_is_logged_and_recorded(caplog: pytest.LogCaptureFixture):
    broken = Node("node1", state="IDLE", extra="{not json")
    ctx, pods, _, _, slurm, recorder = make_ctx(nodes=[broken])
    pods.put(pod("node1", conditions=[READY]))
    with caplog.at_level(logging.WARNING, logger="sunk.syncer.slurmside"):
        SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls[-1] == ("update", "node1", NodeUpdate(extra=kept_extra()))
    assert any("not valid JSON" in r.getMessage() and "{not json" in r.getMessage() for r in caplog.records)
    assert ("Warning", "InvalidSlurmExtra", "Extra of Slurm node node1 was not valid JSON; replaced it") in \
        recorder.events


def test_the_facts_come_from_the_informers_and_show_in_the_write():
    ctx, pods, nodes, _, slurm, _ = make_ctx(nodes=[IDLE])
    pods.put(pod("node1", node="worker-7", conditions=[READY, {"type": COND_POD_CORDONED, "status": "True",
                                                                "message": "disk failing"}]))
    nodes.put(k8s_node("worker-7", cordoned=True, reason="disk failing"))
    facts = gather(ctx, "node1")
    assert facts.pod_key == "slurm/node1" and facts.k8s_node is not None
    assert facts.k8s_node["metadata"]["name"] == "worker-7" and facts.namespace == "slurm"
    assert facts.cordon.cordoned and facts.cordon.reason == "disk failing"
    SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls[-1] == ("update", "node1", NodeUpdate(
        state="DRAIN", reason="k8s: node worker-7 is cordoned: disk failing",
        extra=kept_extra(node="worker-7", cordoned=True, cordon_reason="disk failing")))


# ---- Kubernetes side ------------------------------------------------------------------------------------


def test_pod_conditions_and_labels_written_once_then_nothing(api_calls):
    drained = Node("node1", state="IDLE+DRAIN", reason="bad DIMM")
    ctx, pods, nodes, _, _, _ = make_ctx(nodes=[drained], node_permissions=False)
    pods.put(pod("node1", conditions=[READY]))
    nodes.put(k8s_node("worker-1"))
    KubeSideReconciler(ctx).reconcile("node1")
    status_patch, label_patch = api_calls
    assert status_patch[0] == "pods/node1" and status_patch[3] == "status"
    patch = status_patch[2]["status"]["conditions"]
    # ours once each, by type: the kubelet's Ready not named, so kept
    assert [c["type"] for c in patch] == ["SlurmDrain", "SlurmRunning", "SlurmNotResponding"]
    conds = merged_conditions([READY], patch)
    assert [c["type"] for c in conds] == ["Ready", "SlurmDrain", "SlurmRunning", "SlurmNotResponding"]
    assert conds[1]["status"] == "True" and conds[1]["message"] == "bad DIMM"
    assert status_patch[2]["metadata"]["resourceVersion"] == "1"
    assert label_patch[2] == {"metadata": {"labels": {"sunk.coreweave.com/running": "false",
                                                      "sunk.coreweave.com/drain": "true",
                                                      "sunk.coreweave.com/not_responding": "false"},
                                           "uid": "uid-node1"}}

    # The informer now shows what we wrote: a second pass makes no call at all.
    pods.put(pod("node1", rv="2", conditions=conds, labels={**LABELS, "sunk.coreweave.com/drain": "true"}))
    api_calls.clear()
    KubeSideReconciler(ctx).reconcile("node1")
    assert api_calls == []


def test_duplicate_conditions_are_collapsed_to_one(api_calls):
    ctx, pods, _, _, _, _ = make_ctx(nodes=[IDLE])
    dup = {"type": "SlurmDrain", "status": "False", "reason": "SlurmNotDrained"}
    pods.put(pod("node1", conditions=[dup, dict(dup), READY], labels=LABELS))
    KubeSideReconciler(ctx).reconcile("node1")
    (status_patch,) = api_calls
    patch = status_patch[2]["status"]["conditions"]
    assert {"$patch": "delete", "type": "SlurmDrain"} in patch  # (every entry of the type, both duplicates)
    types = [c["type"] for c in merged_conditions([dup, dict(dup), READY], patch)]
    assert types.count("SlurmDrain") == 1 and "Ready" in types


def test_stale_slurm_cache_keeps_slurm_conditions_but_still_marks_cordon(api_calls):
    ctx, pods, nodes, cache, _, _ = make_ctx(nodes=[Node("node1", state="IDLE+DRAIN", reason="bad DIMM")])
    pods.put(pod("node1", node="worker-1"))
    nodes.put(k8s_node("worker-1", cordoned=True, reason="kernel upgrade"))
    cache.fresh = False
    KubeSideReconciler(ctx).reconcile("node1")
    (status_patch,) = api_calls  # no labels, no Node write: those need Slurm's word
    (cond,) = status_patch[2]["status"]["conditions"]
    assert cond["type"] == COND_POD_CORDONED and cond["status"] == "True" and cond["message"] == "kernel upgrade"


def _cordon_conditions(api_calls: list[tuple[str, str | None, Any, str | None]]) -> list[dict[str, str]]:
    return [c for path, _, body, sub in api_calls if sub == "status" and path.startswith("pods/")
            for c in body["status"]["conditions"] if c["type"] == COND_POD_CORDONED and "$patch" not in c]


def test_uncordon_flips_the_marker_to_false_and_never_cordoned_pods_get_none(api_calls):
    ctx, pods, nodes, cache, _, _ = make_ctx(nodes=[IDLE, Node("node2", state="IDLE")])
    marked = {"type": COND_POD_CORDONED, "status": "True", "reason": "NodeCordoned", "message": "x"}
    pods.put(pod("node1", node="worker-1", conditions=[marked]))
    nodes.put(k8s_node("worker-1"))
    KubeSideReconciler(ctx).reconcile("node1")
    (cond,) = _cordon_conditions(api_calls)
    assert cond["status"] == "False" and cond["reason"] == "NodeUncordoned"

    api_calls.clear()
    pods.put(pod("node2", node="worker-1"))
    KubeSideReconciler(ctx).reconcile("node2")
    assert api_calls and _cordon_conditions(api_calls) == []


def test_node_condition_written_through_nodes_status_only_when_it_differs(api_calls):
    drained = Node("node1", state="IDLE+DRAIN", reason="bad DIMM")
    ctx, pods, nodes, _, _, _ = make_ctx(nodes=[drained])
    pods.put(pod("node1", node="worker-1", rv="9", deleting=True))  # (no Pod writes: only the Node's)
    nodes.put(k8s_node("worker-1"))
    KubeSideReconciler(ctx).reconcile("node1")
    (node_patch,) = api_calls
    assert node_patch[0] == "nodes/worker-1" and node_patch[3] == "status"
    (cond,) = node_patch[2]["status"]["conditions"]
    assert cond["type"] == "SlurmCordon" and cond["status"] == "True" and cond["message"] == "node1: bad DIMM"

    written = k8s_node("worker-1", rv="2")
    written["status"]["conditions"] = node_patch[2]["status"]["conditions"]
    nodes.put(written)
    api_calls.clear()
    KubeSideReconciler(ctx).reconcile("node1")
    assert api_calls == []


def test_without_node_permissions_no_node_is_written_and_the_pod_still_is(api_calls):
    """--node-permissions-enabled=false (the chart's RBAC then has no nodes/status patch): the drain shows
    on the slurmd Pod, never as a Node condition, so the Syncer never sends a write it would get 403 for."""
    drained = Node("node1", state="IDLE+DRAIN", reason="bad DIMM")
    ctx, pods, nodes, _, _, _ = make_ctx(nodes=[drained], node_permissions=False)
    pods.put(pod("node1", node="worker-1"))
    nodes.put(k8s_node("worker-1"))
    KubeSideReconciler(ctx).reconcile("node1")
    assert ("pods/node1", "status") in [(c[0], c[3]) for c in api_calls]
    assert not [c for c in api_calls if c[0].startswith("nodes/")]


def test_terminating_pod_gets_no_status_writes(api_calls):
    ctx, pods, _, _, _, _ = make_ctx(nodes=[Node("node1", state="IDLE+DRAIN", reason="x")])
    pods.put(pod("node1", deleting=True))
    KubeSideReconciler(ctx).reconcile("node1")
    assert api_calls == []


# ---- scope: only nodes that have (or had) a slurmd Pod here --------------------------------------------------


def test_node_that_never_had_a_pod_here_is_not_touched():
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[Node("login1", state="IDLE"),
                                             Node("other", state="IDLE", extra='{"namespace":"slurm-b","pod":"x"}')])
    for name in ("login1", "other"):
        SlurmSideReconciler(ctx).reconcile(name)
    assert slurm.calls == []


def test_node_whose_pod_was_deleted_is_drained_and_its_extra_identity_kept():
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra=GONE_HANDLED)])
    SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls[-1] == ("update", "node1", NodeUpdate(state="DRAIN", reason=MISSING_REASON))


def test_node_whose_pod_exists_outside_the_selector_is_another_syncers():
    """A narrower Syncer in the same namespace must not read the other Syncer's Pods as deleted."""
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra=GONE_HANDLED)])
    ctx.all_pods.put(pod("node1"))  # type: ignore[attr-defined]  # exists, but not among our slurmd Pods
    SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls == []
    ctx.all_pods.remove(pod("node1"))  # type: ignore[attr-defined]  # now it is really gone
    SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls[-1] == ("update", "node1", NodeUpdate(state="DRAIN", reason=MISSING_REASON))


def test_our_pod_serving_another_slurm_node_does_not_make_this_node_foreign():
    """The named Pod is ours (it now runs another hostname): this node lost its Pod, drain stands."""
    ctx, pods, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra=GONE_HANDLED),
                                                Node("node9", state="IDLE")])
    moved = pod("node1")
    moved["spec"]["hostname"] = "node9"
    pods.put(moved)
    ctx.all_pods.put(moved)  # type: ignore[attr-defined]
    SlurmSideReconciler(ctx).reconcile("node1")
    assert ("update", "node1", NodeUpdate(state="DRAIN", reason=MISSING_REASON)) in slurm.calls


# ---- the rules of sunk.translate, end to end through the reconciler ------------------------------


def test_production_rules_pod_not_ready_drains_with_k8s_reason_and_writes_extra():
    ctx, pods, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra='{"owner":"ml"}')])
    pods.put(pod("node1", conditions=[{"type": "Ready", "status": "False"}]))
    SlurmSideReconciler(ctx).reconcile("node1")
    (_, (_, _, update)) = slurm.calls
    assert update is not None and update.state == "DRAIN"
    assert update.reason == "k8s: slurmd pod slurm/node1 is not ready"
    extra = json.loads(update.extra or "")
    assert extra["owner"] == "ml" and extra["pod"] == "node1" and extra["namespace"] == "slurm"


def test_production_rules_manual_drain_and_down_node_are_left_alone():
    ctx, pods, _, _, slurm, _ = make_ctx(nodes=[
        Node("node1", state="IDLE+DRAIN", reason="bad DIMM", extra='{"namespace":"slurm","pod":"node1"}'),
        Node("node2", state="DOWN", extra='{"namespace":"slurm","pod":"node2"}')])
    pods.put(pod("node1", conditions=[{"type": "Ready", "status": "False"}]))
    pods.put(pod("node2", conditions=[{"type": "Ready", "status": "False"}]))
    for name in ("node1", "node2"):
        SlurmSideReconciler(ctx).reconcile(name)
    updates = [c for c in slurm.calls if c[0] == "update"]
    assert all(u.state is None and u.reason is None for _, _, u in updates if u is not None)  # Extra only


def test_production_rules_status_conditions_and_labels(api_calls):
    ctx, pods, nodes, _, _, _ = make_ctx(nodes=[Node("node1", state="ALLOCATED+DRAIN", reason="bad DIMM")])
    pods.put(pod("node1", conditions=[{"type": "Ready", "status": "True"}]))
    nodes.put(k8s_node("worker-1"))
    KubeSideReconciler(ctx).reconcile("node1")
    by_path = {c[0] + (c[3] or ""): c[2] for c in api_calls}
    conds = {c["type"]: c for c in by_path["pods/node1status"]["status"]["conditions"]}
    assert conds["SlurmDrain"]["status"] == "True" and conds["SlurmDrain"]["message"] == "bad DIMM"
    assert conds["SlurmRunning"]["status"] == "True" and conds["SlurmNotResponding"]["status"] == "False"
    assert by_path["pods/node1"]["metadata"]["labels"] == {"sunk.coreweave.com/running": "true",
                                                           "sunk.coreweave.com/drain": "true",
                                                           "sunk.coreweave.com/not_responding": "false"}
    node_cond = by_path["nodes/worker-1status"]["status"]["conditions"][0]
    assert node_cond["type"] == "SlurmCordon" and node_cond["status"] == "True" and "bad DIMM" in node_cond["message"]


# ---- sunk's own drains (sunk.translate.drains), with the production rules --------------------------------------

PLACEHOLDER_DRAIN = "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42"
OUTAGE_DRAIN = "k8s: sunk-lock: job 43: hook API unreachable (HTTP 000, 3 attempts)"
OURS = '{"namespace":"slurm","pod":"node1"}'


def _drain_writes(slurm: FakeSlurm) -> list[tuple[str | None, str | None]]:
    return [(u.state, u.reason) for kind, _, u in slurm.calls if kind == "update" and u is not None and u.state]


def _sunk_drained(reason: str, *, lock: str = "false", tainted: bool = False, holders: str | None = None):
    drained = Node("node1", state="IDLE+DRAIN", reason=reason, extra=OURS)
    ctx, pods, nodes, cache, slurm, recorder = make_ctx(nodes=[drained])
    slurmd = pod("node1", conditions=[{"type": "Ready", "status": "True"}])
    slurmd["metadata"]["annotations"] = {"sunk.coreweave.com/lock": lock}
    pods.put(slurmd)
    node = k8s_node("worker-1")
    if tainted:
        node["spec"]["taints"] = [{"key": "sunk.coreweave.com/lock", "value": "true", "effect": "NoSchedule"}]
    if holders is not None:
        node["metadata"]["annotations"] = {"sunk.coreweave.com/lock-holders": holders}
    nodes.put(node)
    return ctx, cache, slurm, recorder


def test_the_placeholders_drain_is_lifted_once_its_pod_is_gone_and_no_job_of_it_holds_the_node():
    ctx, cache, slurm, recorder = _sunk_drained(PLACEHOLDER_DRAIN)
    ctx.all_pods.put(pod("train-0", namespace="team-a"))  # type: ignore[attr-defined]  # on worker-1, as node1
    cache.job_items[42] = Job(id=42, state="CANCELLED", state_flags=["COMPLETING"], nodes="node1")
    reconciler = SlurmSideReconciler(ctx)
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == []  # the Pod still runs there
    ctx.all_pods.remove(pod("train-0", namespace="team-a"))  # type: ignore[attr-defined]
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == []  # its job is still ending on the node
    cache.jobs_fresh = False
    cache.job_items.clear()
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == []  # the job list is stale: no evidence that the job left
    cache.jobs_fresh = True
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == [("UNDRAIN", None)]
    assert recorder.events[-1][1] == "SlurmNodeUndrained" and "team-a/train-0 is gone" in recorder.events[-1][2]


def test_the_placeholders_drain_stays_while_any_pod_placed_there_outlives_its_job():
    """Three placeholders drained at once; the reason names the last one's Pod only."""
    ctx, _, slurm, _ = _sunk_drained(PLACEHOLDER_DRAIN)
    other = pod("train-1", namespace="team-a")
    other["metadata"]["annotations"] = {"sunk.coreweave.com/job-id": "41", "sunk.coreweave.com/slurm-node": "node1"}
    other["spec"]["schedulerName"] = "sunk-scheduler"  # (the Syncer's --scheduler-names default)
    ctx.all_pods.put(other)  # type: ignore[attr-defined]  # its job 41 ended too; nobody deleted it yet
    reconciler = SlurmSideReconciler(ctx)
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == []
    ctx.all_pods.remove(other)  # type: ignore[attr-defined]
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == [("UNDRAIN", None)]


def test_a_pod_of_another_scheduler_with_sunks_annotations_does_not_keep_the_placeholders_drain():
    """A tenant's Pod made with spec.nodeName on the Node (no scheduler), annotated as if sunk had placed it
    for an ended job on this Slurm node: its author's word, not sunk's; the drain is lifted all the same."""
    ctx, _, slurm, _ = _sunk_drained(PLACEHOLDER_DRAIN)
    forged = pod("squatter", namespace="team-a")
    forged["metadata"]["annotations"] = {"sunk.coreweave.com/job-id": "41", "sunk.coreweave.com/slurm-node": "node1"}
    forged["spec"]["schedulerName"] = "default-scheduler"
    ctx.all_pods.put(forged)  # type: ignore[attr-defined]
    SlurmSideReconciler(ctx).reconcile("node1")
    assert _drain_writes(slurm) == [("UNDRAIN", None)]


def test_a_gangs_drain_is_lifted_once_no_unfinished_member_is_on_the_node_and_no_job_of_the_gang_holds_it():
    """The gang's job ended while its epilog could not reach the Syncer, and every node's epilog drained (epilog.sh):
    this node's member finishing (its Job keeps the Pod) or going lifts it here."""
    from sunk.translate.drains import GangPlaceholderDrain

    ctx, cache, slurm, recorder = _sunk_drained(GangPlaceholderDrain("team-a", "job/u-train", 42).reason())
    member = pod("train-0", namespace="team-a")  # on worker-1, as node1
    member["metadata"]["labels"] = {"batch.kubernetes.io/job-name": "train",
                                    "batch.kubernetes.io/controller-uid": "u-train"}
    member["metadata"]["annotations"] = {"sunk.coreweave.com/job-id": "42", "sunk.coreweave.com/slurm-node": "node1"}
    member["spec"]["schedulerName"] = "sunk-scheduler"  # (placed by sunk's scheduler, as the Syncer is told)
    ctx.all_pods.put(member)  # type: ignore[attr-defined]
    cache.job_items[42] = Job(id=42, state="CANCELLED", state_flags=["COMPLETING"], nodes="node[1-3]",
                              extra="sunk-gang=job/u-train ns=team-a size=3 members=aa,bb,cc: started")
    reconciler = SlurmSideReconciler(ctx)
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == []  # the job is still ending on the node
    cache.job_items.clear()
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == []  # the member still runs there
    ctx.all_pods.put({**member, "status": {"phase": "Succeeded"}})  # type: ignore[attr-defined]
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == [("UNDRAIN", None)]
    assert recorder.events[-1][1] == "SlurmNodeUndrained" and "job/u-train" in recorder.events[-1][2]


def test_the_placeholders_drain_gives_way_to_a_kubernetes_condition_once_its_pod_is_gone():
    ctx, _, slurm, _ = _sunk_drained(PLACEHOLDER_DRAIN)
    ctx.slurmd_pods.put(pod("node1", conditions=[{"type": "Ready", "status": "False"}]))  # type: ignore[attr-defined]
    SlurmSideReconciler(ctx).reconcile("node1")
    assert _drain_writes(slurm) == [("DRAIN", "k8s: slurmd pod slurm/node1 is not ready")]


@pytest.mark.parametrize(("lock", "tainted", "lifted"), [
    ("locked", True, False),  # the lock controller has not unlocked the idle node yet
    ("false", True, False),  # half way: annotation written, taint not removed yet
    ("pending", False, False),
    ("false", False, True),  # consistent with Slurm: nothing runs, nothing is locked
])
def test_the_prologs_outage_drain_is_lifted_once_the_lock_is_consistent_with_slurm(lock, tainted, lifted):
    ctx, cache, slurm, _ = _sunk_drained(OUTAGE_DRAIN, lock=lock, tainted=tainted)
    cache.job_items[43] = Job(id=43, state="PENDING", state_reason="launch_failed_requeued_held")  # refused, held
    SlurmSideReconciler(ctx).reconcile("node1")
    assert _drain_writes(slurm) == ([("UNDRAIN", None)] if lifted else [])


@pytest.mark.parametrize(("holders", "lifted"), [
    ("slurm-b/node1", True),  # another release's slurmd Pod on the same Node holds it: not this node's lock
    ("slurm-b/node1,slurm/node1", False),  # this slurmd Pod's hold is still there
])
def test_the_prologs_outage_drain_reads_only_this_slurmd_pods_hold_of_the_nodes_taint(holders, lifted):
    ctx, cache, slurm, _ = _sunk_drained(OUTAGE_DRAIN, lock="false", tainted=True, holders=holders)
    cache.job_items[43] = Job(id=43, state="PENDING", state_reason="launch_failed_requeued_held")
    SlurmSideReconciler(ctx).reconcile("node1")
    assert _drain_writes(slurm) == ([("UNDRAIN", None)] if lifted else [])


def test_the_prologs_outage_drain_stays_while_the_job_it_refused_holds_the_node():
    ctx, cache, slurm, _ = _sunk_drained(OUTAGE_DRAIN, lock="locked", tainted=True)
    cache.job_items[43] = Job(id=43, state="RUNNING", nodes="node1")
    cache.items["node1"] = Node("node1", state="MIXED+DRAIN", reason=OUTAGE_DRAIN, extra=OURS)
    SlurmSideReconciler(ctx).reconcile("node1")
    assert _drain_writes(slurm) == []


@pytest.mark.parametrize("reason", ["sunk: pod team-a/train-0 outlived KillWait after job 42",
                                    "sunk-lock: job 43: SUNK_SYNCER_URL is not set in /etc/sunk/hooks.env",
                                    "ops: " + PLACEHOLDER_DRAIN])
def test_a_persons_drain_that_looks_like_sunks_is_never_lifted(reason):
    ctx, _, slurm, _ = _sunk_drained(reason)
    SlurmSideReconciler(ctx).reconcile("node1")
    assert _drain_writes(slurm) == []


# ---- a drain the scheduler set for a Pod stuck terminating on a lost Node (issue 18, item 1) ------------------


def stuck_setup(*, pod_there: bool, node_ready: str, slurmd_ready: str = "True"):
    from sunk.translate.drains import StuckPodDrain

    reason = StuckPodDrain("team-a", "trainer-0", "uid-t", "worker-1", 12).reason()
    extra = '{"namespace":"slurm","pod":"node1"}'
    ctx, pods, nodes, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE+DRAIN", reason=reason, extra=extra)])
    pods.put(pod("node1", conditions=[{"type": "Ready", "status": slurmd_ready}]))
    worker = k8s_node("worker-1")
    worker["status"]["conditions"] = [{"type": "Ready", "status": node_ready}]
    nodes.put(worker)
    if pod_there:
        ctx.all_pods.put({"metadata": {"name": "trainer-0", "namespace": "team-a", "uid": "uid-t",  # type: ignore[attr-defined]
                                       "deletionTimestamp": "2030-01-01T00:00:00Z"},
                          "spec": {"nodeName": "worker-1"}})
    return ctx, slurm, reason


@pytest.mark.parametrize(("pod_there", "node_ready", "slurmd_ready"), [
    (True, "Unknown", "False"),  # the kubelet is gone: the Node controller marked the slurmd Pod not Ready
    (True, "True", "True"),  # the kubelet is back, the Pod not finished yet
    (False, "Unknown", "True"),  # the Pod force-deleted, the Node still lost (the slurmd Pod not marked yet)
], ids=["pod-and-node-lost", "pod-still-there", "node-still-lost"])
def test_production_rules_keep_a_stuck_pod_drain_while_its_cause_holds(pod_there, node_ready, slurmd_ready):
    ctx, slurm, _ = stuck_setup(pod_there=pod_there, node_ready=node_ready, slurmd_ready=slurmd_ready)
    SlurmSideReconciler(ctx).reconcile("node1")
    drains = [c for c in slurm.calls if c[0] == "update" and c[2] is not None and (c[2].state or c[2].reason)]
    assert drains == []  # (the Syncer's Extra facts may be written; the drain is not touched)


def test_production_rules_lift_a_stuck_pod_drain_once_the_pod_is_gone_and_the_node_ready():
    ctx, slurm, _ = stuck_setup(pod_there=False, node_ready="True")
    SlurmSideReconciler(ctx).reconcile("node1")
    assert [c[2].state for c in slurm.calls if c[0] == "update" and c[2] is not None] == ["UNDRAIN"]


def test_a_pod_of_the_same_name_but_another_uid_does_not_hold_the_drain():
    """A StatefulSet made the Pod again: the stuck one is gone."""
    ctx, slurm, _ = stuck_setup(pod_there=False, node_ready="True")
    ctx.all_pods.put({"metadata": {"name": "trainer-0", "namespace": "team-a", "uid": "uid-new"},  # type: ignore[attr-defined]
                      "spec": {"nodeName": "worker-2"}})
    SlurmSideReconciler(ctx).reconcile("node1")
    assert [c[2].state for c in slurm.calls if c[0] == "update" and c[2] is not None] == ["UNDRAIN"]


# ---- a deleted slurmd Pod: DOWN once (sunk.translate.poddown), with the production rules ---------------------------

HAD_POD = '{"namespace":"slurm","pod":"node1","ready":true}'


def _as_slurm_shows(ctx: Any, slurm: FakeSlurm, node: Node) -> None:
    """Slurm (and the cache) now show ``node``."""
    slurm.items[node.name] = node
    ctx.slurm_nodes.items()[node.name] = node


def test_a_deleted_pod_sets_its_node_down_once_and_then_the_drain_holds():
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra=HAD_POD)])
    SlurmSideReconciler(ctx).reconcile("node1")
    assert [c[0] for c in slurm.calls] == ["read", "update"]  # the verified write: a fresh read first
    update = slurm.calls[-1][2]
    assert update is not None and update.state == "DOWN" and update.reason == "k8s: slurmd pod slurm/node1 deleted"
    assert json.loads(update.extra or "") == {"namespace": "slurm", "pod": "node1", "ready": True, "deleted": True}
    # Slurm did it; ReturnToService=2 brought the node back, its slurmd (outside the Pod) answering.
    _as_slurm_shows(ctx, slurm, Node("node1", state="IDLE", extra=update.extra or ""))
    slurm.calls.clear()
    SlurmSideReconciler(ctx).reconcile("node1")
    (_, (_, _, drain)) = slurm.calls
    assert drain == NodeUpdate(state="DRAIN", reason="k8s: slurmd pod slurm/node1 does not exist")  # no DOWN again
    # A restarted Syncer (a new reconciler, nothing in memory) reads the same from Slurm.
    _as_slurm_shows(ctx, slurm, Node("node1", state="IDLE+DRAIN", reason=drain.reason or "",
                                     extra=update.extra or ""))
    slurm.calls.clear()
    SlurmSideReconciler(ctx).reconcile("node1")
    assert slurm.calls == []


def test_a_new_pod_clears_the_mark_so_its_own_deletion_is_news():
    marked = '{"deleted":true,"namespace":"slurm","pod":"node1","ready":true}'
    ctx, pods, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra=marked)])
    pods.put(pod("node1", conditions=[{"type": "Ready", "status": "True"}]))
    SlurmSideReconciler(ctx).reconcile("node1")
    update = slurm.calls[-1][2]
    assert update is not None and update.state is None and json.loads(update.extra or "")["deleted"] is False


@pytest.mark.parametrize(("state", "reason"), [("DOWN", "syncer-test: down by hand"), ("IDLE+DRAIN", "bad DIMM"),
                                                ("DOWN", "Not responding")])
def test_a_persons_down_or_drain_is_never_replaced_only_the_deletion_marked(state, reason):
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state=state, reason=reason, extra=HAD_POD)])
    SlurmSideReconciler(ctx).reconcile("node1")
    update = slurm.calls[-1][2]
    assert update is not None and update.state is None and update.reason is None
    assert json.loads(update.extra or "")["deleted"] is True


def test_the_down_is_decided_again_from_slurms_current_word():
    """The cache says IDLE; Slurm says a person set it DOWN a moment ago: only the mark is written."""
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra=HAD_POD)])
    slurm.items["node1"] = Node("node1", state="DOWN", reason="maintenance", extra=HAD_POD)
    SlurmSideReconciler(ctx).reconcile("node1")
    update = slurm.calls[-1][2]
    assert update is not None and update.state is None and json.loads(update.extra or "")["deleted"] is True


def test_a_node_never_ours_is_never_set_down():
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE", extra='{"owner":"ml"}'),
                                             Node("node2", state="IDLE",
                                                  extra='{"namespace":"elsewhere","pod":"node2"}')])
    for name in ("node1", "node2"):
        SlurmSideReconciler(ctx).reconcile(name)
    assert slurm.calls == []


# ---- Slurm node clean-up (--slurm-node-clean-up) -------------------------------------------------------------

GONE = '{"deleted":true,"namespace":"slurm","nodeset":"gpu","pod":"g-1","ready":false}'
GONE_REASON = "k8s: slurmd pod slurm/g-1 does not exist"


def _gone(state: str = "IDLE+DRAIN", extra: str = GONE) -> Node:
    """A NodeSet's node whose Pod was deleted, DOWN and back (ReturnToService), drained for the missing Pod."""
    return Node("g-1", state=state, reason=GONE_REASON, extra=extra)


def test_clean_up_deletes_a_marked_idle_node_no_nodeslice_lists():
    ctx, _, _, cache, slurm, _ = make_ctx(nodes=[_gone()], clean_up=True)
    assert SlurmSideReconciler(ctx).reconcile("g-1") is None
    assert [c[:2] for c in slurm.calls] == [("read", "g-1"), ("delete", "g-1")]  # a fresh read, then the delete
    assert cache.nudges == 1


def test_clean_up_is_off_by_default():
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[_gone()])
    SlurmSideReconciler(ctx).reconcile("g-1")
    assert slurm.calls == []


def test_clean_up_keeps_a_listed_node_and_marks_it_while_its_pod_is_there():
    from syncer_fakes import nodeslice

    ctx, pods, _, _, slurm, _ = make_ctx(nodes=[Node("g-1", state="IDLE", extra=HAD_POD.replace("node1", "g-1"))],
                                         clean_up=True)
    ctx.nodeslices.put(nodeslice("gpu-0", "gpu", "g-1"))  # type: ignore[union-attr]
    pods.put(pod("g-1", conditions=[{"type": "Ready", "status": "True"}]))
    SlurmSideReconciler(ctx).reconcile("g-1")
    update = slurm.calls[-1][2]
    assert update is not None and json.loads(update.extra or "")["nodeset"] == "gpu"
    assert not [c for c in slurm.calls if c[0] == "delete"]


@pytest.mark.parametrize("extra", ['{"namespace":"slurm","pod":"node1","deleted":true}', ""])
def test_clean_up_never_deletes_a_node_no_nodeslice_ever_listed(extra):
    """The dev cluster's static nodes (node1..node4): in no NodeSlice, so never marked."""
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[Node("node1", state="IDLE+DRAIN", reason=GONE_REASON, extra=extra)],
                                      clean_up=True)
    assert SlurmSideReconciler(ctx).reconcile("node1") is None
    assert not [c for c in slurm.calls if c[0] == "delete"]


def test_clean_up_never_deletes_another_syncers_node():
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[_gone(extra=GONE.replace('"slurm"', '"elsewhere"'))], clean_up=True)
    SlurmSideReconciler(ctx).reconcile("g-1")
    assert slurm.calls == []


@pytest.mark.parametrize(("state", "jobs"), [("ALLOCATED+DRAIN", ()), ("MIXED+DRAIN", ()),
                                             ("IDLE+COMPLETING+DRAIN", ()),
                                             ("IDLE+DRAIN", (Job(9, state="COMPLETED", nodes="g-[1-2]"),))])
def test_clean_up_waits_while_the_node_has_jobs(state, jobs):
    ctx, _, _, cache, slurm, _ = make_ctx(nodes=[_gone(state)], clean_up=True)
    cache.job_items = {j.id: j for j in jobs}
    result = SlurmSideReconciler(ctx).reconcile("g-1")
    assert result is not None and result.requeue_after == 10.0
    assert slurm.calls == []


def test_clean_up_waits_for_a_fresh_job_list():
    ctx, _, _, cache, slurm, _ = make_ctx(nodes=[_gone()], clean_up=True)
    cache.jobs_fresh = False
    result = SlurmSideReconciler(ctx).reconcile("g-1")
    assert result is not None and result.requeue_after and slurm.calls == []


def test_clean_up_decides_again_from_slurms_current_word():
    """The cache says idle; Slurm says a job started a moment ago: no delete."""
    ctx, _, _, _, slurm, _ = make_ctx(nodes=[_gone()], clean_up=True)
    slurm.items["g-1"] = _gone("MIXED+DRAIN")
    result = SlurmSideReconciler(ctx).reconcile("g-1")
    assert [c[0] for c in slurm.calls] == ["read"] and result is not None and result.requeue_after


def test_a_refused_deletion_is_logged_and_retried_later_with_growing_backoff(caplog: pytest.LogCaptureFixture):
    from sunk.slurm.errors import SlurmError

    ctx, _, _, _, slurm, _ = make_ctx(nodes=[_gone()], clean_up=True)
    slurm.delete_error = SlurmError("delete node g-1: Node g-1 is not dynamic", code=2030)
    reconciler = SlurmSideReconciler(ctx)
    assert reconciler.cleanup is not None
    reconciler.cleanup.rand = lambda: 0.999
    waits = []
    with caplog.at_level(logging.WARNING, logger="sunk.syncer.cleanup"):
        for _ in range(8):
            result = reconciler.reconcile("g-1")
            assert result is not None and result.requeue_after is not None
            waits.append(result.requeue_after)
    assert waits == sorted(waits) and waits[0] < 20 and waits[-1] == pytest.approx(600, rel=0.01)
    assert "refused its deletion" in caplog.text and "not dynamic" in caplog.text
    slurm.delete_error = None  # accepted at last: the backoff starts over next time
    assert reconciler.reconcile("g-1") is None and "g-1" not in slurm.items


def test_a_node_slurm_no_longer_knows_is_deleted_already():
    from sunk.slurm.errors import NotFound

    ctx, _, _, _, slurm, _ = make_ctx(nodes=[_gone()], clean_up=True)
    del slurm.items["g-1"]  # gone from Slurm, not yet from the cache
    assert SlurmSideReconciler(ctx).reconcile("g-1") is None  # the fresh read finds no g-1: nothing sent
    assert [c[0] for c in slurm.calls] == ["read"]
    slurm.items["g-1"] = _gone()  # gone between the fresh read and the delete: done all the same
    slurm.delete_error = NotFound("delete node g-1: Invalid node name specified", code=2018)
    assert SlurmSideReconciler(ctx).reconcile("g-1") is None


def test_an_outage_on_delete_is_raised_for_the_controller_to_wait_out():
    from sunk.slurm.errors import SlurmUnavailable

    ctx, _, _, _, slurm, _ = make_ctx(nodes=[_gone()], clean_up=True)
    slurm.delete_error = SlurmUnavailable("delete node g-1: cannot reach slurmrestd")
    with pytest.raises(SlurmUnavailable):
        SlurmSideReconciler(ctx).reconcile("g-1")


# ---- a drain the scheduler made for a device mismatch (--dra-device-mapping) --------------------------------------

MAPPING = dra.DeviceMapping("gpu.example.com", frozenset({"gpu.example.com"}), attribute="index")
MISMATCH = DeviceMismatchDrain("worker-1", "gpu index 3 names 0 devices of driver gpu.example.com").reason()


def gpus(*indices: int) -> dict[str, Any]:
    return {"metadata": {"name": "worker-1-gpus"}, "spec": {
        "driver": "gpu.example.com", "nodeName": "worker-1",
        "pool": {"name": "worker-1", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in indices]}}


def held(device: str, consumer: dict[str, Any]) -> dict[str, Any]:
    result = {"request": "gpus", "driver": "gpu.example.com", "pool": "worker-1", "device": device}
    return {"metadata": {"name": f"{consumer['metadata']['name']}-gpus", "namespace": "team-a"},
            "status": dra.claim_status([result], "worker-1", consumer)}


def test_a_device_mismatch_drain_is_lifted_once_slurm_and_the_driver_agree_and_woken_by_their_changes():
    woken: list[str] = []
    drained = Node("node1", state="IDLE+DRAIN", reason=MISMATCH, extra=OURS, gres="gpu:h100:4")
    ctx, pods, nodes, _, slurm, recorder = make_ctx(nodes=[drained], dra=MAPPING, enqueue=woken.append)
    pods.put(pod("node1", conditions=[{"type": "Ready", "status": "True"}]))
    nodes.put(k8s_node("worker-1"))
    triggers.attach(ctx, woken.append)
    slices, claims = ctx.dra_slices, ctx.dra_claims
    assert slices is not None and claims is not None
    reconciler = SlurmSideReconciler(ctx)
    slices.put(gpus(0, 1, 2))  # type: ignore[attr-defined]
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == []  # index 3 names no device yet
    web = pod("web", namespace="team-a")  # (kube-scheduler's Pod: no schedulerName of sunk's)
    claims.put(held("gpu-3", web))  # type: ignore[attr-defined]
    woken.clear()
    slices.put(gpus(0, 1, 2, 3))  # type: ignore[attr-defined]
    assert "node1" in woken
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == []  # gpu-3 is held by a claim sunk did not fill: Slurm would give it again
    inference = pod("inference", namespace="team-a")
    inference["spec"]["schedulerName"] = "sunk-scheduler"
    ctx.all_pods.put(inference)  # type: ignore[attr-defined]
    woken.clear()
    claims.remove(held("gpu-3", web))  # type: ignore[attr-defined]
    claims.put(held("gpu-3", inference))  # type: ignore[attr-defined]  # sunk filled it, from Slurm's job
    assert "node1" in woken
    reconciler.reconcile("node1")
    assert _drain_writes(slurm) == [("UNDRAIN", None)]
    assert "agree on Node worker-1" in recorder.events[-1][2]


def test_without_the_mapping_a_device_mismatch_drain_stays():
    drained = Node("node1", state="IDLE+DRAIN", reason=MISMATCH, extra=OURS, gres="gpu:h100:4")
    ctx, pods, nodes, _, slurm, _ = make_ctx(nodes=[drained])
    pods.put(pod("node1", conditions=[{"type": "Ready", "status": "True"}]))
    nodes.put(k8s_node("worker-1"))
    SlurmSideReconciler(ctx).reconcile("node1")
    assert _drain_writes(slurm) == []
