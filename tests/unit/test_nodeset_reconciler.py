"""The NodeSet reconciler against an apiserver and a Slurm in memory: what it writes, in which order,
when it writes nothing, and the flows of docs/nodeset.md end to end (label, unlabel, update, delete)."""

from __future__ import annotations

from typing import Any

import pytest
from nodeset_fakes import FakeApiServer, FakeSlurm, NodeCacheFake, Recorder, node, nodeset
from syncer_fakes import FakeInformer

from sunk.model import names
from sunk.model.slurm import Job, Node, NodeUpdate
from sunk.nodeset.assembly import INDEX_SLURM_NODE
from sunk.nodeset.reconciler import INDEX_NODESET, NodeSetReconciler, nodeset_key
from sunk.slurm.errors import SlurmError, SlurmUnavailable
from sunk.translate.nodeset.plan import WHY_DELETED
from sunk.translate.slurmd import slurm_node_name

KEY = "slurm/gpu"


def W(i: int, **labels: str) -> dict[str, Any]:
    return node(f"worker-{i}", f"10.0.3.{i}", **labels)


class World:
    """An apiserver, Slurm, its cache, the informers over them, and the reconciler."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, nodes: list[dict[str, Any]], slurm: list[Node],
                 *nodesets: dict[str, Any]):
        self.api = FakeApiServer().install(monkeypatch)
        for n in nodes:
            self.api.put("nodes", n)
        for ns in nodesets or (nodeset(),):
            self.api.put("nodesets", ns)
        self.slurm = FakeSlurm(*slurm)
        self.cache = NodeCacheFake(self.slurm)
        self.recorder = Recorder()
        self.informers = {
            "nodesets": FakeInformer(),
            "nodes": FakeInformer(),
            "pods": FakeInformer({INDEX_NODESET: nodeset_key, INDEX_SLURM_NODE: lambda p: [slurm_node_name(p)]}),
            "nodeslices": FakeInformer({INDEX_NODESET: nodeset_key}),
        }
        self.reconciler = NodeSetReconciler(
            api=None,  # type: ignore[arg-type]
            slurm=self.slurm,  # type: ignore[arg-type]
            nodesets=self.informers["nodesets"], nodes=self.informers["nodes"],  # type: ignore[arg-type]
            pods=self.informers["pods"], slices=self.informers["nodeslices"],  # type: ignore[arg-type]
            slurm_nodes=self.cache, recorder=self.recorder,  # type: ignore[arg-type]
        )

    def sync(self) -> None:
        for plural, informer in self.informers.items():
            informer.store = {informer.key(o): o for o in self.api.of(plural)
                              if plural != "pods" or names.LABEL_NODESET in (o["metadata"].get("labels") or {})}

    def reconcile(self, key: str = KEY) -> Any:
        self.sync()
        self.api.calls.clear()
        self.slurm.calls.clear()
        result = self.reconciler.reconcile(key)
        self.cache.refresh()
        return result

    def pods(self) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in self.api.of("pods")}

    def entries(self) -> set[str]:
        return {e["slurmNode"] for s in self.api.of("nodeslices") for e in s["spec"]["entries"]}

    def status(self) -> dict[str, Any]:
        found = self.api.one("nodesets", "gpu")
        return (found or {}).get("status") or {}

    def relabel(self, name: str, **labels: str) -> None:
        obj = self.api.one("nodes", name, None)
        assert obj is not None
        obj["metadata"]["labels"] = labels
        self.api.put("nodes", obj)


def test_a_new_nodeset_gets_its_finalizer_pods_slices_and_status_then_nothing(monkeypatch):
    w = World(monkeypatch, [W(1), W(2), W(3, pool="cpu")], [], nodeset(finalizer=False))
    assert w.reconcile() is None
    assert w.api.calls == [
        ("patch", "nodesets", "gpu", ""),  # the finalizer first
        ("create", "pods", "g-3-1"), ("create", "pods", "g-3-2"),
        ("create", "nodeslices", "gpu-0"),
        ("patch", "nodesets", "gpu", "status"),
    ]
    assert names.FINALIZER_NODESET in w.api.one("nodesets", "gpu")["metadata"]["finalizers"]
    assert w.entries() == {"g-3-1", "g-3-2"}
    assert w.status()["assigned"] == 2 and w.status()["replicas"] == 0
    assert w.recorder.reasons() == ["CreatedPod", "CreatedPod"]
    assert w.slurm.calls == []

    w.reconcile()  # the Pods are listed now: replicas 2
    assert w.api.calls == [("patch", "nodesets", "gpu", "status")]
    w.api.set_ready()
    w.reconcile()
    assert w.status()["ready"] == 2
    ready = {c["type"]: c for c in w.status()["conditions"]}["Ready"]
    assert ready["status"] == "True" and ready["lastTransitionTime"]
    w.reconcile()
    assert w.api.calls == [] and w.slurm.calls == []  # settled: not one write


def test_unlabel_drains_at_once_and_deletes_the_pod_only_after_the_job_ends(monkeypatch):
    w = World(monkeypatch, [W(1), W(2)], [Node("g-3-1"), Node("g-3-2", state="ALLOCATED")])
    w.reconcile()
    w.api.set_ready()
    w.reconcile()
    w.relabel("worker-2", pool="cpu")

    w.reconcile()  # marked and drained
    why = "scale-in: Node worker-2 no longer matches the NodeSet"
    assert w.pods()["g-3-2"]["metadata"]["annotations"][names.ANN_PENDING_DELETION] == why
    assert w.slurm.writes() == [("update", "g-3-2", NodeUpdate(
        state="DRAIN", reason=f"k8s: slurmd pod slurm/g-3-2 is pending deletion: {why}"))]
    assert w.cache.nudges == 1
    assert "MarkedPod" in w.recorder.reasons() and "DrainedSlurmNode" in w.recorder.reasons()

    w.reconcile()  # drained, still running its job: nothing
    assert ("delete", "pods", "g-3-2") not in w.api.calls and w.slurm.writes() == []
    assert w.entries() == {"g-3-1", "g-3-2"}

    w.slurm.nodes["g-3-2"] = Node("g-3-2", state="IDLE+DRAIN", reason=w.slurm.nodes["g-3-2"].reason)
    w.cache.refresh()
    w.reconcile()  # the job ended: one fresh read, then the delete with the uid as precondition
    assert ("get", "g-3-2", None) in w.slurm.calls
    assert ("delete", "pods", "g-3-2") in w.api.calls
    assert w.pods()["g-3-2"]["metadata"].get("deletionTimestamp")
    assert "DeletedPod" in w.recorder.reasons()
    w.api.finish()
    w.reconcile()
    assert set(w.pods()) == {"g-3-1"} and w.entries() == {"g-3-1"}  # the Syncer may delete g-3-2 now
    assert w.status()["assigned"] == 1 and w.status()["replicas"] == 1


def test_the_fresh_read_has_the_last_word(monkeypatch):
    ns = nodeset()
    w = World(monkeypatch, [W(1, pool="cpu"), W(2)], [Node("g-3-1", state="IDLE+DRAIN", reason="x")], ns)
    w.api.put("pods", _pod(ns, 1, pending="scale-in: x"))
    w.slurm.nodes["g-3-1"] = Node("g-3-1", state="ALLOCATED+DRAIN", reason="x")  # a job, unseen by the cache
    w.reconcile()
    assert ("get", "g-3-1", None) in w.slurm.calls and ("delete", "pods", "g-3-1") not in w.api.calls
    w.slurm.nodes["g-3-1"] = Node("g-3-1", state="IDLE+DRAIN", reason="x")
    w.cache.refresh()
    w.slurm.read_error = SlurmUnavailable("slurmrestd answered 200 with errors")
    w.reconcile()  # a failed read deletes nothing and fails nothing
    assert ("get", "g-3-1", None) in w.slurm.calls
    assert ("delete", "pods", "g-3-1") not in w.api.calls
    w.slurm.read_error = None
    w.reconcile()
    assert ("delete", "pods", "g-3-1") in w.api.calls


def test_a_pod_replaced_meanwhile_is_not_deleted(monkeypatch):
    ns = nodeset()
    w = World(monkeypatch, [W(1, pool="cpu"), W(2)], [], ns)
    w.api.put("pods", _pod(ns, 1, pending="scale-in: x"))
    w.sync()
    w.api.objects[("pods", "slurm", "g-3-1")]["metadata"]["uid"] = "a-successor"
    w.api.calls.clear()
    w.reconciler.reconcile(KEY)
    assert ("delete", "pods", "g-3-1") in w.api.calls
    assert not w.pods()["g-3-1"]["metadata"].get("deletionTimestamp")  # the precondition held it


def test_a_rolling_update_replaces_idle_nodes_first_and_kills_no_job(monkeypatch):
    w = World(monkeypatch, [W(i) for i in range(1, 5)],
              [Node("g-3-1", state="ALLOCATED"), Node("g-3-2", state="ALLOCATED"), Node("g-3-3"), Node("g-3-4")])
    w.reconcile()
    w.api.set_ready()
    w.reconcile()
    new = nodeset(image="sunk/slurmd:26.05")
    ns = w.api.one("nodesets", "gpu")
    ns["spec"] = new["spec"]
    w.api.put("nodesets", ns)

    replaced: list[str] = []
    for _ in range(40):
        w.reconcile()
        for _, _, name, *_ in [c for c in w.api.calls if c[0] == "delete"]:
            replaced.append(name)
            assert not w.slurm.nodes[name].running_jobs, f"{name} deleted while running a job"
        w.api.finish()
        w.api.set_ready()
        unavailable = sum(1 for p in w.pods().values() if p["metadata"]["annotations"].get(
            names.ANN_PENDING_DELETION)) + (4 - len(w.pods()))
        assert unavailable <= 1
        if replaced[:2] == ["g-3-3", "g-3-4"] and len(replaced) == 2:
            for i in (1, 2):  # the jobs end
                n = w.slurm.nodes[f"g-3-{i}"]
                w.slurm.nodes[n.name] = Node(n.name, state=(n.state - {"ALLOCATED"}) | {"IDLE"}, reason=n.reason)
        if w.status().get("updated") == 4 and not any(
                p["metadata"]["annotations"].get(names.ANN_PENDING_DELETION) for p in w.pods().values()):
            break
    assert replaced[:2] == ["g-3-3", "g-3-4"] and sorted(replaced) == ["g-3-1", "g-3-2", "g-3-3", "g-3-4"]
    assert all(p["spec"]["containers"][0]["image"] == "sunk/slurmd:26.05" for p in w.pods().values())
    w.reconcile()
    assert not any(n.drained for n in w.slurm.nodes.values())  # our drains lifted once each new Pod was Ready


def test_a_persons_drain_survives_an_update(monkeypatch):
    w = World(monkeypatch, [W(1)], [Node("g-3-1", state="IDLE+DRAIN", reason="bad DIMM")])
    w.reconcile()
    w.api.set_ready()
    ns = w.api.one("nodesets", "gpu")
    ns["spec"] = nodeset(image="new")["spec"]
    w.api.put("nodesets", ns)
    for _ in range(6):
        w.reconcile()
        w.api.finish()
        w.api.set_ready()
    assert w.pods()["g-3-1"]["spec"]["containers"][0]["image"] == "new"
    assert w.slurm.nodes["g-3-1"].reason == "bad DIMM"
    assert all(c[2] is None or c[2].state != "UNDRAIN" for c in w.slurm.calls)


def test_deleting_the_nodeset_waits_for_the_jobs_then_lets_it_go(monkeypatch):
    w = World(monkeypatch, [W(1), W(2)], [Node("g-3-1", state="ALLOCATED"), Node("g-3-2")])
    w.reconcile()
    w.api.set_ready()
    w.reconcile()
    w.api.delete(None, _Res("nodesets"), "gpu", "slurm")
    for _ in range(3):
        w.reconcile()
        w.api.finish()
    assert set(w.pods()) == {"g-3-1"}  # its job still runs
    assert w.pods()["g-3-1"]["metadata"]["annotations"][names.ANN_PENDING_DELETION] == WHY_DELETED
    assert w.api.one("nodesets", "gpu") is not None
    w.slurm.nodes["g-3-1"] = Node("g-3-1", state="IDLE+DRAIN", reason=w.slurm.nodes["g-3-1"].reason)
    for _ in range(3):
        w.reconcile()
        w.api.finish()
    assert w.pods() == {} and w.api.one("nodesets", "gpu") is None and w.api.of("nodeslices") == []
    assert w.reconcile() is None  # gone: nothing to do


def _deleted_with_cancel_jobs(w: World) -> None:
    nodeset_obj = w.api.one("nodesets", "gpu")
    assert nodeset_obj is not None
    nodeset_obj["metadata"]["annotations"] = {names.ANN_ON_DELETE: names.ON_DELETE_CANCEL_JOBS}
    w.api.put("nodesets", nodeset_obj)
    w.api.delete(None, _Res("nodesets"), "gpu", "slurm")


def _busy_world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = World(monkeypatch, [W(1), W(2)], [Node("g-3-1", state="ALLOCATED"), Node("g-3-2")])
    w.reconcile()
    w.api.set_ready()
    w.reconcile()
    return w


def test_deleting_with_cancel_jobs_cancels_the_jobs_on_its_nodes_from_one_list_then_lets_it_go(monkeypatch):
    """The uninstall's way (``on-delete: cancel-jobs``): the busy node is drained first, then the jobs running on it
    are cancelled, found in one job list (a job of two nodes whole; a job elsewhere, a pending one and an ended one
    untouched; one task of an array, by array and task, never the whole array), each an Event; once Slurm shows
    the node idle the Pod goes, then the finalizer."""
    w = _busy_world(monkeypatch)
    w.slurm.jobs = {7: Job(7, state="RUNNING", nodes="g-3-[1,9]"), 8: Job(8, state="RUNNING", nodes="other-1"),
                    9: Job(9, state="PENDING", nodes="g-3-1"), 10: Job(10, state="COMPLETED", nodes="g-3-1"),
                    20: Job(20, state="RUNNING", nodes="g-3-1", array_job_id=20, array_task_id=5),
                    21: Job(21, state="RUNNING", nodes="other-2", array_job_id=20, array_task_id=4)}
    _deleted_with_cancel_jobs(w)
    w.reconcile()  # marks both Pods, drains g-3-1; Slurm was busy: no cancel before the drain shows
    assert not [c for c in w.slurm.calls if c[0] == "cancel"]
    assert "DRAIN" in w.slurm.nodes["g-3-1"].state
    w.api.finish()
    nudged = w.cache.nudges
    w.reconcile()
    assert [c[:2] for c in w.slurm.calls if c[0] in ("cancel", "list_jobs", "get")][:2] == [("get", "g-3-1"),
                                                                                          ("list_jobs", "")]
    assert [c[1] for c in w.slurm.calls if c[0] == "cancel"] == ["7", "20_5"]
    assert {i: j.state for i, j in w.slurm.jobs.items()}[21] == "RUNNING"  # (the array's other task, elsewhere)
    assert [e for e in w.recorder.events if e[1] == "CancelledJob"] == [
        ("Normal", "CancelledJob", f"cancelled job {ident} on {where}: the NodeSet is being deleted "
                                   f"({names.ANN_ON_DELETE}: {names.ON_DELETE_CANCEL_JOBS})")
        for ident, where in (("7", "g-3-[1,9]"), ("20_5", "g-3-1"))]
    assert w.cache.nudges > nudged
    w.slurm.nodes["g-3-1"] = Node("g-3-1", state="IDLE+DRAIN", reason=w.slurm.nodes["g-3-1"].reason)
    for _ in range(3):
        w.reconcile()
        w.api.finish()
    assert w.pods() == {} and w.api.one("nodesets", "gpu") is None


def test_a_node_resumed_since_the_cache_saw_it_drained_has_no_job_cancelled(monkeypatch):
    """The fresh read before the cancel has the last word: a person resumed the node (a job that started since is
    no job the deletion meant to end), so nothing is listed or cancelled."""
    w = _busy_world(monkeypatch)
    w.slurm.jobs = {7: Job(7, state="RUNNING", nodes="g-3-1")}
    _deleted_with_cancel_jobs(w)
    w.reconcile()
    w.api.finish()
    w.cache.refresh()  # the cache saw the drain
    w.slurm.nodes["g-3-1"] = Node("g-3-1", state="ALLOCATED")  # scontrol update state=resume, since
    w.sync()
    w.reconciler.reconcile(KEY)
    assert not [c for c in w.slurm.calls if c[0] in ("cancel", "list_jobs")]
    assert w.slurm.jobs[7].state == "RUNNING"


def test_a_cancel_slurm_refuses_is_a_warning_and_the_reconcile_fails_for_a_retry(monkeypatch):
    w = _busy_world(monkeypatch)
    w.slurm.jobs = {7: Job(7, state="RUNNING", nodes="g-3-1"), 8: Job(8, state="RUNNING", nodes="g-3-1")}
    _deleted_with_cancel_jobs(w)
    w.reconcile()
    w.api.finish()
    w.slurm.cancel_error = SlurmError("Access/permission denied")
    with pytest.raises(SlurmError):
        w.reconcile()
    assert [e[1] for e in w.recorder.events if e[0] == "Warning"] == ["CancelFailed", "CancelFailed"]
    assert "could not cancel job 7 on g-3-1: Access/permission denied" in w.recorder.events[-2][2]
    assert "g-3-1" in w.pods()  # (nothing deleted while its job runs)


def test_a_name_someone_else_holds_is_an_event_not_a_failure(monkeypatch):
    w = World(monkeypatch, [W(1), W(2)], [])
    w.api.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "g-3-1", "namespace": "slurm"},
                       "spec": {}})  # hand-made: the informer (by label) does not see it
    w.reconcile()
    assert ("Warning", "NameTaken") in [(t, r) for t, r, _ in w.recorder.events]
    assert "g-3-2" in w.pods()


def test_a_stale_slurm_cache_is_retried_and_slurm_is_never_called(monkeypatch):
    ns = nodeset()
    w = World(monkeypatch, [W(1, pool="cpu"), W(2)], [Node("g-3-1")], ns)
    w.api.put("pods", _pod(ns, 1, pending="scale-in: x"))
    w.cache.fresh = False
    result = w.reconcile()
    assert result is not None and result.requeue_after == 2.0
    assert w.slurm.calls == [] and ("delete", "pods", "g-3-1") not in w.api.calls
    assert ("create", "pods", "g-3-2") in w.api.calls  # creating needs no Slurm


def test_a_drain_of_a_node_slurm_forgot_is_skipped(monkeypatch):
    ns = nodeset()
    w = World(monkeypatch, [W(1, pool="cpu"), W(2)], [Node("g-3-1")], ns)
    w.api.put("pods", _pod(ns, 1))
    w.sync()
    del w.slurm.nodes["g-3-1"]  # the cache still lists it
    w.reconcile()
    assert ("get", "g-3-1", None) in w.slurm.calls and w.slurm.writes() == []  # the fresh read found none
    assert "DrainedSlurmNode" not in w.recorder.reasons()
    assert w.cache.nudges  # (the cache was behind: it lists again)


def test_a_drain_planned_from_a_stale_cache_never_replaces_a_persons_drain(monkeypatch):
    """The cache shows the node idle; a person drained it a moment ago: the fresh read keeps their reason."""
    ns = nodeset()
    w = World(monkeypatch, [W(1, pool="cpu"), W(2)], [Node("g-3-1")], ns)
    w.api.put("pods", _pod(ns, 1))
    w.sync()
    w.slurm.nodes["g-3-1"] = Node("g-3-1", state=frozenset({"IDLE", "DRAIN"}), reason="bad fan")
    w.reconcile()
    assert ("get", "g-3-1", None) in w.slurm.calls  # the drain was planned, and checked
    assert w.slurm.writes() == [] and w.slurm.nodes["g-3-1"].reason == "bad fan"


def test_an_undrain_planned_from_a_stale_cache_never_lifts_a_persons_drain(monkeypatch):
    """The cache shows the operator's drain; a person replaced it with theirs: it is not lifted."""
    ns = nodeset()
    ours = "k8s: slurmd pod slurm/g-3-1 is pending deletion: scale-in: x"
    w = World(monkeypatch, [W(1)], [Node("g-3-1", state=frozenset({"IDLE", "DRAIN"}), reason=ours)], ns)
    w.api.put("pods", _pod(ns, 1))
    w.sync()
    w.slurm.nodes["g-3-1"] = Node("g-3-1", state=frozenset({"IDLE", "DRAIN"}), reason="bad fan")
    w.reconcile()
    assert ("get", "g-3-1", None) in w.slurm.calls  # the undrain was planned, and checked
    assert w.slurm.writes() == [] and w.slurm.nodes["g-3-1"].reason == "bad fan"
    w.slurm.nodes["g-3-1"] = Node("g-3-1", state=frozenset({"IDLE", "DRAIN"}), reason=ours)
    w.cache.refresh()
    w.reconcile()
    assert [(c[0], c[1]) for c in w.slurm.writes()] == [("update", "g-3-1")]
    assert w.slurm.nodes["g-3-1"].reason == ""  # its own drain: lifted


