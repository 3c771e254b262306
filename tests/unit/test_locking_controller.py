"""The lock controller's reconcile against in-memory caches: what it writes, in which order, and when not."""

from __future__ import annotations

import pytest
from locking_fakes import Api, Cache, Recorder, Store, config, context, install, k8s_node, pod, slurmd_pod

from sunk.controller.runtime import Result
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.locking.controller import TOLERATION_SETTLE, LockReconciler
from sunk.locking.evictions import EvictionLog
from sunk.locking.jobs import NodeJob
from sunk.locking.requests import LockRequest
from sunk.model import names
from sunk.model.slurm import Node
from sunk.translate.lock import LOCK_TOLERATION
from sunk.translate.objects import syncer_slim_node, without_write_records
from sunk.translate.podstores import syncer_slim_pod

NOW = 1_000_000.0


class World:
    def __init__(self, monkeypatch, *pods, annotations=None, slurm_state="IDLE", jobs=None, taints=None,
                 synced=True, flags=()):
        self.slurmd = Store(slurmd_pod(annotations=annotations), transform=without_write_records)
        self.nodes = Store(k8s_node(taints=taints), transform=syncer_slim_node)
        self.pods = Store(self.slurmd.get("slurm/node3"), *pods, transform=syncer_slim_pod)
        self.cache = Cache({"node3": Node(name="node3", state=slurm_state)}, synced=synced)
        self.recorder = Recorder()
        self.api = Api(self.slurmd, self.nodes)
        install(monkeypatch, self.api)
        self.jobs: dict[int, NodeJob] = dict(jobs or {})
        self.evictions = EvictionLog()
        self.clock = NOW
        self.reconciler = LockReconciler(
            ctx=context(self.slurmd, self.nodes, self.pods, self.cache, self.recorder), config=config(*flags),
            jobs_on=lambda _n: self.jobs, evictions=self.evictions, clock=lambda: self.clock)

    def reconcile(self) -> Result | None:
        return self.reconciler.reconcile("node3")

    def lock(self) -> str | None:
        return self.slurmd.get("slurm/node3")["metadata"]["annotations"].get(names.LOCK_KEY)

    def state_writes(self) -> list[dict]:
        return [c[2] for c in self.api.calls if c[0] == "patch"]


def test_a_running_job_taints_first_then_evicts_then_writes_pending_on_the_version_it_saw(monkeypatch):
    w = World(monkeypatch, pod("web"), pod("logger", tolerate=True), pod("done", phase="Succeeded"),
              slurm_state="ALLOCATED", jobs={7: NodeJob(7, False)})
    result = w.reconcile()
    assert w.api.kinds() == ["hold_lock", "evict", "patch"]
    assert w.api.calls[0] == ("hold_lock", "worker-3", "slurm/node3", "NoSchedule")  # (held by its slurmd Pod)
    assert w.api.calls[1] == ("evict", "apps/web")  # not the tolerating Pod, not the finished one
    assert w.state_writes() == [{"resourceVersion": "100", "annotations": {names.LOCK_KEY: "pending"}}]
    assert result == Result(requeue_after=2.0)
    assert "LockPending" in w.recorder.reasons() and "Evicted" in w.recorder.reasons()


def test_once_the_pods_are_gone_the_lock_is_reached_and_nothing_is_evicted(monkeypatch):
    w = World(monkeypatch, pod("logger", tolerate=True), annotations={names.LOCK_KEY: "pending"},
              slurm_state="MIXED", jobs={7: NodeJob(7, False)})
    assert w.reconcile() is None
    assert w.api.kinds() == ["hold_lock", "patch"]
    assert w.lock() == "locked"
    assert ("Normal", "node3", "Locked") == w.recorder.events[-1][:3]
    w.api.calls.clear()
    w.reconcile()  # level-based: nothing left to do
    assert w.api.kinds() == ["hold_lock"]  # (a no-op in the real helper when the taint is there)


