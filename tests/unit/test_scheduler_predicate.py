"""Which Pod updates wake the scheduler: those that can change its decision, no others."""

from __future__ import annotations

import copy

from scheduler.assembly import changed_for_scheduling
from sunk.model import names


def pod() -> dict:
    return {"metadata": {"uid": "u1", "namespace": "ns", "name": "p", "resourceVersion": "1",
                         "annotations": {"sunk.coreweave.com/account": "ml"}},
            "spec": {"schedulerName": "sunk", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def updated(change) -> tuple[dict, dict]:
    old = pod()
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "2"
    change(new)
    return old, new


def test_adds_and_deletes_always_count():
    assert changed_for_scheduling(None, pod())


def test_status_only_updates_do_not_count():
    def running(p):
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    assert not changed_for_scheduling(*updated(running))


def test_the_schedulers_own_patch_does_not_count():
    def patched(p):
        p["metadata"]["annotations"][names.ANN_JOB_ID] = "42"
        p["spec"]["tolerations"] = [{"key": names.LOCK_KEY, "operator": "Exists"}]
    assert not changed_for_scheduling(*updated(patched))


def test_what_the_decision_reads_counts():
    def bound(p):
        p["spec"]["nodeName"] = "worker-1"

    def deleting(p):
        p["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"

    def fixed_annotation(p):
        p["metadata"]["annotations"]["sunk.coreweave.com/account"] = "research"

    def new_grace(p):
        p["spec"]["terminationGracePeriodSeconds"] = 5

    for change in (bound, deleting, fixed_annotation, new_grace):
        assert changed_for_scheduling(*updated(change)), change.__name__


def test_a_node_turning_notready_or_going_wakes_the_pods_terminating_on_it():
    """No timer polls a stuck Pod: the Node's change, and then the reconcile's own deadline, wake it."""
    from informer_fakes import ListInformer

    from scheduler.assembly import attach_node_feed
    from scheduler.reconciler import PodIndex

    def pod(uid, node, deleting):
        meta = {"uid": uid, "namespace": "ns", "name": uid}
        if deleting:
            meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
        return {"metadata": meta, "spec": {"nodeName": node}}

    def node(name, status, beat="t1"):
        return {"metadata": {"name": name}, "status": {"conditions": [
            {"type": "Ready", "status": status, "lastHeartbeatTime": beat}]}}

    handlers = {}

    class Nodes:
        def add_handler(self, on_update=None, on_delete=None):
            handlers.update(update=on_update, delete=on_delete)

    pods = PodIndex(ListInformer([pod("a", "w1", True), pod("b", "w1", False), pod("c", "w2", True)]))
    woken: list[str] = []
    attach_node_feed(Nodes(), pods, woken.append)
    handlers["update"](node("w1", "True", "t1"), node("w1", "True", "t2"))  # a heartbeat
    assert woken == []
    handlers["update"](node("w1", "True"), node("w1", "Unknown"))
    assert woken == ["a"]
    handlers["update"](node("w1", "Unknown"), node("w1", "True"))
    handlers["delete"](node("w2", "Unknown"))
    assert woken == ["a", "a", "c"]


# -- the Pod feed: the predicate as the informer's handlers apply it, and which key each change wakes ------------

def gang_member(uid: str) -> dict:
    member = pod()
    member["metadata"].update(uid=uid, name=uid, labels={"scheduling.x-k8s.io/pod-group": "g"})
    return member


def fed():
    from informer_fakes import StoreInformer

    from scheduler.assembly import attach_pod_feed

    informer = StoreInformer()
    woken: list[str] = []
    attach_pod_feed(informer, woken.append)
    return informer, woken


def test_the_pod_feed_wakes_a_lone_pod_by_its_uid_on_add_change_and_delete_only():
    informer, woken = fed()
    informer.put(pod())
    assert woken == ["u1"]
    running = copy.deepcopy(pod())
    running["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    informer.put(running)  # the kubelet's status: nothing
    patched = copy.deepcopy(running)
    patched["metadata"]["annotations"][names.ANN_JOB_ID] = "42"
    informer.put(patched)  # the scheduler's own patch: nothing
    assert woken == ["u1"]
    relabelled = copy.deepcopy(patched)
    relabelled["metadata"]["labels"] = {"team": "a"}
    informer.put(relabelled)
    informer.remove(relabelled)
    assert woken == ["u1", "u1", "u1"]


def test_the_pod_feed_wakes_a_gang_members_gang_and_forgets_a_gone_members_own_key():
    informer, woken = fed()
    informer.put(gang_member("m1"))
    assert woken == ["gang:ns/podgroup/g"]
    finished = gang_member("m1")
    finished["status"] = {"phase": "Succeeded"}  # (of the kubelet's status, only a member's end counts)
    informer.put(finished)
    assert woken == ["gang:ns/podgroup/g", "gang:ns/podgroup/g"]
    informer.remove(finished)
    assert sorted(woken[2:]) == ["gang:ns/podgroup/g", "m1"]


def test_a_pod_that_leaves_its_gang_wakes_the_gang_and_itself():
    informer, woken = fed()
    informer.put(gang_member("m1"))
    alone = gang_member("m1")
    alone["metadata"]["labels"] = {}
    informer.put(alone)
    assert woken == ["gang:ns/podgroup/g", "gang:ns/podgroup/g", "m1"]  # (old and new owners, sorted)


# -- the job feed: every record into the index, a wake only for what the scheduler reads -------------------------

def job_fed():
    """The job feed over a stand-in jobs informer whose store (by job id) the index reads, written before its
    handlers are called, as the informer's is."""
    from scheduler.assembly import attach_job_feed
    from scheduler.jobindex import JobIndex
    from sunk.kube.store import KeyedStore

    handlers: dict = {}

    class Jobs:
        store: KeyedStore = KeyedStore()

        def add_handler(self, on_add=None, on_update=None, on_delete=None):
            handlers.update(add=on_add, update=on_update, delete=on_delete)

        def on_listed(self, handler):
            handlers["listed"] = handler

        def add_indexer(self, name, func):
            self.store.add_indexer(name, func)

        def get(self, key):
            return self.store.get(key)

        def by_index(self, name, value):
            return self.store.by_index(name, value)

        def index_values(self, name):
            return self.store.index_values(name)

    jobs = Jobs()
    jobs.store = KeyedStore()
    index = JobIndex(lambda job: (job.admin_comment, False) if job.admin_comment.startswith("uid-") else None,
                     jobs=jobs)  # type: ignore[arg-type]
    woken: list[str] = []
    attach_job_feed(jobs, index, woken.append)  # type: ignore[arg-type]

    def fire(kind: str, *job_records):
        if kind == "delete":
            jobs.store.delete(job_records[0].id)
        else:
            jobs.store.add(job_records[-1].id, job_records[-1])
        handlers[kind](*job_records)

    return fire, index, woken


def placeholder(**fields):
    from sunk.model.slurm import Job

    return Job(**{"id": 7, "state": "PENDING", "state_reason": "Priority", "partition": "all", "priority": 10,
                  "admin_comment": "uid-a", **fields})


def test_a_jobs_priority_or_time_limit_goes_into_the_index_and_wakes_nothing():
    fire, index, woken = job_fed()
    fire("add", placeholder())
    assert woken == ["uid-a"]
    aged = placeholder(priority=11, time_limit=60, submit_time=5)
    fire("update", placeholder(), aged)
    assert woken == ["uid-a"] and index.view("uid-a").jobs == (aged,)


def test_what_the_scheduler_reads_of_a_job_wakes_its_pod():
    from sunk.model.slurm import JobAllocation

    running = {"state": "RUNNING", "state_reason": "None", "nodes": "n1", "batch_host": "n1"}
    changes = {  # what: (before, after), each differing in that one thing
        "started": ({}, running), "reason": ({}, {"state_reason": "Resources"}),
        "partition": ({}, {"partition": "gpu"}),
        "prolog over": ({**running, "state_reason": "Prolog"}, running),
        "flags": ({**running, "state_flags": {"CONFIGURING"}}, running),
        "requeued elsewhere": (running, {**running, "nodes": "n2"}),
        "batch host": ({**running, "nodes": "n[1-2]"}, {**running, "nodes": "n[1-2]", "batch_host": "n2"}),
        "allocations": (running, {**running, "allocations": (JobAllocation("n1"),)}),
        "identity": ({}, {"admin_comment": "uid-b"}),
    }
    for what, (before, after) in changes.items():
        fire, _, woken = job_fed()
        fire("add", placeholder(**before))
        fire("update", placeholder(**before), placeholder(**after))
        assert len(woken) == 2, what


def test_a_jobs_end_wakes_its_pod():
    fire, _, woken = job_fed()
    fire("add", placeholder())
    fire("delete", placeholder())
    assert woken == ["uid-a", "uid-a"]