def test_an_invalid_spec_is_a_condition_and_an_event_and_nothing_else(monkeypatch):
    ns = nodeset(spec={"nodeSelector": {"pool": "gpu"}, "naming": {"prefix": "g"}, "template": {"spec": {}}})
    w = World(monkeypatch, [W(1)], [], ns)
    w.reconcile()
    assert w.api.calls == [("patch", "nodesets", "gpu", "status")]
    assert [(t, r) for t, r, _ in w.recorder.events] == [("Warning", "InvalidSpec")]
    spec_valid = {c["type"]: c for c in w.status()["conditions"]}["SpecValid"]
    assert spec_valid["status"] == "False" and "at least one container" in spec_valid["message"]
    w.reconcile()
    assert w.api.calls == [] and len(w.recorder.events) == 1


def test_an_unexpected_api_error_fails_the_reconcile_for_a_retry(monkeypatch):
    w = World(monkeypatch, [W(1)], [])
    w.api.fail[("create", "g-3-1")] = 500
    with pytest.raises(Exception, match="injected 500"):
        w.reconcile()


class _Res:
    def __init__(self, plural: str):
        self.plural = plural

    def path(self, *_: Any) -> str:
        return f"/{self.plural}"


def _pod(ns: dict[str, Any], i: int, **kw: Any) -> dict[str, Any]:
    from nodeset_fakes import pod_for

    return pod_for(ns, f"worker-{i}", f"g-3-{i}", **kw)



def test_a_node_that_labels_itself_into_a_partition_is_an_event_and_a_log_line_never_a_slurm_partition(
        monkeypatch, caplog):
    """Issue 35: a kubelet may set its own Node's labels (all but node-restriction.kubernetes.io/ ones)."""
    ns = nodeset(slurm={"partitions": ["gpu"], "partitionLabels": ["example.com/pool"],
                        "allowedPartitions": ["train"]})
    w = World(monkeypatch, [W(1, pool="gpu", **{"example.com/pool": "premium"})], [], ns)
    with caplog.at_level("WARNING", logger="sunk.nodeset.reconciler"):
        w.reconcile()
    (pod,) = w.pods().values()
    env = {e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c.get("env") or []}
    assert env["SUNK_SLURM_PARTITIONS"] == "gpu"
    assert [(t, r) for t, r, m in w.recorder.events if "premium" in m] == [("Warning", "BadNodeInput")]
    assert any("premium" in r.getMessage() and "allowedPartitions" in r.getMessage() for r in caplog.records)
    assert not [c for c in w.slurm.calls if "premium" in repr(c)]