def test_terminating_pods_block_a_strict_lock_only_and_are_never_evicted_again(monkeypatch):
    w = World(monkeypatch, pod("web", terminating=True), slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)})
    assert w.reconcile() == Result(requeue_after=2.0)
    assert "evict" not in w.api.kinds()
    assert w.lock() == "pending"
    w = World(monkeypatch, pod("web", terminating=True), slurm_state="ALLOCATED", jobs={7: NodeJob(7, False)})
    assert w.reconcile() is None
    assert "evict" not in w.api.kinds()
    assert w.lock() == "locked"


def test_pods_placed_by_the_sunk_scheduler_are_left_alone_even_when_strict(monkeypatch):
    w = World(monkeypatch, pod("slurm-job-pod", sunk_job="12"), slurm_state="ALLOCATED",
              jobs={7: NodeJob(7, True), 12: NodeJob(12, True)})
    assert w.reconcile() is None
    assert "evict" not in w.api.kinds()
    assert w.lock() == "locked_strict"


def test_a_job_id_written_by_hand_does_not_keep_a_pod_on_a_node_slurm_needs(monkeypatch):
    """Anybody who may edit a Pod can write the annotation: it counts only for a job of this node."""
    request = LockRequest(8, True, NOW)
    w = World(monkeypatch, pod("squatter", sunk_job="12"), pod("inference", sunk_job="8"),
              annotations={request.key: request.value()}, slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)})
    w.reconcile()
    assert [c for c in w.api.calls if c[0] == "evict"] == [("evict", "apps/squatter")]  # 8: a live request names it


def test_a_job_id_on_a_pod_of_another_scheduler_keeps_it_nowhere(monkeypatch):
    """A tenant's Pod made with spec.nodeName (any scheduler but sunk's) carrying the id of the job the node
    runs, or a fresh binding, is evicted by a strict lock: only on a Pod of sunk's schedulers is the annotation
    sunk's word (the chart's admission policy keeps everybody else from writing it there)."""
    from datetime import UTC, datetime

    fresh = datetime.fromtimestamp(NOW - 5, UTC).isoformat().replace("+00:00", "Z")
    w = World(monkeypatch, pod("copycat", sunk_job="7", scheduler="default-scheduler"),
              pod("fresh", sunk_job="99", scheduler="default-scheduler", bound_at=fresh),
              pod("placed", sunk_job="7"), slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)})
    w.reconcile()
    assert sorted(c[1] for c in w.api.calls if c[0] == "evict") == ["apps/copycat", "apps/fresh"]


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_a_pod_believed_for_its_fresh_binding_is_judged_again_when_that_grace_ends(monkeypatch, effect):
    """A job-id annotation no job of the node names is believed for a Pod bound a moment ago (its job may
    not be cached yet); when that grace runs out nothing else may happen on the node, so the lock looks
    again then, and the squatter is evicted."""
    from datetime import UTC, datetime

    squatter = pod("squatter", sunk_job="12")
    bound = datetime.fromtimestamp(NOW - 20, UTC).isoformat().replace("+00:00", "Z")
    squatter["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}]
    w = World(monkeypatch, squatter, slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)},
              flags=(f"--lock-taint-effect={effect}",))
    if effect == "NoExecute":  # it is given the toleration while believed, and the taint waits for it to settle
        assert w.reconcile() == Result(requeue_after=TOLERATION_SETTLE)
        w.clock += TOLERATION_SETTLE
    assert w.reconcile() == Result(requeue_after=41.0 - (w.clock - NOW))  # 60 s grace - 20 s since binding + 1 s
    assert "evict" not in w.api.kinds()
    # Under NoExecute that toleration must not keep it once it is no longer believed.
    assert ("add_toleration" in w.api.kinds()) is (effect == "NoExecute")
    w.clock = NOW + 41
    w.reconcile()
    assert [c for c in w.api.calls if c[0] == "evict"] == [("evict", "apps/squatter")]


def test_a_refused_eviction_is_retried_only_after_the_retry_interval(monkeypatch):
    w = World(monkeypatch, pod("guarded"), slurm_state="ALLOCATED", jobs={7: NodeJob(7, False)},
              flags=["--lock-eviction-retry=5s"])
    w.api.evict_outcome = kp.EvictionOutcome.BLOCKED
    assert w.reconcile() == Result(requeue_after=5.0)
    assert w.api.kinds().count("evict") == 1
    assert w.recorder.events[0][:3] == ("Warning", "guarded", "EvictionBlocked")
    w.clock += 1  # another event wakes the node early
    w.reconcile()
    assert w.api.kinds().count("evict") == 1
    w.clock += 5
    w.reconcile()
    assert w.api.kinds().count("evict") == 2
    assert w.evictions.get("apps/guarded").outcome == "blocked"


