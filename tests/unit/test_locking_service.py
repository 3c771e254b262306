"""The hook service: pre-hook waits on its own request, times out with reasons, post-hook and reboot."""

from __future__ import annotations

import copy
import threading
import time

import pytest
from locking_fakes import Cache, Recorder, Store, config, context, k8s_node, pod, slurmd_pod

from sunk.hooks.protocol import HookError, PostHook, PreHook, Reboot
from sunk.locking import service as service_module
from sunk.locking.batcher import AnnotationBatcher
from sunk.locking.evictions import EvictionLog
from sunk.locking.jobreads import SharedJobReads
from sunk.locking.requests import parse_requests, request_key
from sunk.locking.service import LockService
from sunk.locking.waiter import ObjectWaiter
from sunk.locking.waitslots import WaitSlots
from sunk.model import names
from sunk.model.slurm import Job, Node, NodeUpdate
from sunk.slurm.errors import NotFound, SlurmUnavailable
from sunk.translate import drains
from sunk.translate.identity import is_placeholder, member_tag
from sunk.translate.objects import syncer_slim_node, without_write_records
from sunk.translate.podstores import syncer_slim_pod


class Slurm:
    """get_job (the hooks' fresh read: every job runs on node3 unless told otherwise), get_node and update_node
    (the post-hook's drain: node3 idle unless told otherwise)."""

    def __init__(self):
        self.jobs: dict[int, Job] = {}
        self.down = False
        self.reads: list[int] = []
        self.node = Node(name="node3", state=frozenset({"IDLE"}))
        self.updates: list[tuple[str, NodeUpdate]] = []

    def get_node(self, name: str) -> Node:
        if self.down:
            raise SlurmUnavailable("connection refused")
        return self.node

    read_node = get_node  # (the fresh single-node read: the same record here)

    def update_node(self, name: str, update: NodeUpdate) -> None:
        self.updates.append((name, update))
        self.node = Node(name=name, state=self.node.state | {"DRAIN"}, reason=update.reason or "")

    def get_job(self, job_id: int) -> Job:
        self.reads.append(job_id)
        if self.down:
            raise SlurmUnavailable("connection refused")
        if job_id in self.jobs:
            return self.jobs[job_id]
        if job_id >= 900:
            raise NotFound(f"job {job_id}")
        return Job(id=job_id, state="RUNNING", nodes="node3")


class World:
    def __init__(self, *pods, annotations=None, flags=(), ready=True):
        self.slurmd = Store(slurmd_pod(annotations=annotations), transform=without_write_records)
        self.nodes = Store(k8s_node(), transform=syncer_slim_node)
        self.pods = Store(*pods, transform=syncer_slim_pod)
        self.waiter = ObjectWaiter(self.slurmd.get)
        self.written: list[dict] = []
        self.nudged: list[str] = []
        self.evictions = EvictionLog()
        self.recorder = Recorder()
        self.slurm = Slurm()
        self.cache = Cache()
        self.config = config(*flags)
        self.service = LockService(
            ctx=context(self.slurmd, self.nodes, self.pods, self.cache, self.recorder, slurm=self.slurm),
            config=self.config,
            waiter=self.waiter, batcher=AnnotationBatcher(self._write), evictions=self.evictions,
            is_placeholder=is_placeholder, nudge=self.nudged.append,
            ready=lambda: ready, job_reads=SharedJobReads(self.slurm.get_job),
            wait_slots=WaitSlots(overall=self.config.max_waiters, per_node=self.config.max_waiters_per_node))

    def _write(self, obj, annotations):
        self.written.append(dict(annotations))
        self.update(lambda a: [a.pop(k, None) if v is None else a.__setitem__(k, v) for k, v in annotations.items()])

    def update(self, change) -> None:
        """Change the slurmd Pod as the apiserver would, and deliver the watch event."""
        new = copy.deepcopy(self.slurmd.get("slurm/node3"))
        change(new["metadata"]["annotations"])
        self.slurmd.put(new)
        self.waiter.on_update({}, new)

    def controller_sets(self, value: str, after: float = 0.05) -> threading.Thread:
        def run():
            time.sleep(after)
            self.update(lambda a: a.__setitem__(names.LOCK_KEY, value))

        t = threading.Thread(target=run)
        t.start()
        return t


