"""One NodeSet reconcile decided from facts (sunk/translate/nodeset/plan.py): creation, protected
scale-in and updates, deletion of the NodeSet, bad input, status and NodeSlices."""

from __future__ import annotations

from typing import Any

import pytest
from nodeset_fakes import node, nodeset, pod_for

from sunk.model import names
from sunk.model.slurm import Node
from sunk.translate.nodeset import slices
from sunk.translate.nodeset.plan import WHY_DELETED, WHY_UPDATE, Drain, Facts, Mark, decide, safe_to_delete
from sunk.translate.nodeset.slices import Entry
from sunk.translate.nodeset.spec import read_spec

IDLE, ALLOC, MIXED = "IDLE", "ALLOCATED", "MIXED"
OLD = "0ld0ld0ld0"  # a template hash that is not the current one


def W(i: int, **kw: Any) -> dict[str, Any]:
    """Kubernetes Node worker-i at 10.0.3.i: Slurm node g-3-i."""
    return node(f"worker-{i}", f"10.0.3.{i}", **kw)


def slurm(*nodes: Node) -> dict[str, Node]:
    return {n.name: n for n in nodes}


def sn(i: int, state: str = IDLE, reason: str = "") -> Node:
    return Node(f"g-3-{i}", state=state, reason=reason)


def ours(i: int, why: str) -> str:
    return f"k8s: slurmd pod slurm/g-3-{i} is pending deletion: {why}"


def cond(plan: Any, ctype: str) -> dict[str, Any]:
    return next(c for c in plan.conditions if c["type"] == ctype)


def facts(ns: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
          slurm_nodes: dict[str, Node] | None = None, **kw: Any) -> Facts:
    return Facts(ns, nodes, pods, slurm=slurm_nodes if slurm_nodes is not None else {}, **kw)


# ---- creation --------------------------------------------------------------------------------------


def test_each_matching_node_gets_one_pod_named_after_its_slurm_node():
    ns = nodeset()
    plan = decide(facts(ns, [W(1), W(2), node("cpu-1", "10.0.9.1", pool="cpu")]))
    assert [(p["metadata"]["name"], p["spec"]["nodeName"]) for p in plan.create] == [
        ("g-3-1", "worker-1"), ("g-3-2", "worker-2")]
    assert not (plan.mark or plan.drain or plan.undrain or plan.delete)
    assert plan.status["matching"] == 2 and plan.status["assigned"] == 2 and plan.status["replicas"] == 0
    assert cond(plan, "Progressing")["reason"] == "Creating"
    assert cond(plan, "Ready")["status"] == "False"
    assert not plan.add_finalizer


def test_the_finalizer_is_added_first():
    assert decide(facts(nodeset(finalizer=False), [W(1)])).add_finalizer


def test_a_steady_nodeset_does_nothing_and_says_ready():
    ns = nodeset()
    pods = [pod_for(ns, "worker-1", "g-3-1"), pod_for(ns, "worker-2", "g-3-2")]
    current = slices.slice_object(read_spec(ns).spec, "gpu-0", [
        Entry("g-3-1", "g-3-1", "worker-1", "10.0.3.1"), Entry("g-3-2", "g-3-2", "worker-2", "10.0.3.2")])
    plan = decide(facts(ns, [W(1), W(2)], pods, slurm(sn(1), sn(2, ALLOC)), slices=[current]))
    assert not (plan.create or plan.mark or plan.drain or plan.undrain or plan.delete)
    assert plan.slices.empty
    assert plan.status == {"observedGeneration": 3, "selector": f"{names.LABEL_NODESET}=gpu", "replicas": 2,
                           "matching": 2, "assigned": 2, "ready": 2, "updated": 2, "slurmIdle": 1,
                           "slurmAllocated": 1, "slurmDrained": 0, "slurmDown": 0, "slurmNotResponding": 0}
    assert cond(plan, "Ready") == {"type": "Ready", "status": "True", "reason": "AllReady",
                                   "message": "2 of 2 assigned Nodes have a Ready slurmd Pod"}
    assert cond(plan, "Progressing")["status"] == "False"
    assert plan.events == ()


