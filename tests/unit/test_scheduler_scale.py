"""The scheduler's work per event does not grow with the cluster (issue 37 goal 4): counted, not timed.

- a Slurm node's Kubernetes Node is an index lookup, never a walk of the slurmd Pods;
- a slurmd Pod's change wakes only the Pods Slurm placed on its node, and only when it changes what
  the scheduler reads (a lock annotation wakes nothing);
- the sweeper's tick enqueues a bounded batch, and every key once per cycle.
"""

from __future__ import annotations

import copy

import pytest
from informer_fakes import StoreInformer

from scheduler.assembly import attach_slurmd_feed
from scheduler.jobindex import JobIndex
from scheduler.reconciler import SlurmdNodes
from scheduler.sweep import RollingSweep
from sunk.model import names
from sunk.model.slurm import Job

NODES = 5000


def slurmd_pod(slurm_node: str, k8s_node: str | None, *, name: str | None = None, created: str = "2030-01-01T00:00:00Z",
               deleting: bool = False, annotations: dict[str, str] | None = None) -> dict:
    meta: dict = {"name": name or slurm_node, "namespace": "slurm", "creationTimestamp": created,
                  "annotations": dict(annotations or {})}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-02T00:00:00Z"
    spec: dict = {"hostname": slurm_node}
    if k8s_node is not None:
        spec["nodeName"] = k8s_node
    return {"metadata": meta, "spec": spec}


def parse(job: Job):
    """The owner from the AdminComment (a short stand-in for an identity)."""
    return (job.admin_comment, False) if job.admin_comment.startswith(("uid-", "gang:")) else None


@pytest.fixture
def cluster():
    """NODES slurmd Pods (node-i on worker-i), and a job index with two running Pods' jobs on every Slurm node."""
    informer = StoreInformer(slurmd_pod(f"node-{i}", f"worker-{i}") for i in range(NODES))
    jobs = JobIndex(parse)
    for i in range(NODES):
        for j in range(2):
            job_id = 2 * i + j + 1
            jobs.upsert(Job(id=job_id, state="RUNNING", nodes=f"node-{i}", admin_comment=f"uid-{job_id}"), 1.0)
    return informer, jobs


# -- the Slurm node <-> Node index ---------------------------------------------------------------------------

def test_lookups_read_the_index_never_the_whole_store(cluster):
    informer, _ = cluster
    nodes = SlurmdNodes(informer)
    assert nodes.node_of("node-4321") == "worker-4321"
    assert nodes.mapping().get("node-17") == "worker-17" and nodes.mapping().get("node-none") is None
    assert nodes.slurm_node_on("worker-99") == "node-99" and nodes.slurm_node_on("worker-none") is None
    assert informer.lists == 0
    assert informer.store.index_keys(SlurmdNodes.SERVING, "node-4321") == ["slurm/node-4321"]  # one claimant read


def test_the_index_follows_the_slurmd_pods_as_they_come_move_and_go():
    informer = StoreInformer()
    nodes = SlurmdNodes(informer)
    assert nodes.node_of("g-1") is None
    informer.put(slurmd_pod("g-1", None, name="slurmd-a"))  # not bound yet: serves nothing
    assert nodes.node_of("g-1") is None and nodes.slurm_node_on("worker-1") is None
    informer.put(slurmd_pod("g-1", "worker-1", name="slurmd-a"))
    assert nodes.node_of("g-1") == "worker-1" and nodes.slurm_node_on("worker-1") == "g-1"
    # A replacement on another Node overlaps the old Pod: the newest serves, the old Node serves nothing.
    informer.put(slurmd_pod("g-1", "worker-2", name="slurmd-b", created="2030-01-03T00:00:00Z"))
    assert nodes.node_of("g-1") == "worker-2"
    assert nodes.slurm_node_on("worker-2") == "g-1" and nodes.slurm_node_on("worker-1") is None
    informer.put(slurmd_pod("g-1", "worker-2", name="slurmd-b", created="2030-01-03T00:00:00Z", deleting=True))
    assert nodes.node_of("g-1") == "worker-1"  # the replacement is being deleted: the old Pod serves again
    informer.remove(slurmd_pod("g-1", "worker-1", name="slurmd-a"))
    assert nodes.node_of("g-1") is None and nodes.slurm_node_on("worker-1") is None
    assert dict(nodes.mapping()) == {}