def test_pre_hook_records_its_request_then_answers_when_the_lock_is_reached():
    w = World(annotations={names.LOCK_KEY: "false"})
    t = w.controller_sets("locked")
    body = w.service.pre_hook("node3", PreHook(job_id=5, timeout=5))
    t.join()
    assert body["state"] == "locked" and body["level"] == "normal" and body["job_id"] == 5
    assert list(w.written[0]) == [request_key(5)]
    assert parse_requests(w.written[0]).valid[0].strict is False
    assert w.nudged == ["node3"]


def test_a_lock_seen_without_our_own_request_is_not_trusted():
    w = World(annotations={names.LOCK_KEY: "locked"})
    w.service.batcher = AnnotationBatcher(lambda _obj, _ann: None)  # the write "happened", the watch lags
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=5, timeout=0.2))
    assert exc.value.status == 504


GANG_IDENTITY = "sunk-gang=job/ju ns=a size=2 members=aaaaaaaa,bbbbbbbb sched=s"


def test_strict_comes_from_the_flag_or_from_the_admin_comment_slurm_shows():
    """A placeholder (a Pod's or a gang's identity in its AdminComment) gets a strict lock without asking."""
    for request, admin_comment in ((PreHook(job_id=6, strict=True, timeout=5), ""),
                                   (PreHook(job_id=6, timeout=5), "sunk-pod=u ns=a name=b"),
                                   (PreHook(job_id=6, timeout=5), GANG_IDENTITY)):
        w = World(annotations={names.LOCK_KEY: "locked"})
        w.slurm.jobs[6] = Job(id=6, state="RUNNING", nodes="node3", admin_comment=admin_comment)
        t = w.controller_sets("locked_strict", after=0.2)
        body = w.service.pre_hook("node3", request)
        t.join()
        assert body["level"] == "strict" and body["state"] == "locked_strict" and body["waited_seconds"] >= 0.15
        assert parse_requests(w.written[0]).valid[0].strict is True


def test_a_placeholder_identity_in_extra_takes_no_strict_lock():
    """The job's user writes its Extra, only Slurm's super users its AdminComment: a tenant who copies a
    placeholder's identity into Extra must not make their own job evict every Pod from the node."""
    for extra in ("sunk-pod=u ns=a name=b", GANG_IDENTITY):
        w = World(annotations={names.LOCK_KEY: "locked"})
        w.slurm.jobs[6] = Job(id=6, state="RUNNING", nodes="node3", extra=extra)
        body = w.service.pre_hook("node3", PreHook(job_id=6, timeout=5))
        assert body["level"] == "normal" and body["state"] == "locked"
        assert parse_requests(w.written[0]).valid[0].strict is False

    w = World(annotations={names.LOCK_KEY: "locked"})  # the same identity in AdminComment: strict
    w.slurm.jobs[6] = Job(id=6, state="RUNNING", nodes="node3", extra="sunk-pod=u ns=a name=b",
                          admin_comment="sunk-pod=u ns=a name=b")
    t = w.controller_sets("locked_strict", after=0.2)
    body = w.service.pre_hook("node3", PreHook(job_id=6, timeout=5))
    t.join()
    assert body["level"] == "strict" and body["state"] == "locked_strict"
    assert parse_requests(w.written[0]).valid[0].strict is True


@pytest.mark.parametrize("job, down, status", [
    (None, False, 403),  # Slurm never had the job
    (Job(id=950, state="RUNNING", nodes="node[1-2]"), False, 403),  # another node's job
    (Job(id=950, state="PENDING"), False, 403),
    (Job(id=950, state="CANCELLED", nodes="node3"), False, 409),  # ended: the prolog may go on, nothing runs
    (None, True, 503),
], ids=["no-such-job", "other-nodes", "pending", "ended", "slurm-down"])
def test_a_pre_hook_for_a_job_that_does_not_hold_the_node_records_nothing(job, down, status):
    """A token holder must not be able to taint a Node and evict its Pods by naming any job id."""
    w = World(annotations={names.LOCK_KEY: "false"})
    if job is not None:
        w.slurm.jobs[950] = job
    w.slurm.down = down
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=950, timeout=5))
    assert exc.value.status == status and exc.value.reason
    assert w.written == [] and w.nudged == []