def test_a_node_being_deleted_does_not_match():
    plan = decide(facts(nodeset(), [W(1, deleting=True), W(2)]))
    assert [p["metadata"]["name"] for p in plan.create] == ["g-3-2"]


def test_no_pod_while_another_pod_of_the_nodeset_is_on_the_node_or_holds_the_name():
    ns = nodeset()
    terminating = pod_for(ns, "worker-1", "g-3-1", terminating=True)
    renamed = pod_for(ns, "worker-2", "g-9-9")  # worker-2 was 10.0.9.9 once
    on_other_node = pod_for(ns, "worker-8", "g-3-3")  # g-3-3 still on the Node that had its address before
    plan = decide(facts(ns, [W(1), W(2), W(3)], [terminating, renamed, on_other_node]))
    assert plan.create == ()


# ---- scale-in ----------------------------------------------------------------------------------------


def test_scale_in_marks_then_drains_then_deletes_only_when_drained_and_idle():
    ns = nodeset()
    unlabelled = W(2, pool="cpu")
    why = "scale-in: Node worker-2 no longer matches the NodeSet"
    p2 = pod_for(ns, "worker-2", "g-3-2")
    plan = decide(facts(ns, [W(1), unlabelled], [pod_for(ns, "worker-1", "g-3-1"), p2], slurm(sn(1), sn(2, ALLOC))))
    assert plan.mark == (Mark("g-3-2", "uid-g-3-2", why),)
    assert plan.drain == (Drain("g-3-2", ours(2, why)),)
    assert plan.delete == ()  # the mark is not on the Pod yet
    assert cond(plan, "Progressing")["reason"] == "ScalingIn"

    marked = pod_for(ns, "worker-2", "g-3-2", pending=why)
    pods = [pod_for(ns, "worker-1", "g-3-1"), marked]
    busy = decide(facts(ns, [W(1), unlabelled], pods, slurm(sn(1), sn(2, "ALLOCATED+DRAIN", ours(2, why)))))
    assert not (busy.mark or busy.drain or busy.delete)
    done = decide(facts(ns, [W(1), unlabelled], pods, slurm(sn(1), sn(2, "IDLE+DRAIN", ours(2, why)))))
    assert [(d.pod, d.uid) for d in done.delete] == [("g-3-2", "uid-g-3-2")]


@pytest.mark.parametrize(("state", "reason", "drains", "deletes"), [
    (IDLE, "", True, False),  # not drained yet
    ("IDLE+DRAIN", "maintenance", False, True),  # a person's drain is a drain too: it may go, the drain stays
    ("IDLE+DRAIN", "k8s: slurmd pod slurm/g-3-2 is not ready", False, True),
    ("MIXED+DRAIN", "x", False, False),
    ("IDLE+COMPLETING+DRAIN", "x", False, False),  # a job still ending
    ("DOWN", "", False, True),  # down, no job: nothing to drain, nothing runs
    ("DOWN+ALLOCATED", "", False, False),
    (None, "", False, True),  # unknown to Slurm: never registered, or deleted already
])
def test_when_a_marked_pod_goes(state, reason, drains, deletes):
    ns = nodeset()
    marked = pod_for(ns, "worker-2", "g-3-2", pending="scale-in: x")
    nodes = slurm(Node("g-3-2", state=state, reason=reason)) if state else {}
    plan = decide(facts(ns, [W(2, pool="cpu"), W(1)], [marked], nodes))
    assert bool(plan.drain) is drains
    assert bool(plan.delete) is deletes
    assert safe_to_delete(nodes.get("g-3-2")) is deletes or drains


def test_a_node_that_matches_again_is_unmarked_and_only_our_drain_is_lifted():
    ns = nodeset()
    why = "scale-in: Node worker-2 no longer matches the NodeSet"
    marked = pod_for(ns, "worker-2", "g-3-2", pending=why)
    plan = decide(facts(ns, [W(2)], [marked], slurm(sn(2, "IDLE+DRAIN", ours(2, why)))))
    assert plan.mark == (Mark("g-3-2", "uid-g-3-2", None),)
    assert plan.undrain == ("g-3-2",) and plan.delete == ()
    by_person = decide(facts(ns, [W(2)], [marked], slurm(sn(2, "IDLE+DRAIN", "bad DIMM"))))
    assert by_person.mark == (Mark("g-3-2", "uid-g-3-2", None),) and by_person.undrain == ()