def test_unlock_writes_false_before_removing_the_taint(monkeypatch):
    taint = {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}
    w = World(monkeypatch, pod("web"), annotations={names.LOCK_KEY: "locked"}, taints=[taint])
    assert w.reconcile() is None
    assert w.api.kinds() == ["patch", "release_lock"]
    assert w.state_writes() == [{"resourceVersion": "100", "annotations": {names.LOCK_KEY: "false"}}]
    (_, node, lets_go) = w.api.calls[1]
    assert node == "worker-3" and lets_go("slurm/node3")  # (its slurmd Pod's hold, of every effect)
    assert not lets_go("slurm-b/node3") and not lets_go("slurm/node4")  # (never another Pod's)
    assert "Unlocked" in w.recorder.reasons()
    assert "evict" not in w.api.kinds()


def test_a_conflicting_unlock_leaves_the_taint_and_reconciles_again(monkeypatch):
    taint = {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}
    w = World(monkeypatch, annotations={names.LOCK_KEY: "locked"}, taints=[taint])
    w.api.conflict_next_patch = True
    assert w.reconcile() == Result(requeue=True)
    assert w.api.kinds() == ["patch"]


def test_unknown_lock_text_is_rewritten(monkeypatch):
    w = World(monkeypatch, annotations={names.LOCK_KEY: "Locked!"})
    w.reconcile()
    assert w.lock() == "false"
    w = World(monkeypatch, annotations={names.LOCK_KEY: "bogus"}, slurm_state="ALLOCATED")
    w.reconcile()
    assert w.lock() == "locked"


def test_an_idle_unlocked_node_costs_no_write(monkeypatch):
    w = World(monkeypatch, pod("web"))
    assert w.reconcile() is None
    assert w.api.kinds() == ["release_lock"]  # (a no-op in the real helper without the taint)
    assert w.recorder.events == []


def test_a_fresh_lock_request_locks_before_slurm_shows_the_job(monkeypatch):
    req = LockRequest(42, False, NOW - 1)
    w = World(monkeypatch, annotations={req.key: req.value()})
    w.reconcile()
    assert w.lock() == "locked"


def test_a_request_slurm_never_shows_a_job_for_is_reconciled_again_when_it_expires(monkeypatch):
    """Its job ended unseen (no post-hook came): nothing else may wake an idle node in time."""
    req = LockRequest(42, True, NOW - 20)
    w = World(monkeypatch, annotations={req.key: req.value()})
    assert w.reconcile() == Result(requeue_after=41.0)  # 60 s grace - 20 s + 1 s
    assert w.lock() == "locked_strict"
    w.clock = NOW + 41
    w.api.calls.clear()
    assert w.reconcile() is None
    assert w.lock() == "false" and req.key not in w.slurmd.get("slurm/node3")["metadata"]["annotations"]
    # A request backed by a job Slurm shows waits for the job, not for a time.
    w = World(monkeypatch, annotations={req.key: req.value()}, slurm_state="ALLOCATED", jobs={42: NodeJob(42, True)})
    assert w.reconcile() is None


def test_old_requests_of_ended_jobs_and_malformed_ones_are_removed_and_the_node_unlocked(monkeypatch):
    old = LockRequest(42, True, NOW - 3600)
    w = World(monkeypatch, annotations={names.LOCK_KEY: "locked_strict", old.key: old.value(),
                                        "lock.sunk.coreweave.com/job-x": "junk"})
    w.reconcile()
    assert w.state_writes() == [{"resourceVersion": "100", "annotations": {
        names.LOCK_KEY: "false", old.key: None, "lock.sunk.coreweave.com/job-x": None}}]


