"""A lock taint left by a slurmd Pod that is gone is lifted; a Node with a slurmd Pod of ours is left to the lock."""

from __future__ import annotations

import pytest
from locking_fakes import Api, Cache, Recorder, Store, context, install, k8s_node, slurmd_pod

from sunk.kube import client as kc
from sunk.locking.orphans import (
    MAX_HOLDS_PER_NODE,
    OrphanLockReconciler,
    former_node,
    holding_pod_gone,
    holds_to_check,
    unseen_holds,
)
from sunk.model import names

LOCK = {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}


def reconcile(monkeypatch, *slurmd_pods, taints=(LOCK,)):
    slurmd = Store(*slurmd_pods)
    nodes = Store(k8s_node(taints=list(taints)))
    recorder = Recorder()
    api = Api(slurmd, nodes)
    install(monkeypatch, api)
    result = OrphanLockReconciler(context(slurmd, nodes, Store(), Cache(), recorder)).reconcile(
        "worker-3 slurm/node3")
    return result, api, recorder


def test_a_locked_node_without_a_slurmd_pod_is_unlocked_with_an_event(monkeypatch):
    result, api, recorder = reconcile(monkeypatch)
    assert result is None
    ((call, node, lets_go),) = api.calls
    assert (call, node) == ("release_lock", "worker-3")
    assert lets_go("slurm/node3") and not lets_go("slurm/node4") and not lets_go("slurm-b/node3")  # (its own only)
    assert recorder.reasons() == ["Unlocked"]


def test_a_node_where_a_slurmd_pod_of_ours_still_runs_is_left_to_the_lock_controller(monkeypatch):
    _, api, recorder = reconcile(monkeypatch, slurmd_pod(node="node9", k8s_node="worker-3"))
    assert api.calls == []
    assert recorder.reasons() == []


def test_an_unlocked_node_and_an_unknown_node_are_left_alone(monkeypatch):
    _, api, _ = reconcile(monkeypatch, taints=())
    assert api.calls == []
    slurmd, nodes, recorder = Store(), Store(), Recorder()
    install(monkeypatch, Api(slurmd, nodes))
    assert OrphanLockReconciler(context(slurmd, nodes, Store(), Cache(), recorder)).reconcile(
        "worker-3 slurm/node3") is None


def test_only_a_bound_slurmd_pod_names_a_node():
    assert former_node(slurmd_pod(node="node3", k8s_node="worker-7")) == ["worker-7 slurm/node3"]
    unbound = slurmd_pod()
    unbound["spec"].pop("nodeName")
    assert former_node(unbound) == []


def test_a_slurmd_pod_bound_again_while_the_unlock_met_a_conflict_keeps_the_lock(monkeypatch):
    """The real ``remove_taint``: its 409 rereads the Node and asks again whether a slurmd Pod of ours runs
    there; one that came meanwhile keeps the taint (the lock controller decides for it), not written over."""
    slurmd, nodes, recorder = Store(), Store(k8s_node(taints=[LOCK])), Recorder()
    node = nodes.get("worker-3")
    node["metadata"].update(uid="u-3", resourceVersion="7")
    writes = []

    def patch(_api, _res, name, body, namespace=None, **_kw):
        writes.append(body)
        if len(writes) == 1:  # the first write meets a conflict, and meanwhile a slurmd Pod is bound there
            slurmd.put(slurmd_pod(node="node9", k8s_node="worker-3"))
            raise kc.ApiError(409, "Conflict", {"message": "the object has been modified"})
        raise AssertionError(f"written after the slurmd Pod came back: {body}")

    monkeypatch.setattr(kc, "patch", patch)
    reread = {**node, "metadata": {**node["metadata"], "resourceVersion": "8"}}
    monkeypatch.setattr(kc, "get", Api(slurmd, Store(reread)).get)  # (the Node read again; slurm/node3 is gone)
    assert OrphanLockReconciler(context(slurmd, nodes, Store(), Cache(), recorder)).reconcile(
        "worker-3 slurm/node3") is None
    assert len(writes) == 1 and writes[0]["spec"] == {"taints": None}
    assert recorder.reasons() == []