def test_a_job_the_cache_shows_on_the_node_needs_no_slurm_read_and_others_get_one():
    w = World(annotations={names.LOCK_KEY: "locked"})
    w.slurm.down = True  # every read fails: only the cache can answer
    w.cache.jobs[5] = Job(id=5, state="RUNNING", nodes="node[3-4]")
    assert w.service.pre_hook("node3", PreHook(job_id=5, timeout=5))["state"] == "locked"
    for cached in (None, Job(id=6, state="RUNNING", nodes="node4"), Job(id=6, state="COMPLETED", nodes="node3")):
        if cached is not None:
            w.cache.jobs[6] = cached
        with pytest.raises(HookError) as exc:  # not shown holding node3 by the cache: Slurm is asked
            w.service.pre_hook("node3", PreHook(job_id=6, timeout=5))
        assert exc.value.status == 503


def test_pre_hook_timeout_names_the_blocking_pods_and_withdraws_the_request():
    w = World(pod("guarded"), pod("leaving", terminating=True), pod("logger", tolerate=True),
              annotations={names.LOCK_KEY: "pending"})
    w.evictions.record("apps/guarded", "blocked", "Cannot evict pod as it would violate the pod's disruption budget.",
                       time.time())
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=9, strict=True, timeout=0.3))  # strict: terminating Pods block
    err = exc.value
    assert err.status == 504
    body = err.body()
    assert body["state"] == "pending"
    assert body["blocking_pods"] == [
        {"pod": "apps/guarded", "why": "eviction refused: Cannot evict pod as it would violate the pod's disruption "
                                       "budget."},
        {"pod": "apps/leaving", "why": "still terminating"}]
    assert body["reason"].startswith("strict lock timeout after 0.3s: 2 Pod(s) still on Node worker-3: apps/guarded")
    assert "not strict locked for job 9" in err.error
    assert '"' not in body["reason"] and "\\" not in body["reason"] and len(body["reason"]) <= 230
    assert w.written[-1] == {request_key(9): None}  # withdrawn
    assert request_key(9) not in w.slurmd.get("slurm/node3")["metadata"]["annotations"]


def test_pre_hook_timeout_gives_the_prolog_a_drain_reason_naming_every_pod_it_waited_for():
    """The prolog drains with it; the Syncer lifts that drain once these Pods have left the Node."""
    w = World(pod("guarded"), pod("leaving", terminating=True), annotations={names.LOCK_KEY: "pending"})
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=9, strict=True, timeout=0.3))
    reason = exc.value.body()["drain_reason"]
    assert reason == "k8s: sunk-lock: job 9: strict lock timeout after 0s: Pods on Node worker-3: apps/guarded " \
                     "apps/leaving"
    assert drains.parse(reason) == drains.LockTimeoutDrain(9, 0, "worker-3", ("apps/guarded", "apps/leaving"),
                                                           strict=True)

    w = World(annotations={names.LOCK_KEY: "false"})  # nothing blocks, yet no lock came (no controller)
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=9, timeout=0.3))
    assert drains.parse(exc.value.body()["drain_reason"]) == drains.LockTimeoutDrain(9, 0, state="false")


def test_pre_hook_timeout_with_more_pods_than_a_reason_names_counts_them_and_gives_their_last_binding():
    """CI run of 2026-11-28: five Pods stuck terminating did not fit, and the node stayed drained for good."""
    pods = [pod(f"a-rather-long-pod-name-number-{i}", bound_at=f"2026-11-28T09:00:{i:02d}Z") for i in range(12)]
    w = World(*pods, pod("logger", tolerate=True, bound_at="2026-11-28T10:00:00Z"),
              annotations={names.LOCK_KEY: "pending"})
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=9, timeout=0.3))
    body = exc.value.body()
    assert len(body["blocking_pods"]) == 12
    assert body["drain_reason"] == ("k8s: sunk-lock: job 9: lock timeout after 0s: 12 Pods bound to Node worker-3 "
                                    "by 2026-11-28T09:00:11Z, taint effect NoSchedule")  # (the logger tolerates)