def test_the_index_agrees_with_the_whole_map():
    pods = [slurmd_pod("a", "w1"), slurmd_pod("b", "w2", name="x"), slurmd_pod("c", None),
            slurmd_pod("d", "w4", deleting=True), slurmd_pod("e", "w5", name="old"),
            slurmd_pod("e", "w6", name="new", created="2030-01-05T00:00:00Z")]
    nodes = SlurmdNodes(StoreInformer(pods))
    assert dict(nodes.mapping()) == {"a": "w1", "b": "w2", "e": "w6"}
    assert {name: nodes.node_of(name) for name in "abcde"} == {"a": "w1", "b": "w2", "c": None, "d": None, "e": "w6"}


# -- the job index by Slurm node --------------------------------------------------------------------------------

def test_owners_on_follows_where_slurm_placed_each_job():
    jobs = JobIndex(parse)
    jobs.upsert(Job(id=1, state="PENDING", admin_comment="uid-a"), 1.0)
    assert jobs.owners_on("n1") == set()
    jobs.upsert(Job(id=1, state="RUNNING", nodes="n1", admin_comment="uid-a"), 2.0)
    jobs.upsert(Job(id=2, state="RUNNING", nodes="n[1-3]", batch_host="n2", admin_comment="gang:ns/g"), 2.0)
    jobs.upsert(Job(id=3, state="RUNNING", nodes="n1", admin_comment="not ours"), 2.0)
    assert jobs.owners_on("n1") == {"uid-a", "gang:ns/g"} and jobs.owners_on("n3") == {"gang:ns/g"}
    jobs.upsert(Job(id=1, state="RUNNING", nodes="n4", admin_comment="uid-a"), 3.0)  # (a requeue placed it anew)
    assert jobs.owners_on("n1") == {"gang:ns/g"} and jobs.owners_on("n4") == {"uid-a"}
    jobs.remove(2, 4.0)
    assert jobs.owners_on("n1") == set() and jobs.owners_on("n3") == set()


# -- what a slurmd Pod's change wakes ---------------------------------------------------------------------------

def woken(informer: StoreInformer, jobs: JobIndex) -> list[str]:
    keys: list[str] = []
    attach_slurmd_feed(informer, jobs, keys.append)
    return keys


def test_a_lock_annotation_or_any_churn_wakes_nothing(cluster):
    informer, jobs = cluster
    keys = woken(informer, jobs)
    pod = copy.deepcopy(informer.get("slurm/node-7"))
    pod["metadata"]["annotations"][names.LOCK_KEY] = "locked"
    pod["metadata"]["labels"] = {"running": "true"}
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    informer.put(pod)
    assert keys == [] and informer.lists == 0


def test_a_slurmd_pod_appearing_wakes_exactly_the_pods_slurm_placed_on_its_node(cluster):
    """The case the walk of every Pod was for: a Pod whose node had no slurmd Pod waits for one."""
    informer, jobs = cluster
    jobs.upsert(Job(id=99_001, state="RUNNING", nodes="node-new", admin_comment="uid-waiting"), 1.0)
    keys = woken(informer, jobs)
    informer.put(slurmd_pod("node-new", None))  # made, not bound yet: serves nothing yet
    assert keys == []
    informer.put(slurmd_pod("node-new", "worker-new"))  # bound: now the Pod can bind
    assert keys == ["uid-waiting"] and informer.lists == 0
    keys.clear()
    jobs.upsert(Job(id=99_002, state="RUNNING", nodes="node-gone", admin_comment="uid-gone"), 1.0)
    informer.put(slurmd_pod("node-gone", None))
    informer.remove(slurmd_pod("node-gone", None))  # served nothing: its going changes nothing
    assert keys == []


@pytest.mark.parametrize("change", ["moves", "deleting", "gone"])
def test_a_slurmd_pod_that_moves_or_goes_wakes_the_pods_on_its_node(cluster, change):
    informer, jobs = cluster
    keys = woken(informer, jobs)
    if change == "moves":
        informer.put(slurmd_pod("node-5", "worker-elsewhere", created="2030-01-09T00:00:00Z"))
    elif change == "deleting":
        informer.put(slurmd_pod("node-5", "worker-5", deleting=True))
    else:
        informer.remove(slurmd_pod("node-5", "worker-5"))
    assert sorted(keys) == ["uid-11", "uid-12"]  # node-5's two jobs, 11 and 12; none of the other 9,998