@pytest.mark.parametrize("reason", [
    "bad DIMM",  # a person's
    "k8s: slurmd pod slurm/g-3-1 is not ready",  # the Syncer's
    "k8s: slurmd pod slurm/g-3-11 is pending deletion: x",  # another Pod's
    "NHC: verify-undrain",
])
def test_a_drain_not_ours_is_never_lifted(reason):
    ns = nodeset()
    plan = decide(facts(ns, [W(1)], [pod_for(ns, "worker-1", "g-3-1")], slurm(sn(1, "IDLE+DRAIN", reason))))
    assert plan.undrain == () and plan.mark == () and plan.drain == ()


def test_our_drain_is_lifted_only_once_the_pod_is_ready():
    ns = nodeset()
    drained = slurm(sn(1, "IDLE+DRAIN", ours(1, WHY_UPDATE)))
    assert decide(facts(ns, [W(1)], [pod_for(ns, "worker-1", "g-3-1")], drained)).undrain == ("g-3-1",)
    assert decide(facts(ns, [W(1)], [pod_for(ns, "worker-1", "g-3-1", ready=False)], drained)).undrain == ()
    down = slurm(sn(1, "DOWN+DRAIN", ours(1, WHY_UPDATE)))
    assert decide(facts(ns, [W(1)], [pod_for(ns, "worker-1", "g-3-1")], down)).undrain == ()


def test_a_changed_address_renames_the_slurm_node_through_a_scale_in():
    ns = nodeset()
    moved = node("worker-1", "10.0.4.1")
    old = pod_for(ns, "worker-1", "g-3-1")
    plan = decide(facts(ns, [moved], [old], slurm(sn(1))))
    assert plan.mark == (Mark("g-3-1", "uid-g-3-1", "scale-in: the Slurm node of Node worker-1 is now g-4-1, "
                                                    "not g-3-1"),)
    assert plan.create == ()  # one slurmd Pod per Node: the new one waits for the old one
    assert {e.slurm_node for _, got in plan.slices.write for e in got} == {"g-3-1", "g-4-1"}
    gone = decide(facts(ns, [moved], [], slurm(sn(1))))
    assert [p["metadata"]["name"] for p in gone.create] == ["g-4-1"]
    assert {e.slurm_node for _, got in gone.slices.write for e in got} == {"g-4-1"}


def test_replicas_caps_the_assigned_nodes_and_gives_up_idle_ones_first():
    ns = nodeset(replicas=2)
    assert [p["metadata"]["name"] for p in decide(facts(ns, [W(3), W(1), W(2)])).create] == ["g-3-1", "g-3-2"]
    pods = [pod_for(ns, f"worker-{i}", f"g-3-{i}") for i in (1, 2, 3)]
    plan = decide(facts(ns, [W(1), W(2), W(3)], pods, slurm(sn(1), sn(2, ALLOC), sn(3, MIXED))))
    assert plan.mark == (Mark("g-3-1", "uid-g-3-1", "scale-in: past spec.replicas"),)
    assert plan.status["assigned"] == 2 and plan.status["matching"] == 3
    # The one already on its way out stays the one that goes, even once it is idle and the others are busy.
    pods[0] = pod_for(ns, "worker-1", "g-3-1", pending="scale-in: past spec.replicas")
    again = decide(facts(ns, [W(1), W(2), W(3)], pods, slurm(sn(1, "IDLE+DRAIN", "x"), sn(2), sn(3))))
    assert [d.pod for d in again.delete] == ["g-3-1"] and again.mark == ()
    assert decide(facts(nodeset(replicas=0), [W(1)])).create == ()


# ---- rolling update ----------------------------------------------------------------------------------