def test_pre_hook_timeout_with_more_pods_than_a_reason_names_and_no_binding_time_gives_no_drain_reason():
    w = World(*(pod(f"a-rather-long-pod-name-number-{i}") for i in range(12)), annotations={names.LOCK_KEY: "pending"})
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=9, timeout=0.3))
    body = exc.value.body()
    assert len(body["blocking_pods"]) == 12 and "drain_reason" not in body  # the prolog's own reason: never lifted


def test_timeouts_are_capped_and_defaulted():
    w = World(flags=["--lock-default-timeout=0.2s", "--lock-max-timeout=0.3s"])
    started = time.monotonic()
    with pytest.raises(HookError):
        w.service.pre_hook("node3", PreHook(job_id=1))
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=2, timeout=3600))
    assert time.monotonic() - started < 1.5
    assert "within 0.3s" in exc.value.error


def test_unknown_node_is_404_and_not_ready_is_503():
    w = World()
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node9", PreHook(job_id=1, timeout=1))
    assert exc.value.status == 404 and "node9" in exc.value.error
    w = World(ready=False)
    with pytest.raises(HookError) as exc:
        w.service.pre_hook("node3", PreHook(job_id=1, timeout=1))
    assert exc.value.status == 503
    assert w.written == []


def test_post_hook_withdraws_the_request_and_nudges():
    w = World(annotations={names.LOCK_KEY: "locked", request_key(4): '{"strict":false,"at":1}'})
    body = w.service.post_hook("node3", PostHook(job_id=4))
    assert w.written == [{request_key(4): None}] and w.nudged == ["node3"]
    assert body["state"] == "locked"


def test_reboot_sets_the_configured_condition(monkeypatch):
    calls = []

    def fake(api, node, condition, reason, message):
        calls.append((node["metadata"]["name"], condition, reason, message))
        return {"type": condition, "status": "True", "reason": reason, "message": message}

    monkeypatch.setattr(service_module, "request_reboot", fake)
    w = World(flags=["--node-reboot-condition=Reboot", "--node-reboot-reason=r"])
    body = w.service.reboot("node3", Reboot(message="please"))
    assert calls == [("worker-3", "Reboot", "r", "please")]
    assert body["k8s_node"] == "worker-3" and body["condition"]["type"] == "Reboot"
    assert w.recorder.reasons() == ["RebootRequested"]
    w = World()
    w.service.reboot("node3", Reboot())
    assert calls[-1][1:3] == ("PhaseState", "production-powerreset")