def test_a_taint_another_releases_slurmd_pod_holds_stays_and_only_ours_is_let_go(monkeypatch):
    """Two releases' slurmd Pods on one Node: ours gone, the other's lock holds the taint (the real
    ``release_lock``: one write, the holders without ours, the taint kept)."""
    slurmd, nodes, recorder = Store(), Store(k8s_node(taints=[LOCK])), Recorder()
    node = nodes.get("worker-3")
    node["metadata"].update(uid="u-3", resourceVersion="7",
                            annotations={names.ANN_LOCK_HOLDERS: "slurm-b/node3,slurm/node3"})
    writes = []
    monkeypatch.setattr(kc, "patch", lambda _api, _res, name, body, namespace=None, **_kw: writes.append(body) or {
        **node, "metadata": {**node["metadata"], **body["metadata"]}})
    monkeypatch.setattr(kc, "get", Api(slurmd, nodes).get)  # (slurm/node3 is gone)
    assert OrphanLockReconciler(context(slurmd, nodes, Store(), Cache(), recorder)).reconcile(
        "worker-3 slurm/node3") is None
    (body,) = writes
    assert body["metadata"]["annotations"] == {names.ANN_LOCK_HOLDERS: "slurm-b/node3"}
    assert "spec" not in body  # (the taint stays: slurm-b's lock holds it)
    assert recorder.reasons() == []


def test_a_deleted_pods_hold_goes_while_another_slurmd_pod_of_ours_on_the_node_keeps_its_own(monkeypatch):
    """Two Slurm nodes on one Node: one's Pod deleted while locked; its name goes, the other's lock keeps the
    taint (before, nothing let go of the deleted Pod's hold while the other ran there)."""
    slurmd, nodes, recorder = Store(slurmd_pod(node="node9", k8s_node="worker-3")), Store(k8s_node(taints=[LOCK])), \
        Recorder()
    node = nodes.get("worker-3")
    node["metadata"].update(uid="u-3", resourceVersion="7",
                            annotations={names.ANN_LOCK_HOLDERS: "slurm/node3,slurm/node9"})
    writes = []
    monkeypatch.setattr(kc, "patch", lambda _api, _res, name, body, namespace=None, **_kw: writes.append(body) or {
        **node, "metadata": {**node["metadata"], **body["metadata"]}})
    monkeypatch.setattr(kc, "get", Api(slurmd, nodes).get)  # (slurm/node3 is gone)
    OrphanLockReconciler(context(slurmd, nodes, Store(), Cache(), recorder)).reconcile("worker-3 slurm/node3")
    (body,) = writes
    assert body["metadata"]["annotations"] == {names.ANN_LOCK_HOLDERS: "slurm/node9"} and "spec" not in body


# ---- a locked Node seen (at start-up, or its holders changed): each hold whose Pod no cache shows there ----


def held_node(holders: str, taints=(LOCK,)) -> dict:
    node = k8s_node(taints=list(taints))
    node["metadata"]["annotations"] = {names.ANN_LOCK_HOLDERS: holders}
    return node


def test_a_locked_node_names_the_holds_no_cache_shows_bound_there():
    known = {("slurm/node3", "worker-3")}
    node = held_node("slurm/node3,slurm/node4,other/node3")
    assert unseen_holds(node, lambda holder, there: (holder, there) in known) == [
        "worker-3 other/node3", "worker-3 slurm/node4"]
    assert unseen_holds(held_node("slurm/node4", taints=()), lambda *_: False) == []  # (not locked: nothing)


def test_a_node_naming_more_holds_than_slurmd_pods_would_is_left_alone_and_said(caplog):
    """The Node's kubelet may write the annotation: one write must not become a read and a write per name."""
    node = held_node(",".join(f"x/p{i}" for i in range(5000)))
    assert unseen_holds(node, lambda *_: False) == []
    assert "names 5000 lock holders, more than 32" in caplog.text
    assert len(unseen_holds(held_node(",".join(f"x/p{i}" for i in range(MAX_HOLDS_PER_NODE))),
                            lambda *_: False)) == MAX_HOLDS_PER_NODE


def test_the_node_handler_looks_at_a_node_when_it_comes_and_when_its_holders_or_lock_change_only():
    keys: list[str] = []
    handle = holds_to_check(keys.append, lambda *_: False)
    before = held_node("gone/a,gone/b")
    handle(None, before)  # (every Node at start-up)
    assert keys == ["worker-3 gone/a", "worker-3 gone/b"]
    keys.clear()
    heartbeat = held_node("gone/a,gone/b")
    heartbeat["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    handle(before, heartbeat)
    assert keys == []
    handle(before, held_node("gone/b"))  # (gone/a let go: not looked at again)
    assert keys == ["worker-3 gone/b"]


def orphan(monkeypatch, holder: str, *, slurmd=(), everyone=(), apiserver=()):
    """One reconcile of ``worker-3 <holder>`` on a Node locked by ``holder`` and ``other/keep``."""
    slurmd_store, nodes, recorder = Store(*slurmd), Store(held_node(f"{holder},other/keep")), Recorder()
    api = Api(slurmd_store, nodes)
    api.pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in apiserver}
    install(monkeypatch, api)
    result = OrphanLockReconciler(context(slurmd_store, nodes, Store(*everyone), Cache(), recorder)).reconcile(
        f"worker-3 {holder}")
    return result, api