def rolling(ns: dict[str, Any], n: int, *, old: set[int], busy: set[int] = frozenset(),  # type: ignore[assignment]
            not_ready: set[int] = frozenset(), pending: dict[int, str] | None = None,  # type: ignore[assignment]
            drained: set[int] = frozenset()) -> Facts:  # type: ignore[assignment]
    pods, states = [], []
    for i in range(1, n + 1):
        pods.append(pod_for(ns, f"worker-{i}", f"g-3-{i}", digest=OLD if i in old else None,
                            ready=i not in not_ready, pending=(pending or {}).get(i)))
        state = ALLOC if i in busy else IDLE
        states.append(sn(i, state + ("+DRAIN" if i in drained else ""), ours(i, WHY_UPDATE) if i in drained else ""))
    return facts(ns, [W(i) for i in range(1, n + 1)], pods, slurm(*states))


def test_an_update_replaces_idle_nodes_first_one_at_a_time():
    ns = nodeset()
    plan = decide(rolling(ns, 4, old={1, 2, 3, 4}, busy={1, 2}))
    assert plan.mark == (Mark("g-3-3", "uid-g-3-3", WHY_UPDATE),)
    assert plan.drain == (Drain("g-3-3", ours(3, WHY_UPDATE)),)
    assert cond(plan, "Progressing") == {"type": "Progressing", "status": "True", "reason": "RollingUpdate",
                                         "message": "0 of 4 Pods updated"}
    assert plan.status["updated"] == 0


def test_the_budget_counts_what_is_already_unavailable():
    ns = nodeset()
    marked = decide(rolling(ns, 4, old={1, 2, 3, 4}, pending={3: WHY_UPDATE}))
    assert marked.mark == ()  # g-3-3 holds the one slot
    missing = decide(facts(ns, [W(1), W(2)], [pod_for(ns, "worker-1", "g-3-1", digest=OLD)], slurm(sn(1))))
    assert missing.mark == () and [p["metadata"]["name"] for p in missing.create] == ["g-3-2"]
    wider = decide(rolling(nodeset(max_unavailable=2), 4, old={1, 2, 3, 4}, busy={4}))
    assert [m.pod for m in wider.mark] == ["g-3-1", "g-3-2"]
    percent = decide(rolling(nodeset(max_unavailable="50%"), 4, old={1, 2, 3, 4}, pending={1: WHY_UPDATE}))
    assert [m.pod for m in percent.mark] == ["g-3-2"]


def test_pods_that_are_not_ready_are_replaced_first_and_cost_nothing():
    plan = decide(rolling(nodeset(), 4, old={1, 2, 3, 4}, not_ready={4, 2}))
    assert [m.pod for m in plan.mark] == ["g-3-2", "g-3-4"]
    plan = decide(rolling(nodeset(), 4, old={1, 3}, not_ready={4}))
    assert [m.pod for m in plan.mark] == []  # g-3-4 is current; it holds the one slot


def test_busy_nodes_are_drained_once_no_idle_one_is_left_and_replaced_when_their_jobs_end():
    ns = nodeset()
    plan = decide(rolling(ns, 3, old={1, 2}, busy={1, 2}))
    assert plan.mark == (Mark("g-3-1", "uid-g-3-1", WHY_UPDATE),) and plan.delete == ()
    running = decide(rolling(ns, 3, old={1, 2}, busy={1, 2}, pending={1: WHY_UPDATE}, drained={1}))
    assert not (running.mark or running.drain or running.delete)
    ended = decide(rolling(ns, 3, old={1, 2}, busy={2}, pending={1: WHY_UPDATE}, drained={1}))
    assert [d.pod for d in ended.delete] == ["g-3-1"]


def test_the_replacement_comes_with_the_new_template_once_the_old_pod_is_gone():
    ns = nodeset(image="sunk/slurmd:26.05")
    terminating = pod_for(ns, "worker-1", "g-3-1", digest=OLD, pending=WHY_UPDATE, terminating=True)
    assert decide(facts(ns, [W(1)], [terminating], slurm(sn(1, "DOWN+DRAIN")))).create == ()
    plan = decide(facts(ns, [W(1)], [], slurm(sn(1, "DOWN+DRAIN"))))
    (created,) = plan.create
    assert created["spec"]["containers"][0]["image"] == "sunk/slurmd:26.05"
    assert plan.slices.write == (("gpu-0", (Entry("g-3-1", "g-3-1", "worker-1", "10.0.3.1"),)),)