def test_an_old_request_of_a_job_still_running_keeps_the_lock(monkeypatch):
    old = LockRequest(42, False, NOW - 3600)
    w = World(monkeypatch, annotations={names.LOCK_KEY: "locked", old.key: old.value()}, jobs={42: NodeJob(42, False)})
    w.reconcile()
    assert w.lock() == "locked" and old.key in w.slurmd.get("slurm/node3")["metadata"]["annotations"]


def test_strict_demand_comes_from_a_placeholder_job_or_a_strict_request(monkeypatch):
    w = World(monkeypatch, slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)})
    w.reconcile()
    assert w.lock() == "locked_strict"
    req = LockRequest(8, True, NOW)
    w = World(monkeypatch, annotations={req.key: req.value()})
    w.reconcile()
    assert w.lock() == "locked_strict"


def test_a_node_busy_with_no_known_job_keeps_the_level_reached(monkeypatch):
    """The placeholder job left the cache while its epilog still runs (COMPLETING): still strict."""
    for written, expected in (("locked_strict", "locked_strict"), ("locked", "locked"), ("false", "locked")):
        w = World(monkeypatch, annotations={names.LOCK_KEY: written}, slurm_state="IDLE+COMPLETING")
        w.reconcile()
        assert w.lock() == expected, written
        assert "Locked" not in w.recorder.reasons() or written == "false"


def test_a_sunk_pod_is_not_evicted_while_slurm_shows_the_node_busy_before_its_job(monkeypatch):
    """Seen in CI: the nodes list showed the node ALLOCATED before the jobs list showed the job, and the lock
    evicted the job's own Pod (bound long before the job started) as a squatter. Its claim is judged once the
    job is known: kept if the job is its own, evicted otherwise."""
    w = World(monkeypatch, pod("inference", sunk_job="8"), pod("web"), slurm_state="ALLOCATED")

    def evicted() -> set[str]:
        return {c[1] for c in w.api.calls if c[0] == "evict"}

    w.reconcile()
    assert evicted() == {"apps/web"}  # a Pod that claims no job is judged as ever
    w.jobs = {8: NodeJob(8, False)}
    w.reconcile()
    assert evicted() == {"apps/web"}
    w.jobs = {9: NodeJob(9, False)}
    w.reconcile()
    assert evicted() == {"apps/web", "apps/inference"}


def test_the_taint_effect_follows_the_flag(monkeypatch):
    w = World(monkeypatch, slurm_state="ALLOCATED", flags=["--lock-taint-effect=NoExecute"])
    w.reconcile()
    assert w.api.calls[0] == ("hold_lock", "worker-3", "slurm/node3", "NoExecute")


def test_a_noexecute_lock_first_makes_the_pods_placed_by_sunk_tolerate_it(monkeypatch):
    """Bound under a NoSchedule lock, they carry no toleration; the taint manager would evict them."""
    placed, tolerating = pod("inference", sunk_job="7"), pod("inference-2", sunk_job="8", tolerate=True)
    leaving = pod("inference-3", sunk_job="9", terminating=True)
    w = World(monkeypatch, placed, tolerating, leaving, slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)},
              flags=["--lock-taint-effect=NoExecute"])
    # Toleration first; the taint only once it has had time to reach Kubernetes' taint-eviction
    # controller, which evicts from its own informer (the Pod was deleted when the taint came at once).
    assert w.reconcile() == Result(requeue_after=TOLERATION_SETTLE)
    assert w.api.calls == [("add_toleration", "apps/inference", LOCK_TOLERATION)]
    w.clock += TOLERATION_SETTLE / 2  # another event wakes the node early: still no taint
    assert w.reconcile() == Result(requeue_after=TOLERATION_SETTLE / 2)
    assert w.api.kinds() == ["add_toleration"]
    w.clock += TOLERATION_SETTLE / 2
    w.reconcile()
    assert w.api.kinds()[:2] == ["add_toleration", "hold_lock"]
    assert w.api.kinds().count("add_toleration") == 1
    w.api.calls.clear()
    w.reconcile()  # nothing new to tolerate: the taint is not held back again
    assert w.api.kinds()[0] == "hold_lock"
    w = World(monkeypatch, placed, slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)})  # NoSchedule: no need
    w.reconcile()
    assert "add_toleration" not in w.api.kinds()