def test_a_hostname_change_wakes_both_slurm_nodes(cluster):
    informer, jobs = cluster
    keys = woken(informer, jobs)
    informer.put(slurmd_pod("node-6", "worker-5", name="node-5"))  # Pod node-5 now serves Slurm node node-6
    assert sorted(keys) == ["uid-11", "uid-12", "uid-13", "uid-14"]


def test_a_gang_on_the_node_is_woken_once(cluster):
    informer, jobs = cluster
    jobs.upsert(Job(id=99_002, state="RUNNING", nodes="node-[1-2]", admin_comment="gang:ns/g"), 1.0)
    keys = woken(informer, jobs)
    informer.remove(slurmd_pod("node-1", "worker-1"))
    assert sorted(keys) == ["gang:ns/g", "uid-3", "uid-4"]


# -- the sweeper's pace ------------------------------------------------------------------------------------------

def test_each_tick_enqueues_at_most_a_batch_and_each_key_once_per_cycle():
    keys = [f"uid-{i}" for i in range(10_000)]
    snapshots: list[int] = []

    def snapshot() -> list[str]:
        snapshots.append(len(keys))
        return list(keys)

    enqueued: list[str] = []
    sweep = RollingSweep(snapshot, enqueued.append, batch=500)
    assert [sweep.tick() for _ in range(20)] == [500] * 20
    assert sorted(enqueued) == sorted(keys) and len(snapshots) == 1  # one walk for the whole cycle
    keys.append("uid-new")  # seen from the next cycle on
    enqueued.clear()
    assert [sweep.tick() for _ in range(21)] == [500] * 20 + [1]
    assert sorted(enqueued) == sorted(keys) and len(snapshots) == 2


def test_a_cycle_over_several_sources_visits_each_name_once_in_batches_that_span_them():
    pods, owners = [f"ns/p-{i}" for i in range(700)], {f"uid-{i}" for i in range(400)}
    listed: list[str] = []
    visited: list[tuple[str, str]] = []

    def source(name: str, names):
        def items():
            listed.append(name)
            return names
        return items, lambda item: visited.append((name, item))

    sweep = RollingSweep(*source("pods", pods), 500, source("jobs", owners))
    assert [sweep.tick() for _ in range(3)] == [500, 500, 100]  # (the second batch: 200 Pods, then 300 owners)
    assert visited == [("pods", p) for p in pods] + [("jobs", o) for o in list(owners)]
    assert listed == ["pods", "jobs"] and sweep.cycles == 1  # each source listed once a cycle
    assert sweep.tick() == 500 and listed == ["pods", "jobs"] * 2 and sweep.cycles == 2


def test_a_cycle_smaller_than_a_batch_is_one_tick_and_the_next_tick_starts_a_new_one():
    enqueued: list[str] = []
    sweep = RollingSweep(lambda: ["a", "b"], enqueued.append, batch=500)
    assert (sweep.tick(), sweep.tick(), enqueued) == (2, 2, ["a", "b", "a", "b"])
    assert RollingSweep(list, enqueued.append, batch=1).tick() == 0  # nothing to sweep
    assert RollingSweep(list, enqueued.append, 1, (lambda: ["c"], enqueued.append)).tick() == 1  # (one empty)


def test_a_batch_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        RollingSweep(list, print, batch=0)


# -- the Pods that wait, by index (what an outage's notice reads) ---------------------------------------------

def test_the_unbound_index_follows_the_pods_as_they_come_bind_are_deleted_and_go():
    from scheduler.reconciler import PodIndex

    def pod(name: str, node: str | None = None, deleting: bool = False) -> dict:
        meta: dict = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
        if deleting:
            meta["deletionTimestamp"] = "2030-01-02T00:00:00Z"
        return {"metadata": meta, "spec": {"nodeName": node} if node else {}}

    informer = StoreInformer([pod("a"), pod("b", "worker-1")])
    pods = PodIndex(informer)

    def unbound() -> set[str]:
        return {p["metadata"]["name"] for p in pods.unbound()}

    assert unbound() == {"a"}
    informer.put(pod("c"))
    assert unbound() == {"a", "c"}
    informer.put(pod("a", "worker-2"))  # bound
    informer.put(pod("c", deleting=True))  # being deleted
    assert unbound() == set()
    informer.put(pod("d"))
    informer.remove(pod("d"))
    assert unbound() == set() and informer.lists == 0