def test_a_template_set_back_unmarks_and_lifts_our_drain():
    plan = decide(rolling(nodeset(), 2, old=set(), pending={1: WHY_UPDATE}, drained={1}))
    assert plan.mark == (Mark("g-3-1", "uid-g-3-1", None),) and plan.undrain == ("g-3-1",)


def test_on_delete_never_marks_for_an_update():
    ns = nodeset(strategy="OnDelete")
    plan = decide(rolling(ns, 3, old={1, 2, 3}))
    assert plan.mark == () and plan.drain == ()
    assert plan.status["updated"] == 0 and cond(plan, "Progressing")["status"] == "False"
    switched = decide(rolling(ns, 3, old={1, 2, 3}, pending={1: WHY_UPDATE}))
    assert switched.mark == (Mark("g-3-1", "uid-g-3-1", None),)


# ---- deleting the NodeSet ------------------------------------------------------------------------------


def test_deleting_the_nodeset_drains_every_node_and_keeps_the_finalizer_until_no_pod_is_left():
    ns = nodeset(deleting=True)
    pods = [pod_for(ns, "worker-1", "g-3-1"), pod_for(ns, "worker-2", "g-3-2", pending=WHY_DELETED)]
    plan = decide(facts(ns, [W(1), W(2)], pods, slurm(sn(1, ALLOC), sn(2, "IDLE+DRAIN", ours(2, WHY_DELETED)))))
    assert plan.mark == (Mark("g-3-1", "uid-g-3-1", WHY_DELETED),)
    assert plan.drain == (Drain("g-3-1", ours(1, WHY_DELETED)),)
    assert [d.pod for d in plan.delete] == ["g-3-2"]
    assert plan.create == () and not plan.remove_finalizer
    assert cond(plan, "Progressing")["reason"] == "Deleting"
    gone = decide(facts(ns, [W(1), W(2)], [], slurm(sn(1), sn(2)), slices=[
        slices.slice_object(read_spec(ns).spec, "gpu-0", [Entry("g-3-1", "g-3-1", "worker-1")])]))
    assert gone.remove_finalizer and gone.slices.delete == ("gpu-0",)


def test_deleting_with_cancel_jobs_cancels_on_marked_drained_busy_nodes_only():
    """``on-delete: cancel-jobs``: a node's jobs are cancelled once its Pod (this NodeSet's, by the owner
    reference's uid) carries the mark and Slurm shows the node drained, so no job starts there after; an idle node,
    one only completing, an unmarked Pod's, one not drained yet (or only DOWN), and a Pod that merely carries the
    NodeSet's label are left to the plain rules. Without the annotation nothing is cancelled."""
    cancel = {names.ANN_ON_DELETE: names.ON_DELETE_CANCEL_JOBS}
    ns = nodeset(deleting=True)
    ns["metadata"]["annotations"] = cancel
    pods = [pod_for(ns, f"worker-{i}", f"g-3-{i}", pending=WHY_DELETED if i != 4 else None) for i in range(1, 9)]
    pods[6]["metadata"]["ownerReferences"] = []  # a Pod someone labelled and marked so
    pods[7]["metadata"]["ownerReferences"][0]["uid"] = "uid-of-another-nodeset-of-that-name"
    nodes = slurm(sn(1, "ALLOCATED+DRAIN", ours(1, WHY_DELETED)), sn(2, "MIXED+DRAIN", "a person's"),
                  sn(3, "IDLE+DRAIN", ours(3, WHY_DELETED)), sn(4, "ALLOCATED+DRAIN", "a person's"), sn(5, ALLOC),
                  sn(6, "IDLE+DRAIN+COMPLETING", ours(6, WHY_DELETED)), sn(7, "ALLOCATED+DRAIN", "x"),
                  sn(8, "ALLOCATED+DRAIN", "x"))
    workers = [W(i) for i in range(1, 9)]
    plan = decide(facts(ns, workers, pods, nodes))
    assert plan.cancel_jobs_on == ("g-3-1", "g-3-2")
    assert plan.drain == (Drain("g-3-5", ours(5, WHY_DELETED)),)
    assert [d.pod for d in plan.delete] == ["g-3-3"]
    assert "their jobs are cancelled" in cond(plan, "Progressing")["message"]
    down = decide(facts(ns, workers[:1], pods[:1], slurm(sn(1, "DOWN+ALLOCATED", "Not responding"))))
    assert down.cancel_jobs_on == ()  # (never drained by us: a person's resume of it would let jobs in)
    assert decide(Facts(ns, workers, pods, slurm=None)).cancel_jobs_on == ()  # blind: nothing
    plain = nodeset(deleting=True)
    assert decide(facts(plain, workers, pods, nodes)).cancel_jobs_on == ()
    alive = nodeset()
    alive["metadata"]["annotations"] = cancel
    assert decide(facts(alive, workers, pods, nodes)).cancel_jobs_on == ()  # only a deletion cancels