def test_a_hold_whose_pod_the_apiserver_does_not_have_goes_even_when_another_release_held_it(monkeypatch):
    """A Syncer restarted after its slurmd Pod went, or a release uninstalled without its hooks: the hold names
    a Pod that is nowhere; it goes, and only it (the other release's hold keeps the taint)."""
    result, api = orphan(monkeypatch, "gone-release/node3")
    assert result is None
    assert [c[0] for c in api.calls] == ["release_lock"]
    lets_go = api.calls[0][2]
    assert lets_go("gone-release/node3") and not lets_go("other/keep")


def test_a_hold_whose_pod_a_cache_shows_bound_there_is_kept_without_a_read(monkeypatch):
    there = slurmd_pod(node="node3", k8s_node="worker-3")
    there["metadata"]["namespace"] = "b"
    _, api = orphan(monkeypatch, "b/node3", everyone=[there])
    assert api.calls == []


def test_a_hold_whose_pod_only_the_apiserver_has_is_kept(monkeypatch):
    """The caches lag a Pod another release's Syncer has just locked for: the fresh read keeps it; a Pod of
    that name bound to another Node, or not bound at all, is another Pod (a lock is taken for a bound Pod, whose
    Node never changes), and does not."""
    fresh = slurmd_pod(node="node3", k8s_node="worker-3")
    fresh["metadata"]["namespace"] = "b"
    _, api = orphan(monkeypatch, "b/node3", apiserver=[fresh])
    assert [c[0] for c in api.calls] == ["get"]
    elsewhere = slurmd_pod(node="node3", k8s_node="worker-9")
    elsewhere["metadata"]["namespace"] = "b"
    _, api = orphan(monkeypatch, "b/node3", apiserver=[elsewhere])
    assert [c[0] for c in api.calls] == ["get", "release_lock"]
    unbound = slurmd_pod(node="node3")
    unbound["metadata"]["namespace"] = "b"
    unbound["spec"].pop("nodeName")
    _, api = orphan(monkeypatch, "b/node3", apiserver=[unbound])
    assert [c[0] for c in api.calls] == ["get", "release_lock"]


def test_a_hold_let_go_already_is_not_read_again(monkeypatch):
    """The name a release just dropped, enqueued before its write: the Node's holders no longer name it."""
    slurmd, nodes, recorder = Store(), Store(held_node("other/keep")), Recorder()
    api = Api(slurmd, nodes)
    install(monkeypatch, api)
    assert OrphanLockReconciler(context(slurmd, nodes, Store(), Cache(), recorder)).reconcile(
        "worker-3 gone/node3") is None
    assert api.calls == []


@pytest.mark.parametrize("holder", ["b/node3/exec", "../x", "B/x", "b/" + "x" * 254])
def test_a_holder_that_can_name_no_pod_goes_without_a_read(monkeypatch, holder):
    """Anyone who may edit the Node's annotations can write a holder: it never becomes the path of a read."""
    _, api = orphan(monkeypatch, holder)
    assert [c[0] for c in api.calls] == ["release_lock"]


def test_nothing_is_decided_before_every_pod_cache_has_synced(monkeypatch):
    slurmd, nodes, recorder = Store(), Store(held_node("gone/node3")), Recorder()
    everyone = Store()
    everyone.has_synced = lambda: False  # type: ignore[method-assign]
    api = Api(slurmd, nodes)
    install(monkeypatch, api)
    result = OrphanLockReconciler(context(slurmd, nodes, everyone, Cache(), recorder)).reconcile("worker-3 gone/node3")
    assert result is not None and result.requeue_after == 1.0 and api.calls == []


def test_any_pods_deletion_looks_again_at_a_hold_of_its_name_on_its_node_and_at_nothing_else():
    """The all-Pods cache may learn of a slurmd Pod's deletion after the slurmd Pods cache did, whose look then
    found the Pod still shown: this second look lets the hold go."""
    nodes = Store(held_node("slurm/node3"))
    keys: list[str] = []
    handle = holding_pod_gone(keys.append, nodes.get)
    handle(slurmd_pod(node="node3", k8s_node="worker-3"))
    assert keys == ["worker-3 slurm/node3"]
    keys.clear()
    handle(slurmd_pod(node="node4", k8s_node="worker-3"))  # (no hold of its name)
    handle(slurmd_pod(node="node3", k8s_node="worker-9"))  # (a Node the cache does not have)
    unbound = slurmd_pod(node="node3")
    unbound["spec"].pop("nodeName")
    handle(unbound)
    assert keys == []