def test_concurrent_pre_hooks_share_writes():
    w = World(annotations={names.LOCK_KEY: "locked"}, flags=("--lock-max-waiters-per-node=20",))  # (20 jobs, 1 node)
    gate = threading.Event()
    slow = w._write

    def write(obj, annotations):
        gate.wait(1)  # hold the first write, so the others queue behind it
        slow(obj, annotations)

    w.service.batcher = AnnotationBatcher(write)
    results: list = []
    threads = [threading.Thread(target=lambda i=i: results.append(w.service.pre_hook("node3", PreHook(job_id=100 + i,
                                                                                                       timeout=5))))
               for i in range(20)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join()
    assert len(results) == 20 and all(r["state"] == "locked" for r in results)
    assert len(w.written) <= 3
    assert len(parse_requests(w.slurmd.get("slurm/node3")["metadata"]["annotations"]).valid) == 20


# ---- the post-hook drains a node a placeholder's Pod outlived its job on --------------------------------------

POD_IDENTITY = "sunk-pod=uid-train ns=apps name=train sched=sunk"


def ending(admin_comment: str = POD_IDENTITY, job_id: int = 4, **fields) -> Job:
    return Job(id=job_id, state="CANCELLED", state_flags=frozenset({"COMPLETING"}), nodes="node3",
               admin_comment=admin_comment, **fields)


def outlived_world(*pods, job: Job | None = None, cached: bool = False) -> World:
    w = World(*pods, annotations={names.LOCK_KEY: "locked_strict"})
    if job is not None:
        (w.cache.jobs if cached else w.slurm.jobs)[job.id] = job
    return w


PLACEHOLDER_REASON = "k8s: sunk-placeholder: pod apps/train uid=uid-train outlived KillWait after job 4"


def test_a_placeholders_pod_still_on_the_node_drains_it_with_the_schedulers_reason():
    w = outlived_world(pod("train"), pod("web"), job=ending())
    body = w.service.post_hook("node3", PostHook(job_id=4))
    assert w.slurm.updates == [("node3", NodeUpdate(state="DRAIN", reason=PLACEHOLDER_REASON))]
    assert body["drained"] == PLACEHOLDER_REASON
    # lifted once gone:
    assert drains.parse(PLACEHOLDER_REASON) == drains.PlaceholderDrain("apps", "train", 4, "uid-train")
    assert [(e[0], e[1], e[2]) for e in w.recorder.events] == [("Warning", "train", "PodOutlivedSlurmJob")]
    assert w.written == [{request_key(4): None}] and w.nudged == ["node3"]  # the unlock goes on as before


def test_a_second_post_hook_for_the_same_job_writes_nothing_more():
    w = outlived_world(pod("train"), job=ending())
    w.service.post_hook("node3", PostHook(job_id=4))
    body = w.service.post_hook("node3", PostHook(job_id=4))
    assert len(w.slurm.updates) == 1 and len(w.recorder.events) == 1 and "drained" not in body


@pytest.mark.parametrize("job", [
    ending(admin_comment=""),  # no placeholder
    ending(admin_comment="", comment=POD_IDENTITY),  # its user's fields forge an identity: never read
    ending(admin_comment="", extra=POD_IDENTITY),
    ending(admin_comment="", name=POD_IDENTITY),
])
def test_a_job_that_is_no_placeholder_drains_nothing_whatever_its_user_wrote(job):
    w = outlived_world(pod("train"), job=job)
    body = w.service.post_hook("node3", PostHook(job_id=4))
    assert w.slurm.updates == [] and w.recorder.events == [] and "drained" not in body


@pytest.mark.parametrize("pods", [
    (),  # the Pod is gone
    (pod("train", phase="Succeeded"),), (pod("train", phase="Failed"),),  # finished: runs nothing there
    (pod("train", node="worker-9"),),  # on another Node
])
def test_a_placeholder_whose_pod_is_gone_finished_or_elsewhere_drains_nothing(pods):
    w = outlived_world(*pods, job=ending())
    w.service.post_hook("node3", PostHook(job_id=4))
    assert w.slurm.updates == [] and w.recorder.events == []


def test_a_node_an_operator_drained_is_left_alone():
    w = outlived_world(pod("train"), job=ending())
    w.slurm.node = Node(name="node3", state=frozenset({"MIXED", "DRAIN", "COMPLETING"}), reason="hardware: fan")
    body = w.service.post_hook("node3", PostHook(job_id=4))
    assert w.slurm.updates == [] and "drained" not in body and w.slurm.node.reason == "hardware: fan"


def test_a_gangs_member_still_on_this_node_drains_it_with_that_members_reason():


    identity = f"sunk-gang=job/j1 ns=apps size=2 members={member_tag('uid-w-0')},{member_tag('uid-w-1')}"
    w = outlived_world(pod("w-1"), pod("w-7"), job=ending(admin_comment=identity))
    w.service.post_hook("node3", PostHook(job_id=4))
    assert w.slurm.updates == [("node3", NodeUpdate(state="DRAIN",
                                                    reason="k8s: sunk-placeholder: pod apps/w-1 uid=uid-w-1 "
                                                           "outlived KillWait after job 4"))]


def test_a_job_slurm_does_not_show_ending_drains_nothing():
    """A node's token holder calling the post-hook while the placeholder runs: only Slurm's end may drain."""
    w = outlived_world(pod("train"), job=Job(id=4, state="RUNNING", nodes="node3", admin_comment=POD_IDENTITY))
    w.service.post_hook("node3", PostHook(job_id=4))
    assert w.slurm.updates == []


def test_the_cache_spares_slurm_a_read_for_a_job_that_is_no_placeholder_or_whose_pod_is_gone():
    for job, pods in ((ending(admin_comment=""), (pod("train"),)), (ending(), ())):
        w = outlived_world(*pods, job=job, cached=True)
        w.service.post_hook("node3", PostHook(job_id=4))
        assert w.slurm.reads == [] and w.slurm.updates == []
    w = outlived_world(pod("train"), job=ending(), cached=True)  # the cache shows it ending: no read either
    w.service.post_hook("node3", PostHook(job_id=4))
    assert w.slurm.reads == [] and len(w.slurm.updates) == 1


def test_a_cached_placeholder_not_yet_seen_ending_is_read_from_slurm_now():
    w = outlived_world(pod("train"), job=Job(id=4, state="RUNNING", nodes="node3", admin_comment=POD_IDENTITY),
                       cached=True)
    w.slurm.jobs[4] = ending()
    w.service.post_hook("node3", PostHook(job_id=4))
    assert w.slurm.reads == [4] and len(w.slurm.updates) == 1


def test_slurm_unreachable_is_a_503_so_the_epilog_drains_by_itself():
    w = outlived_world(pod("train"), job=ending())
    w.slurm.down = True
    with pytest.raises(HookError) as exc:
        w.service.post_hook("node3", PostHook(job_id=4))
    assert exc.value.status == 503
    assert w.written == [{request_key(4): None}]  # (the lock request is dropped all the same)


# ---- cold pre-hooks: one Slurm read per job, bounded waiters (issue 37) -------------------------------------------


class Nodes:
    """Slurm nodes node1..nodeN, each with its slurmd Pod on Node worker-N, already locked: a pre-hook answers as
    soon as its own request shows. ``slurm.gate`` holds every Slurm read until set."""

    def __init__(self, count: int, *flags: str):
        self.slurmd = Store(*(slurmd_pod(f"node{i}", f"worker-{i}", {names.LOCK_KEY: "locked"})
                              for i in range(1, count + 1)))
        self.waiter = ObjectWaiter(self.slurmd.get)
        self.slurm = Slurm()
        self.gate = threading.Event()
        self.gate.set()
        self.config = config(*flags)
        read = self.slurm.get_job

        def gated_read(job_id: int) -> Job:
            self.gate.wait(5)
            return read(job_id)

        self.service = LockService(
            ctx=context(self.slurmd, Store(), Store(), Cache(), Recorder(), slurm=self.slurm),
            config=self.config, waiter=self.waiter, batcher=AnnotationBatcher(self._write),
            evictions=EvictionLog(), is_placeholder=is_placeholder, nudge=lambda _node: None, ready=lambda: True,
            job_reads=SharedJobReads(gated_read),
            wait_slots=WaitSlots(overall=self.config.max_waiters, per_node=self.config.max_waiters_per_node))

    def _write(self, obj, annotations):
        new = copy.deepcopy(self.slurmd.get(f"slurm/{obj['metadata']['name']}"))
        for key, value in annotations.items():
            if value is None:
                new["metadata"]["annotations"].pop(key, None)
            else:
                new["metadata"]["annotations"][key] = value
        self.slurmd.put(new)
        self.waiter.on_update({}, new)


def until(condition, limit: float = 10.0) -> None:
    """Wait for ``condition`` (a state other threads reach), failing after ``limit`` seconds, not hanging."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition never reached"
        time.sleep(0.001)


def call_all(service: LockService, calls: list[tuple[str, int]],
             timeout: float = 5) -> tuple[list[threading.Thread], list]:
    """Each (node, job id) pre-hook on a thread of its own; what each returned or raised."""
    results: list = []
    lock = threading.Lock()

    def one(node: str, job_id: int) -> None:
        try:
            outcome = service.pre_hook(node, PreHook(job_id=job_id, timeout=timeout))
        except HookError as exc:
            outcome = exc
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=one, args=call) for call in calls]
    for t in threads:
        t.start()
    return threads, results


def test_the_prologs_of_a_64_node_job_cost_one_slurm_read():
    """Every node's prolog asks at once, the Slurm cache has not seen the job: one read of it, not 64."""
    world = Nodes(64)
    world.slurm.jobs[77] = Job(id=77, state="RUNNING", nodes="node[1-64]")
    world.gate.clear()  # the first read is held until every caller has arrived
    threads, results = call_all(world.service, [(f"node{i}", 77) for i in range(1, 65)])
    until(lambda: world.service.wait_slots.waiting() == 64)  # (each takes its slot before the read)
    world.gate.set()
    for t in threads:
        t.join()
    assert len(results) == 64 and all(isinstance(r, dict) and r["state"] == "locked" for r in results)
    assert world.slurm.reads == [77]


def test_a_flood_of_made_up_job_ids_is_refused_and_keeps_nothing():
    """A token holder naming job after job: each a 403 (the prolog's refusal), nothing recorded, no table grows."""
    world = Nodes(1)
    for job_id in range(900, 3900):
        with pytest.raises(HookError) as exc:
            world.service.pre_hook("node1", PreHook(job_id=job_id, timeout=5))
        assert exc.value.status == 403 and exc.value.reason == f"Slurm shows no job {job_id}"
    assert len(world.service.job_reads) == 0 and world.service.wait_slots.waiting() == 0
    assert not [k for k in world.slurmd.get("slurm/node1")["metadata"]["annotations"] if k != names.LOCK_KEY]


def test_a_requeued_job_is_not_refused_from_its_record_on_its_old_nodes():
    world = Nodes(2)
    world.slurm.jobs[5] = Job(id=5, state="RUNNING", nodes="node1")
    assert world.service.pre_hook("node1", PreHook(job_id=5, timeout=5))["state"] == "locked"
    world.slurm.jobs[5] = Job(id=5, state="RUNNING", nodes="node2")  # requeued, allocated anew
    assert world.service.pre_hook("node2", PreHook(job_id=5, timeout=5))["state"] == "locked"
    assert world.slurm.reads == [5, 5]


@pytest.mark.parametrize("flags, waiting, refused_on, room_on", [
    (("--lock-max-waiters-per-node=3",), ["node1"] * 3, "node1", "node2"),
    (("--lock-max-waiters=3",), ["node1", "node2", "node3"], "node4", None),
], ids=["per-node", "overall"])
def test_a_pre_hook_beyond_the_waiters_bound_gets_a_retryable_429_and_records_nothing(flags, waiting, refused_on,
                                                                                        room_on):
    world = Nodes(4, *flags)
    for pod_ in world.slurmd.objs.values():  # nothing locked: every caller waits
        pod_["metadata"]["annotations"][names.LOCK_KEY] = "false"
    calls = [(node, 10 + i) for i, node in enumerate(waiting)] + [(refused_on, 99)] + \
        ([(room_on, 98)] if room_on else [])
    for node, job_id in calls:
        world.slurm.jobs[job_id] = Job(id=job_id, state="RUNNING", nodes=node)
    threads, results = call_all(world.service, calls[:len(waiting)])
    until(lambda: world.service.wait_slots.waiting() == len(waiting))
    with pytest.raises(HookError) as exc:
        world.service.pre_hook(refused_on, PreHook(job_id=99, timeout=5))
    assert exc.value.status == 429 and exc.value.body()["retry_after"] == 1 and exc.value.reason == "hook API busy"
    assert request_key(99) not in world.slurmd.get(f"slurm/{refused_on}")["metadata"]["annotations"]
    more_results: list = []
    if room_on is not None:  # another node still has room under the per-node bound: its caller waits too
        more, more_results = call_all(world.service, [(room_on, 98)])
        until(lambda: world.service.wait_slots.waiting(room_on) == 1)
        threads += more
    for i in range(1, 5):  # the nodes lock: the waiters answer and give their slots back
        world._write(world.slurmd.get(f"slurm/node{i}"), {names.LOCK_KEY: "locked"})
    for t in threads:
        t.join()
    answers = results + (more_results if room_on is not None else [])
    assert len(answers) == len(threads) and all(isinstance(r, dict) for r in answers)
    assert world.service.wait_slots.waiting() == 0


def test_a_node_repeating_a_blocked_pre_hook_holds_one_wait_and_the_retry_still_locks():
    """The attack of the review: root on a node sends the pre-hook of a job whose lock cannot be reached, again
    and again. Each repeat takes the one wait over (the older call answers a retryable 429, its request left
    to the newer), so the node holds one slot whatever it sends and other nodes keep theirs; and a prolog's
    retry (its first connection broken, the server still waiting) is the one that gets the lock."""
    world = Nodes(2)
    for pod_ in world.slurmd.objs.values():
        pod_["metadata"]["annotations"][names.LOCK_KEY] = "false"
    world.slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1")
    world.slurm.jobs[8] = Job(id=8, state="RUNNING", nodes="node2")
    threads, results = call_all(world.service, [("node1", 7)], timeout=30)
    until(lambda: request_key(7) in world.slurmd.get("slurm/node1")["metadata"]["annotations"])
    for _ in range(20):  # each repeat supersedes the previous one, which answers at once
        more, more_results = call_all(world.service, [("node1", 7)], timeout=30)
        until(lambda superseded=results: len(superseded) == 1)
        threads += more
        results, previous = more_results, results
        assert isinstance(previous[0], HookError) and previous[0].status == 429
        assert world.service.wait_slots.waiting("node1") == 1 and world.service.wait_slots.waiting() == 1
    until(lambda: world.service.wait_slots.calls("node1", 7) == 1)
    assert request_key(7) in world.slurmd.get("slurm/node1")["metadata"]["annotations"]  # never withdrawn
    other, other_results = call_all(world.service, [("node2", 8)])  # another node is not refused
    world._write(world.slurmd.get("slurm/node2"), {names.LOCK_KEY: "locked"})
    world._write(world.slurmd.get("slurm/node1"), {names.LOCK_KEY: "locked"})
    for t in threads + other:
        t.join()
    assert isinstance(other_results[0], dict) and isinstance(results[0], dict) and results[0]["job_id"] == 7
    assert world.service.wait_slots.waiting() == 0


def test_a_node_naming_many_jobs_holds_at_most_its_bound_and_the_others_still_wait():
    """Root on two nodes sends pre-hooks for many jobs on them: each node holds at most 4 waits (the bound),
    the rest 429 at once, and a third node's pre-hook still waits and locks."""
    world = Nodes(3, "--lock-max-waiters-per-node=4")
    for pod_ in world.slurmd.objs.values():
        pod_["metadata"]["annotations"][names.LOCK_KEY] = "false"
    calls = [(node, 100 * i + j) for i, node in ((1, "node1"), (2, "node2")) for j in range(10)]
    for node, job_id in calls + [("node3", 5)]:
        world.slurm.jobs[job_id] = Job(id=job_id, state="RUNNING", nodes=node)
    threads, results = call_all(world.service, calls, timeout=30)
    until(lambda: len(results) == 12)  # 6 of each node's 10 refused at once
    assert all(isinstance(r, HookError) and r.status == 429 for r in results)
    assert world.service.wait_slots.waiting("node1") == world.service.wait_slots.waiting("node2") == 4
    good, good_results = call_all(world.service, [("node3", 5)])
    until(lambda: world.service.wait_slots.waiting("node3") == 1)
    for i in range(1, 4):
        world._write(world.slurmd.get(f"slurm/node{i}"), {names.LOCK_KEY: "locked"})
    for t in threads + good:
        t.join()
    assert isinstance(good_results[0], dict) and world.service.wait_slots.waiting() == 0


def test_a_pre_hook_blocked_reading_its_job_holds_a_slot():
    """Threads blocked in the job's read count against the bounds: a node cannot pile them up past its bound
    while Slurm is slow."""
    world = Nodes(1, "--lock-max-waiters-per-node=2")
    world.gate.clear()  # Slurm hangs
    for job_id in (1, 2, 3):
        world.slurm.jobs[job_id] = Job(id=job_id, state="RUNNING", nodes="node1")
    threads, results = call_all(world.service, [("node1", 1), ("node1", 2)])
    until(lambda: world.service.wait_slots.waiting("node1") == 2)
    with pytest.raises(HookError) as exc:
        world.service.pre_hook("node1", PreHook(job_id=3, timeout=5))
    assert exc.value.status == 429
    world.gate.set()
    for t in threads:
        t.join()
    assert all(isinstance(r, dict) for r in results) and world.service.wait_slots.waiting() == 0