def test_an_on_delete_annotation_of_another_value_is_a_problem_and_cancels_nothing():
    ns = nodeset(deleting=True)
    ns["metadata"]["annotations"] = {names.ANN_ON_DELETE: "cancel-job"}
    read = read_spec(ns)
    assert not read.spec.cancel_jobs_on_delete
    assert any(names.ANN_ON_DELETE in p and "'cancel-job'" in p for p in read.problems)
    pods = [pod_for(ns, "worker-1", "g-3-1", pending=WHY_DELETED)]
    assert decide(facts(ns, [W(1)], pods, slurm(sn(1, "ALLOCATED+DRAIN")))).cancel_jobs_on == ()


def test_deleting_proceeds_even_with_a_bad_spec_but_not_blind():
    ns = nodeset(deleting=True, spec={"template": None})
    pods = [pod_for(nodeset(), "worker-1", "g-3-1", pending=WHY_DELETED)]
    assert [d.pod for d in decide(facts(ns, [W(1)], pods, slurm(sn(1, "IDLE+DRAIN")))).delete] == ["g-3-1"]
    stale = decide(Facts(ns, [W(1)], pods, slurm=None))
    assert not (stale.delete or stale.drain or stale.mark or stale.remove_finalizer)


# ---- bad input -----------------------------------------------------------------------------------------


def test_an_invalid_spec_freezes_the_nodeset():
    ns = nodeset(spec={"nodeSelector": {"pool": "gpu"}, "naming": {"prefix": "g"},
                       "template": {"spec": {"containers": [{"name": "x", "image": "i"}]}}})
    pods = [pod_for(nodeset(), "worker-9", "g-3-9")]  # on a Node that does not even match
    plan = decide(facts(ns, [W(1)], pods, slurm(sn(9))))
    assert not (plan.create or plan.mark or plan.drain or plan.undrain or plan.delete) and plan.slices.empty
    (valid,) = plan.conditions
    assert valid["type"] == "SpecValid" and valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "none is named 'slurmd'" in valid["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "InvalidSpec")]
    said = nodeset(spec=ns["spec"], conditions=[valid])
    assert decide(facts(said, [W(1)], pods, slurm(sn(9)))).events == ()  # said once, not every reconcile


def test_a_selector_that_matches_nothing_deletes_nothing():
    ns = nodeset(selector={"pool": "gpu-typo"})
    pods = [pod_for(nodeset(), "worker-1", "g-3-1")]
    plan = decide(facts(ns, [W(1)], pods, slurm(sn(1))))
    assert not (plan.create or plan.mark or plan.drain or plan.delete)
    assert cond(plan, "NodesMatched")["status"] == "False"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "NoMatchingNodes")]
    fixed = nodeset(conditions=[cond(plan, "NodesMatched")])
    assert [(e.type, e.reason) for e in decide(facts(fixed, [W(1)], pods, slurm(sn(1)))).events] == [
        ("Normal", "NodesMatched")]