def test_a_toleration_written_before_a_failure_still_holds_the_taint_back(monkeypatch):
    """The second Pod's patch fails (and had landed): the retry finds nothing new to tolerate, and must
    still wait for the first Pod's toleration to settle (tainting at once is the race the wait exists for)."""
    first, second = pod("inference", sunk_job="7"), pod("inference-2", sunk_job="7")
    w = World(monkeypatch, first, second, slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)},
              flags=["--lock-taint-effect=NoExecute"])
    w.api.toleration_outcome["inference-2"] = "failed"
    with pytest.raises(kc.ApiError):
        w.reconcile()
    w.api.toleration_outcome["inference-2"] = "already"  # (the failed patch had landed after all)
    w.clock += 0.5
    assert w.reconcile() == Result(requeue_after=TOLERATION_SETTLE - 0.5)  # the first Pod's settle
    assert "hold_lock" not in w.api.kinds()
    w.clock += TOLERATION_SETTLE
    w.reconcile()
    assert "hold_lock" in w.api.kinds()


def test_a_toleration_the_cache_has_yet_to_show_does_not_hold_the_taint_back(monkeypatch):
    """The patch finds the toleration there already (this Syncer's cache is behind): nothing was written
    now, so nothing new has to reach the taint manager."""
    w = World(monkeypatch, pod("inference", sunk_job="7"), slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)},
              flags=["--lock-taint-effect=NoExecute"])
    w.api.toleration_outcome["inference"] = "already"
    w.reconcile()
    assert w.api.kinds()[:2] == ["add_toleration", "hold_lock"]


def test_each_toleration_given_restarts_the_settle(monkeypatch):
    placed = pod("inference", sunk_job="7")
    w = World(monkeypatch, placed, slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)},
              flags=["--lock-taint-effect=NoExecute"])
    assert w.reconcile() == Result(requeue_after=TOLERATION_SETTLE)
    w.clock += 1.5  # a second Pod of the job is bound, without the toleration, before the taint
    w.pods.put(pod("inference-2", sunk_job="7"))
    assert w.reconcile() == Result(requeue_after=TOLERATION_SETTLE)
    w.clock += 1.5
    assert w.reconcile() == Result(requeue_after=TOLERATION_SETTLE - 1.5)
    assert "hold_lock" not in w.api.kinds()


def test_a_clock_stepped_back_holds_the_taint_back_no_longer_than_the_settle(monkeypatch):
    w = World(monkeypatch, pod("inference", sunk_job="7"), slurm_state="ALLOCATED", jobs={7: NodeJob(7, True)},
              flags=["--lock-taint-effect=NoExecute"])
    w.reconcile()
    w.clock -= 3600
    assert w.reconcile() == Result(requeue_after=TOLERATION_SETTLE)


def test_a_toleration_of_another_effect_does_not_spare_a_pod(monkeypatch):
    """Kubernetes' matching: tolerating the lock's NoSchedule taint does not tolerate its NoExecute one."""
    spared = pod("logger", tolerate=True)
    partial = pod("web")
    partial["spec"]["tolerations"] = [{"key": names.LOCK_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    w = World(monkeypatch, spared, partial, slurm_state="ALLOCATED", jobs={7: NodeJob(7, False)},
              flags=["--lock-taint-effect=NoExecute"])
    w.reconcile()
    assert [c for c in w.api.calls if c[0] == "evict"] == [("evict", "apps/web")]
    w = World(monkeypatch, spared, partial, slurm_state="ALLOCATED", jobs={7: NodeJob(7, False)})
    w.reconcile()
    assert "evict" not in w.api.kinds()


def test_nothing_happens_before_the_slurm_cache_synced(monkeypatch):
    w = World(monkeypatch, pod("web"), slurm_state="ALLOCATED", synced=False)
    assert w.reconcile() == Result(requeue_after=1.0)
    assert w.api.calls == []


def test_unknown_nodes_are_ignored(monkeypatch):
    w = World(monkeypatch, slurm_state="ALLOCATED")
    assert w.reconciler.reconcile("node9") is None
    assert w.api.calls == []