def test_colliding_names_create_nothing_and_move_nothing():
    ns = nodeset()
    twins = [W(1), node("worker-b", "10.1.3.1")]
    plan = decide(facts(ns, twins))
    assert plan.create == ()
    names_valid = cond(plan, "NamesValid")
    assert names_valid["status"] == "False" and names_valid["reason"] == "NameCollision"
    assert "g-3-1 <- worker-1, worker-b" in names_valid["message"]
    assert ("Warning", "NameCollision") in [(e.type, e.reason) for e in plan.events]
    held = decide(facts(ns, [*twins, W(2)], [pod_for(ns, "worker-1", "g-3-1")], slurm(sn(1))))
    assert held.mark == () and [p["metadata"]["name"] for p in held.create] == ["g-3-2"]
    assert "(worker-1 keeps it)" in cond(held, "NamesValid")["message"]


def test_a_name_another_owner_holds_is_reported_not_taken():
    plan = decide(facts(nodeset(), [W(1), W(2)], taken={"g-3-1": "NodeSet cpu"}))
    assert [p["metadata"]["name"] for p in plan.create] == ["g-3-2"]
    assert cond(plan, "NamesValid")["reason"] == "NameTaken"
    assert "g-3-1 (Node worker-1) is held by NodeSet cpu" in cond(plan, "NamesValid")["message"]


def test_a_node_without_an_address_gets_no_pod_and_keeps_the_one_it_has():
    ns = nodeset()
    plan = decide(facts(ns, [node("worker-1", None), W(2)]))
    assert [p["metadata"]["name"] for p in plan.create] == ["g-3-2"]
    assert cond(plan, "NamesValid")["reason"] == "NodeUnnamed"
    kept = decide(facts(nodeset(image="new"), [node("worker-1", None)], [pod_for(ns, "worker-1", "g-3-1")],
                        slurm(sn(1))))
    assert not (kept.mark or kept.drain or kept.delete or kept.create)


def test_slurm_unreadable_creates_but_never_drains_or_deletes():
    ns = nodeset(image="new")
    ns["status"].update(slurmIdle=7, slurmDown=1)
    pods = [pod_for(ns, "worker-1", "g-3-1", digest=OLD), pod_for(ns, "worker-9", "g-3-9", pending="scale-in: x")]
    plan = decide(Facts(ns, [W(1), W(2)], pods, slurm=None))
    assert [p["metadata"]["name"] for p in plan.create] == ["g-3-2"]
    assert not (plan.mark or plan.drain or plan.undrain or plan.delete)
    assert plan.status["slurmIdle"] == 7 and plan.status["slurmDown"] == 1
    assert cond(plan, "SlurmReachable")["status"] == "False"


# ---- status and slices -----------------------------------------------------------------------------------


def test_slurm_counts_count_each_flag():
    ns = nodeset()
    pods = [pod_for(ns, f"worker-{i}", f"g-3-{i}") for i in range(1, 7)]
    states = slurm(sn(1), sn(2, "MIXED+DRAIN", "x"), sn(3, "IDLE+DRAIN", "x"), sn(4, "DOWN+NOT_RESPONDING"),
                   sn(5, "IDLE+COMPLETING"), Node("someone-else", state="IDLE"))
    status = decide(facts(ns, [W(i) for i in range(1, 7)], pods, states)).status
    assert {k: status[k] for k in ("slurmIdle", "slurmAllocated", "slurmDrained", "slurmDown",
                                   "slurmNotResponding")} == {
        "slurmIdle": 1, "slurmAllocated": 2, "slurmDrained": 2, "slurmDown": 1, "slurmNotResponding": 1}


def test_slices_list_every_assigned_node_and_every_pod_until_it_is_gone():
    ns = nodeset()
    pods = [pod_for(ns, "worker-1", "g-3-1"), pod_for(ns, "worker-5", "g-3-5", pending="scale-in: x")]
    plan = decide(facts(ns, [W(1), W(2), W(5, pool="cpu")], pods, slurm(sn(1), sn(5, "IDLE+DRAIN"))))
    (written,) = plan.slices.write
    assert written == ("gpu-0", (Entry("g-3-1", "g-3-1", "worker-1", "10.0.3.1"),
                                 Entry("g-3-2", "g-3-2", "worker-2", "10.0.3.2"),
                                 Entry("g-3-5", "g-3-5", "worker-5", "10.0.3.5")))
