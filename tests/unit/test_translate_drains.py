"""sunk's own drains: what their reasons say, what is not one of them, and when each cause is gone."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import attrs
import pytest

from sunk.model import names
from sunk.model.slurm import Job, Node
from sunk.translate import dra, drains
from sunk.translate.drains import (
    DeviceFacts,
    DeviceMismatchDrain,
    GangPlaceholderDrain,
    HookUnreachableDrain,
    LockTimeoutDrain,
    PlaceholderDrain,
    StuckPodDrain,
    cause,
    held_by_another,
    parse,
)
from sunk.translate.identity import member_tag

POD_UID = "1f2e3d4c-0000-4000-8000-000000000001"
PLACEHOLDER = PlaceholderDrain("team-a", "train-0", 42, POD_UID)
OLD_PLACEHOLDER = PlaceholderDrain("team-a", "train-0", 42)  # an earlier version's reason: no UID
UNREACHABLE = HookUnreachableDrain(43, "HTTP 000, 44 attempts")
TIMEOUT = LockTimeoutDrain(44, 90, "worker-1", ("apps/guarded", "apps/slow.one"), strict=True)
TIMEOUT_NO_POD = LockTimeoutDrain(45, 30, state="pending")
TIMEOUT_MANY = LockTimeoutDrain(48, 45, "worker-1", strict=True, count=12, bound_by="2026-11-28T09:00:11Z",
                                effect="NoSchedule")
STUCK = StuckPodDrain("team-a", "train-0", "1f2e3d4c-0000-4000-8000-000000000001", "worker-1", 46)
GANG = GangPlaceholderDrain("team-a", "job/0f1e2d3c-0000-4000-8000-00000000000a", 47)
DEVICES = DeviceMismatchDrain("worker-1", "gpu index 3 names 0 devices of driver gpu.example.com "
                                           "(attribute gpu.example.com/index=3), not one")
ALL = (PLACEHOLDER, OLD_PLACEHOLDER, GANG, UNREACHABLE, TIMEOUT, TIMEOUT_NO_POD, TIMEOUT_MANY)


# ---- the reasons -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("drain", "text"), [
    (PLACEHOLDER, "k8s: sunk-placeholder: pod team-a/train-0 uid=1f2e3d4c-0000-4000-8000-000000000001 outlived "
                  "KillWait after job 42"),
    (OLD_PLACEHOLDER, "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42"),
    (UNREACHABLE, "k8s: sunk-lock: job 43: hook API unreachable (HTTP 000, 44 attempts)"),
    (HookUnreachableDrain(43), "k8s: sunk-lock: job 43: hook API unreachable"),
    (TIMEOUT, "k8s: sunk-lock: job 44: strict lock timeout after 90s: Pods on Node worker-1: apps/guarded "
              "apps/slow.one"),
    (TIMEOUT_NO_POD, "k8s: sunk-lock: job 45: lock timeout after 30s: lock still pending"),
    (TIMEOUT_MANY, "k8s: sunk-lock: job 48: strict lock timeout after 45s: 12 Pods bound to Node worker-1 by "
                   "2026-11-28T09:00:11Z, taint effect NoSchedule"),
    (attrs.evolve(TIMEOUT_MANY, effect="NoExecute", strict=False),
     "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node worker-1 by 2026-11-28T09:00:11Z, taint "
     "effect NoExecute"),
    (STUCK, "k8s: sunk-stuck: pod team-a/train-0 uid=1f2e3d4c-0000-4000-8000-000000000001 stuck terminating on "
            "Node worker-1 (NotReady or gone) after job 46"),
    (GANG, "k8s: sunk-placeholder: gang team-a/job/0f1e2d3c-0000-4000-8000-00000000000a outlived KillWait after "
           "job 47"),
    (GangPlaceholderDrain("team-a", "lws/llm/0", 8), "k8s: sunk-placeholder: gang team-a/lws/llm/0 outlived KillWait "
                                                     "after job 8"),
    (GangPlaceholderDrain("team-a", "jobset/js/1/Workers_2", 9),
     "k8s: sunk-placeholder: gang team-a/jobset/js/1/Workers_2 outlived KillWait after job 9"),
    (DEVICES, "k8s: sunk-dra: Node worker-1: gpu index 3 names 0 devices of driver gpu.example.com "
              "(attribute gpu.example.com/index=3), not one"),
])
def test_each_reason_reads_back_as_the_drain_it_states(drain, text):
    assert drain.reason() == text
    assert parse(text) == drain
    assert text.startswith(names.K8S_DRAIN_PREFIX)  # the spec's mark of a drain the Syncer may lift


@pytest.mark.parametrize("text", [
    "",
    "bad DIMM, ticket 42",
    "NHC: nvidia-smi failed verify-undrain",
    "k8s: slurmd pod slurm/node1 is not ready",  # the Syncer's own condition drain: lifted by its own rule
    # what sunk wrote before (no k8s:), and a person's note that mentions sunk: never sunk's drains now
    "sunk: pod team-a/train-0 outlived KillWait after job 42",
    "sunk-scheduler: pod team-a/train-0 outlived KillWait after job 42 ended",
    "sunk-lock: job 43: the Syncer hook API did not answer (HTTP 000, 44 attempts)",
    "sunk-lock: job 44: lock timeout after 90s: 1 Pod(s) still on Node worker-1: apps/guarded",
    "checking sunk-placeholder on this node, do not resume",
    "sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42",
    # almost the form: text around it, other spacing or case, a job id or Pod name that is not one
    "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42, resume after RMA",
    "ops: k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42",
    " k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42",
    "k8s:sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42",
    "k8s: sunk-placeholder: pod  team-a/train-0 outlived KillWait after job 42",
    "K8S: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42",
    "k8s: sunk-placeholder: pod Team-A/train-0 outlived KillWait after job 42",
    "k8s: sunk-placeholder: pod train-0 outlived KillWait after job 42",
    "k8s: sunk-placeholder: pod team-a/train-0/x outlived KillWait after job 42",
    "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 0",
    "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 042",
    "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job x",
    "k8s: sunk-lock: job 43: hook API unreachable (HTTP 000",
    "k8s: sunk-lock: job 43: hook API unreachable (a) (b)",
    "k8s: sunk-lock: job 43: hook API unreachable, resume by hand",
    "k8s: sunk-lock: job 44: lock timeout after 90s: Pods on Node worker-1: ",
    "k8s: sunk-lock: job 44: lock timeout after 90s: Pods on Node worker-1: apps/guarded ...",
    "k8s: sunk-lock: job 44: lock timeout after 90s: Pods on Node worker-1: apps/guarded (eviction refused)",
    "k8s: sunk-lock: job 44: lock timeout after 90s: lock still Pending",
    "k8s: sunk-lock: job 44: lock timeout after 90s",
    "k8s: sunk-lock: job 44: lock timeout after 1.5s: lock still pending",
    "k8s: sunk-lock: job 44: config: SUNK_SYNCER_URL is not set",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 0 Pods bound to Node worker-1 by 2026-11-28T09:00:11Z, taint "
    "effect NoSchedule",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node worker-1 by 2026-11-28T09:00:11, taint "
    "effect NoSchedule",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node worker-1 by 2026-11-28T09:00:11.5Z, taint "
    "effect NoSchedule",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node worker-1 by 2026-13-45T99:99:99Z, taint "
    "effect NoSchedule",  # the form of a time, but not one
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node worker-1 by yesterday, taint effect "
    "NoSchedule",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node Worker-1 by 2026-11-28T09:00:11Z, taint "
    "effect NoSchedule",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node worker-1 by 2026-11-28T09:00:11Z",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node worker-1 by 2026-11-28T09:00:11Z, taint "
    "effect PreferNoSchedule",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods bound to Node worker-1, taint effect NoSchedule",
    "k8s: sunk-lock: job 48: lock timeout after 45s: 12 Pods on Node worker-1: apps/guarded",
    # wt-faults' first form of the stuck-Pod reason (never released), and near misses of the grammar's
    "k8s: pod team-a/train-0 uid=u-1 stuck terminating on Node worker-1 (NotReady or gone); its Slurm job 46 was "
    "cancelled, drained until the Pod is gone and the Node Ready",
    "sunk-stuck: pod team-a/train-0 uid=u-1 stuck terminating on Node worker-1 (NotReady or gone) after job 46",
    "k8s: sunk-stuck: pod team-a/train-0 uid=u-1 stuck terminating on Node worker-1 (NotReady or gone) after job 46,"
    " ticket 7",
    "k8s: sunk-stuck: pod team-a/train-0 uid= stuck terminating on Node worker-1 (NotReady or gone) after job 46",
    "k8s: sunk-stuck: pod team-a/train-0 uid=U-1 stuck terminating on Node worker-1 (NotReady or gone) after job 46",
    "k8s: sunk-stuck: pod team-a/train-0 uid=u-1 stuck terminating on Node Worker-1 (NotReady or gone) after job 46",
    "k8s: sunk-stuck: pod team-a/train-0 uid=u-1 stuck terminating on Node worker-1 after job 46",
    "k8s: sunk-stuck: pod team-a/train-0 uid=u-1 stuck terminating on Node worker-1 (NotReady or gone) after job 0",
    # the gang's form: a namespace and a key of at least two words, nothing around it
    "sunk-placeholder: gang Job team-a/train outlived KillWait after job 42 (scheduler unreachable)",  # (wt-gangs')
    "k8s: sunk-placeholder: gang team-a/job outlived KillWait after job 42",
    "k8s: sunk-placeholder: gang team-a/job/ outlived KillWait after job 42",
    "k8s: sunk-placeholder: gang team-a/job//u outlived KillWait after job 42",
    "k8s: sunk-placeholder: gang Team-A/job/u outlived KillWait after job 42",
    "k8s: sunk-placeholder: gang team-a/job/u v outlived KillWait after job 42",
    "k8s: sunk-placeholder: gang team-a/job/u outlived KillWait after job 42 (scheduler unreachable)",
    "k8s: sunk-placeholder: gang gang:team-a/job/u outlived KillWait after job 42",
    # the device mismatch's: a Node's name, then something said
    "k8s: sunk-dra: Node worker-1: ",
    "k8s: sunk-dra: Node Worker-1: index 3",
    "k8s: sunk-dra: worker-1: index 3",
    "sunk-dra: Node worker-1: index 3",
])
def test_anything_else_is_not_a_sunk_drain(text):
    assert parse(text) is None


def blocker(key: str, bound_at: str | None = "2026-11-28T09:00:00Z", node: str = "worker-1", *,
            created: str | None = None, tolerations: tuple[dict, ...] = (), terminating: bool = False) -> dict:
    """A Pod bound to ``node`` at ``bound_at`` (its PodScheduled condition), that no lock tolerates by default."""
    ns, name = key.split("/")
    meta: dict = {"name": name, "namespace": ns, **({"creationTimestamp": created} if created else {})}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-28T09:05:00Z"
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound_at}] if bound_at else []
    return {"metadata": meta, "spec": {"nodeName": node, "tolerations": list(tolerations)},
            "status": {"phase": "Running", "conditions": conditions}}


def test_lock_timeout_reason_names_every_pod_it_can():
    reason = drains.lock_timeout_reason(7, 8.4, "worker-4", [blocker("ns/a"), blocker("ns/b")], "pending", False,
                                        "NoSchedule")
    assert reason == "k8s: sunk-lock: job 7: lock timeout after 8s: Pods on Node worker-4: ns/a ns/b"
    assert parse(reason) == LockTimeoutDrain(7, 8, "worker-4", ("ns/a", "ns/b"))
    assert drains.lock_timeout_reason(7, 0.3, "worker-4", [], "pending", True, "NoSchedule") == (
        "k8s: sunk-lock: job 7: strict lock timeout after 0s: lock still pending")
    many = [blocker(f"namespace-{i}/pod-with-a-long-name-{i}") for i in range(4)]
    named = parse(drains.lock_timeout_reason(7, 90, "worker-4", many, "pending", False, "NoSchedule") or "")
    assert named == LockTimeoutDrain(7, 90, "worker-4", tuple(f"namespace-{i}/pod-with-a-long-name-{i}"
                                                               for i in range(4)))
    assert drains.lock_timeout_reason(7, 90, "", [], "not a state", False, "NoSchedule") is None


def test_lock_timeout_reason_counts_the_pods_it_cannot_name_and_gives_their_latest_binding():
    """The CI run of 2026-11-28: five Pods stuck terminating (a kubelet gone) did not fit in a reason, the
    prolog drained with its own, and the node stayed drained after they were gone."""
    many = [blocker(f"kube-test-82c73c26/kubelet-gone-by-{i}", f"2026-11-28T09:0{i}:00Z") for i in range(5)]
    many.append(blocker("ns/created-only", None, created="2026-11-28T09:07:30Z"))  # (no PodScheduled yet)
    many.append(blocker("ns/fraction", "2026-11-28T09:07:30.250Z"))  # a time with a fraction: the next second
    reason = drains.lock_timeout_reason(12138, 45, "worker-4", many, "pending", True, "NoExecute")
    assert reason == ("k8s: sunk-lock: job 12138: strict lock timeout after 45s: 7 Pods bound to Node worker-4 by "
                      "2026-11-28T09:07:31Z, taint effect NoExecute")
    assert parse(reason) == LockTimeoutDrain(12138, 45, "worker-4", strict=True, count=7,
                                             bound_by="2026-11-28T09:07:31Z", effect="NoExecute")
    assert len(reason) <= drains.MAX_REASON
    upper = [blocker("ns/Upper")]  # not a Kubernetes name: it cannot be named, nor is it a real Pod
    counted = parse(drains.lock_timeout_reason(7, 90, "worker-4", upper, "pending", False, "NoSchedule") or "")
    assert isinstance(counted, LockTimeoutDrain) and counted.count == 1
    unknown = [*many, blocker("ns/when-unknown", None)]  # no binding, no creation time: its cause cannot be stated
    assert drains.lock_timeout_reason(7, 90, "worker-4", unknown, "pending", False, "NoSchedule") is None


# ---- when the cause is gone ------------------------------------------------------------------------------


def slurmd_pod(lock: str | None = None, node: str | None = "worker-1") -> dict:
    annotations = {names.LOCK_KEY: lock} if lock is not None else {}
    return {"metadata": {"name": "node1", "namespace": "slurm", "annotations": annotations},
            "spec": {"nodeName": node} if node else {}}


def k8s_node(tainted: bool = False) -> dict:
    taints = [{"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}] if tainted else []
    return {"metadata": {"name": "worker-1"}, "spec": {"taints": taints}}


SCHEDULER = "sunk-scheduler"  # the schedulerName of sunk's scheduler, as the Syncer is told it


def sunk_pod(name: str, job_id: int | str | None, slurm_node: str = "node1",
             scheduler: str | None = SCHEDULER) -> dict:
    """A Pod sunk's scheduler bound to worker-1 for ``job_id`` on ``slurm_node``."""
    annotations = {names.ANN_SLURM_NODE: slurm_node, **({names.ANN_JOB_ID: str(job_id)} if job_id else {})}
    spec = {"nodeName": "worker-1", **({"schedulerName": scheduler} if scheduler is not None else {})}
    return {"metadata": {"name": name, "namespace": "team-a", "annotations": annotations},
            "spec": spec}


@attrs.frozen
class Facts:
    """The CauseFacts a test states outright."""

    pod: dict | None = attrs.Factory(slurmd_pod)
    k8s_node: dict | None = attrs.Factory(k8s_node)
    pods: Mapping[str, str] = attrs.Factory(dict)  # "ns/name" -> the Node it is bound to ("" none)
    jobs: tuple[Job, ...] | None = ()
    on_node: tuple[dict, ...] = ()  # the Pods bound to worker-1
    uids: Mapping[str, str] = attrs.Factory(dict)  # "ns/name" -> the Pod's UID
    nodes: Mapping[str, dict] = attrs.Factory(dict)  # Node name -> the Node
    scheduler_names: frozenset[str] = frozenset({SCHEDULER, "sunk-extender"})
    devices: DeviceFacts | None = None  # worker-1's DRA devices (None: not watched)

    def pod_uid(self, key: str) -> str | None:
        return self.uids.get(key)

    def node_named(self, name: str) -> dict | None:
        return self.nodes.get(name)

    def pod_node(self, key: str) -> str | None:
        return self.pods.get(key)

    def jobs_holding(self) -> tuple[Job, ...] | None:
        return self.jobs

    def pods_on_node(self) -> tuple[dict, ...]:
        return self.on_node

    def devices_on(self, k8s_node: str) -> DeviceFacts | None:
        return self.devices if k8s_node == "worker-1" else None


IDLE = Node("node1", state="IDLE+DRAIN")
BUSY = Node("node1", state="MIXED+DRAIN")


def placeholder_job(job_id: int, ns: str = "team-a", name: str = "train-0", uid: str | None = None) -> Job:
    """A placeholder job: its identity in AdminComment, which only Slurm's super users write. The Pod
    team-a/train-0 is the drained one (POD_UID) unless ``uid`` says otherwise."""
    uid = uid or (POD_UID if (ns, name) == ("team-a", "train-0") else f"uid-{job_id}")
    return Job(id=job_id, state="RUNNING", nodes="node1", admin_comment=f"sunk-pod={uid} ns={ns} name={name}")


def finished_pod(name: str, phase: str) -> dict:
    """A Pod of team-a bound to worker-1, in ``phase``."""
    return {"metadata": {"namespace": "team-a", "name": name}, "spec": {"nodeName": "worker-1"},
            "status": {"phase": phase}}


def forged(job: Job) -> Job:
    """The same identity where the job's own user can write it (Extra), AdminComment left empty: no placeholder."""
    return attrs.evolve(job, extra=job.admin_comment, admin_comment="")


@pytest.mark.parametrize(("facts", "present"), [
    (Facts(jobs=None), None),  # Slurm's job list is stale: cannot tell
    (Facts(), False),  # the Pod is gone, and no job holds the node
    (Facts(pods={"team-a/train-0": ""}), False),  # it exists but is bound nowhere
    (Facts(pods={"team-a/train-0": "worker-2"}), False),  # a Pod of that name runs elsewhere
    (Facts(pods={"team-a/train-0": "worker-1"}), True),  # still on this node's Node
    # On this node's Node, but finished (the scheduler keeps a finished Pod for its owner): it runs nothing.
    (Facts(pods={"team-a/train-0": "worker-1"}, on_node=(finished_pod("train-0", "Succeeded"),)), False),
    (Facts(pods={"team-a/train-0": "worker-1"}, on_node=(finished_pod("train-0", "Failed"),)), False),
    (Facts(pods={"team-a/train-0": "worker-1"}, on_node=(finished_pod("train-0", "Running"),)), True),
    (Facts(pods={"team-a/train-0": "worker-1"}, pod=None), None),  # this node's Node is unknown
    (Facts(pods={"team-a/train-0": "worker-2"}, pod=None), None),
    (Facts(pod=None), None),  # (other Pods that outlive their jobs there could not be seen)
    (Facts(pod=slurmd_pod(node=None)), None),
    (Facts(jobs=(Job(id=42, state="CANCELLED", state_flags=["COMPLETING"], nodes="node1"),)), True),  # still ending
    (Facts(jobs=(placeholder_job(77),)), True),  # another job of the same Pod holds the node
    (Facts(jobs=(placeholder_job(77, name="train-1"), Job(id=78, state="RUNNING", nodes="node1"))), False),
    (Facts(jobs=(placeholder_job(77, ns="team-b"),)), False),
    (Facts(jobs=(forged(placeholder_job(77)),)), False),  # a tenant's job naming the Pod in its Extra: not of it
    # Another Pod placed on node1 outlives its job there (several placeholders drained at once; the
    # reason names only the last): the drain stays until it is gone too.
    (Facts(on_node=(sunk_pod("train-1", 77),)), True),
    (Facts(on_node=(sunk_pod("train-1", 77),), jobs=(placeholder_job(77, name="train-1"),)), False),  # job runs
    (Facts(on_node=(sunk_pod("train-1", 77, slurm_node="node2"),)), False),  # placed on another Slurm node
    (Facts(on_node=(sunk_pod("train-1", None),)), False),  # not placed by sunk
    (Facts(on_node=(sunk_pod("train-1", "x7"),)), False),
    (Facts(on_node=(sunk_pod("train-1", "\u0663"),)), False),  # (a digit, but not ASCII)
    (Facts(on_node=(sunk_pod("train-1", "9" * 5000),)), False),  # (int() would refuse it)
])
@pytest.mark.parametrize("drain", [PLACEHOLDER, OLD_PLACEHOLDER])
def test_a_placeholder_drain_lasts_while_its_pod_is_on_the_node_or_a_job_of_it_holds_the_node(facts, present, drain):
    """(The Pods named in ``pods`` are the drained one, its UID POD_UID: the same answer, either format.)"""
    facts = attrs.evolve(facts, uids={key: POD_UID for key in facts.pods})
    assert cause(drain, facts, IDLE).present is present


REMADE = "9e8d7c6b-0000-4000-8000-000000000002"  # the UID of a Pod deleted and made again as team-a/train-0


@pytest.mark.parametrize(("facts", "present"), [
    (Facts(pods={"team-a/train-0": "worker-1"}, uids={"team-a/train-0": POD_UID}), True),  # the drained Pod
    (Facts(pods={"team-a/train-0": "worker-1"}, uids={"team-a/train-0": REMADE}), False),  # made again: another
    (Facts(pods={"team-a/train-0": "worker-1"}, uids={"team-a/train-0": ""}), False),
    (Facts(pods={"team-a/train-0": "worker-1"}), False),  # (no UID known: not the drained Pod)
    (Facts(jobs=(placeholder_job(77, uid=REMADE),)), False),  # the job of the Pod made again: not the drained one's
    (Facts(jobs=(placeholder_job(77, uid=POD_UID, name="renamed"),)), True),  # the UID decides, not the name
    (Facts(pods={"team-a/train-0": "worker-1"}, uids={"team-a/train-0": REMADE}, pod=None), None),
])
def test_a_placeholder_drain_is_held_only_by_the_pod_with_its_uid(facts, present):
    """A tenant who deletes their Pod and makes it again under the name (on the same Node, with
    spec.nodeName) does not keep sunk's drain: the reason carries the drained Pod's UID."""
    assert cause(PLACEHOLDER, facts, IDLE).present is present


@pytest.mark.parametrize(("facts", "present"), [
    (Facts(pods={"team-a/train-0": "worker-1"}, uids={"team-a/train-0": REMADE}), True),
    (Facts(jobs=(placeholder_job(77, uid=REMADE),)), True),
    (Facts(jobs=(placeholder_job(77, uid=POD_UID, name="renamed"),)), False),
])
def test_an_earlier_versions_placeholder_drain_is_judged_by_the_pods_name_as_that_version_did(facts, present):
    assert cause(OLD_PLACEHOLDER, facts, IDLE).present is present


def test_the_reason_says_the_pod_was_made_again():
    facts = Facts(pods={"team-a/train-0": "worker-1"}, uids={"team-a/train-0": REMADE})
    assert REMADE in cause(PLACEHOLDER, facts, IDLE).why


@pytest.mark.parametrize(("pod", "job_id"), [
    (sunk_pod("train-1", 77), 77),
    (sunk_pod("train-1", 77, scheduler="sunk-extender"), 77),  # the extender's kube-scheduler placed it
    # Made by anyone with spec.nodeName set (no scheduler at all) and sunk's annotations written by its
    # author: the chart's admission policy guards those annotations only on Pods of sunk's schedulers.
    (sunk_pod("train-1", 77, scheduler="default-scheduler"), None),
    (sunk_pod("train-1", 77, scheduler=None), None),  # (the apiserver fills in default-scheduler)
    (sunk_pod("train-1", 77, scheduler=""), None),
    (sunk_pod("train-1", 77, scheduler="SUNK-SCHEDULER"), None),
    (sunk_pod("train-1", 77, slurm_node="node2"), None),  # placed on another Slurm node
    (sunk_pod("train-1", None), None),
    (sunk_pod("train-1", " 77 "), 77),
    (sunk_pod("train-1", "x7"), None),
    (sunk_pod("train-1", "-7"), None),
    (sunk_pod("train-1", "\u0663"), None),
    (sunk_pod("train-1", "9" * 20), None),
    ({**sunk_pod("train-1", 77), "status": {"phase": "Failed"}}, None),  # runs nothing
    ({"metadata": {}, "spec": {"schedulerName": SCHEDULER}}, None),
    ({}, None),
])
def test_only_a_pod_of_sunks_schedulers_with_its_annotations_counts_as_placed_by_sunk(pod, job_id):
    assert drains.placed_job(pod, "node1", frozenset({SCHEDULER, "sunk-extender"})) == job_id


def test_no_pod_counts_as_placed_by_sunk_when_no_scheduler_of_sunks_is_known():
    assert drains.placed_job(sunk_pod("train-1", 77), "node1", frozenset()) is None


@pytest.mark.parametrize("drain", [PLACEHOLDER, OLD_PLACEHOLDER, GANG])
def test_a_forged_pod_of_another_scheduler_does_not_keep_sunks_drain(drain):
    """A tenant's Pod made with spec.nodeName on the drained Node, with the job-id and slurm-node
    annotations of a job that ended: it outlives nothing sunk placed, so the drain is lifted."""
    forged_pod = sunk_pod("squatter", 77, scheduler="default-scheduler")
    assert cause(drain, Facts(on_node=(forged_pod,)), IDLE).present is False
    real = sunk_pod("train-1", 77)  # the same, placed by sunk's scheduler: it does outlive its job there
    assert cause(drain, Facts(on_node=(forged_pod, real)), IDLE).present is True


def gang_member(name: str, *, job_uid: str = GANG.key.split("/", 1)[1], phase: str = "Running",
                job_id: int | None = 47, slurm_node: str = "node1", scheduler: str = SCHEDULER) -> dict:
    """A Pod of a Job (its controller's labels) bound to worker-1; sunk's annotations (placed by job
    ``job_id`` on ``slurm_node``, as the scheduler binds a member) unless ``job_id`` is None."""
    annotations = {names.ANN_SLURM_NODE: slurm_node, names.ANN_JOB_ID: str(job_id)} if job_id else {}
    return {"metadata": {"name": name, "namespace": "team-a", "annotations": annotations,
                         "labels": {"batch.kubernetes.io/job-name": "train",
                                    "batch.kubernetes.io/controller-uid": job_uid}},
            "spec": {"nodeName": "worker-1", "schedulerName": scheduler}, "status": {"phase": phase}}


def gang_job(job_id: int, key: str = GANG.key, nodes: str = "node[1-3]") -> Job:
    return Job(id=job_id, state="RUNNING", nodes=nodes,
               admin_comment=f"sunk-gang={key} ns=team-a size=3 members=aa,bb,cc")


@pytest.mark.parametrize(("facts", "present"), [
    (Facts(jobs=None), None),  # Slurm's job list is stale: cannot tell
    (Facts(), False),  # no member on this node's Node, no job of the gang holds the node
    (Facts(jobs=(Job(id=47, state="CANCELLED", state_flags=["COMPLETING"], nodes="node[1-3]"),)), True),  # ending
    (Facts(jobs=(gang_job(80),)), True),  # another job of the same gang holds the node
    (Facts(jobs=(gang_job(80, key="job/other"), Job(id=81, state="RUNNING", nodes="node1"))), False),
    (Facts(jobs=(forged(gang_job(80)),)), False),  # the gang's identity in a tenant's Extra: not of the gang
    (Facts(on_node=(gang_member("train-0"),)), True),  # a member is still on the node's Node (job 47 is over)
    # The gang's labels on a Pod sunk did not place here (a tenant's Pod made with spec.nodeName): nothing.
    (Facts(on_node=(gang_member("train-0", job_id=None),)), False),
    (Facts(on_node=(gang_member("train-0", scheduler="default-scheduler"),)), False),
    (Facts(on_node=(gang_member("train-0", slurm_node="node2"),)), False),  # placed on another Slurm node
    (Facts(on_node=(gang_member("train-0", phase="Succeeded"),)), False),  # finished: it runs nothing there
    (Facts(on_node=(gang_member("train-0", phase="Failed", job_id=47),)), False),
    (Facts(on_node=(gang_member("train-0", job_uid="another-job", job_id=None),)), False),  # another gang's Pod
    (Facts(on_node=(gang_member("train-0", job_uid="another-job"),)), True),  # (one sunk placed: it outlives job 47)
    (Facts(on_node=(sunk_pod("web-1", 77),)), True),  # another Pod sunk placed there outlives its job
    (Facts(on_node=(gang_member("train-0"),), pod=None), None),  # this node's Node is unknown
    (Facts(pod=slurmd_pod(node=None)), None),
])
def test_a_gang_drain_lasts_while_a_job_of_the_gang_holds_the_node_or_a_member_is_on_it(facts, present):
    assert cause(GANG, facts, IDLE).present is present


def test_a_finished_pod_does_not_outlive_its_job():
    """A gang's member that finished is kept by its Job, bound, with sunk's annotations: it runs nothing."""
    done = {**sunk_pod("train-1", 77), "status": {"phase": "Succeeded"}}
    assert cause(PLACEHOLDER, Facts(on_node=(done,)), IDLE).present is False
    assert cause(PLACEHOLDER, Facts(on_node=(sunk_pod("train-1", 77),)), IDLE).present is True


LOCK_DRAINS = (UNREACHABLE, TIMEOUT, TIMEOUT_NO_POD)


@pytest.mark.parametrize("drain", LOCK_DRAINS)
@pytest.mark.parametrize(("facts", "node", "present"), [
    (Facts(jobs=None), IDLE, None),
    (Facts(pod=None), IDLE, None),  # no slurmd Pod: the lock cannot be read
    (Facts(k8s_node=None), IDLE, None),
    (Facts(), IDLE, False),  # unlocked, untainted, nothing on the node: consistent
    (Facts(pod=slurmd_pod("false")), IDLE, False),
    (Facts(pod=slurmd_pod("false"), k8s_node=k8s_node(tainted=True)), IDLE, True),  # the unlock is not done
    (Facts(pod=slurmd_pod("locked")), IDLE, True),  # locked for nothing: the controller has not caught up
    (Facts(pod=slurmd_pod("pending"), k8s_node=k8s_node(True)), IDLE, True),
    (Facts(pod=slurmd_pod("locked"), k8s_node=k8s_node(True)), BUSY, False),  # a job whose epilog runs, locked
    (Facts(pod=slurmd_pod("false")), BUSY, True),
    (Facts(pod=slurmd_pod("locked"), k8s_node=k8s_node(True), jobs=(Job(id=9, state="RUNNING", nodes="node1"),)),
     BUSY, False),
    (Facts(pod=slurmd_pod("locked"), k8s_node=k8s_node(True), jobs=(placeholder_job(9),)), BUSY, True),  # not strict
    (Facts(pod=slurmd_pod("locked_strict"), k8s_node=k8s_node(True), jobs=(placeholder_job(9),)), BUSY, False),
    # an identity in Extra is the tenant's word: a normal lock is consistent with their job
    (Facts(pod=slurmd_pod("locked"), k8s_node=k8s_node(True), jobs=(forged(placeholder_job(9)),)), BUSY, False),
    (Facts(pod=slurmd_pod("locked"), k8s_node=k8s_node(True), jobs=(forged(gang_job(9, nodes="node1")),)), BUSY,
     False),
    (Facts(pod=slurmd_pod("locked"), k8s_node=k8s_node(True), jobs=(gang_job(9, nodes="node1"),)), BUSY, True),
    (Facts(pod=slurmd_pod("locked"), jobs=(Job(id=9, state="RUNNING", nodes="node1"),)), BUSY, True),  # no taint
])
def test_a_prolog_drain_lasts_until_the_lock_is_consistent_with_slurm(drain, facts, node, present):
    assert cause(drain, facts, node).present is present


@pytest.mark.parametrize("drain", LOCK_DRAINS)
def test_a_prolog_drain_lasts_while_the_job_it_refused_holds_the_node(drain):
    job = Job(id=drain.job_id, state="RUNNING", nodes="node1")
    facts = Facts(pod=slurmd_pod("locked"), k8s_node=k8s_node(True), jobs=(job,))
    assert cause(drain, facts, BUSY).present is True
    requeued = Job(id=drain.job_id, state="PENDING", state_reason="launch_failed_requeued_held")
    assert cause(drain, Facts(jobs=()), IDLE).present is False and not requeued.holds_nodes


def test_a_lock_timeout_drain_lasts_while_a_pod_it_names_is_on_that_node():
    assert cause(TIMEOUT, Facts(pods={"apps/slow.one": "worker-1"}), IDLE).present is True
    assert cause(TIMEOUT, Facts(pods={"apps/guarded": "worker-1", "apps/slow.one": ""}), IDLE).present is True
    assert cause(TIMEOUT, Facts(pods={"apps/guarded": "worker-9", "apps/slow.one": ""}), IDLE).present is False
    assert cause(TIMEOUT, Facts(pods={"apps/other": "worker-1"}), IDLE).present is False  # not named: not the cause
    assert cause(TIMEOUT, Facts(pods={"apps/guarded": "worker-1"}, jobs=None), IDLE).present is None


def test_a_drain_that_counts_the_pods_lasts_while_a_pod_bound_by_its_time_would_block_a_lock():
    early, late = "2026-11-28T09:00:11Z", "2026-11-28T09:00:12Z"
    drain = TIMEOUT_MANY  # strict, worker-1, by 09:00:11

    def present(*on_node: dict, pod: dict | None = None) -> bool | None:
        return cause(drain, Facts(on_node=on_node, pod=pod or slurmd_pod()), IDLE).present

    assert present() is False  # every Pod gone, the lock consistent
    assert present(blocker("apps/a", early)) is True
    assert present(blocker("apps/a", "2026-11-28T08:00:00Z")) is True
    assert present(blocker("apps/a", early, terminating=True)) is True  # strict: terminating Pods block
    assert cause(attrs.evolve(drain, strict=False), Facts(on_node=(blocker("apps/a", early, terminating=True),)),
                 IDLE).present is False  # not strict: it does not
    assert present(blocker("apps/a", late)) is False  # bound once the lock was given up: not what refused the job
    assert present(blocker("apps/a", None, created=late)) is False
    assert present(blocker("apps/a", None)) is True  # when it came cannot be told: taken as one of them
    # Pods no lock waits for: tolerating it (with the taint's effect), placed by sunk, finished, the slurmd Pod
    for effect, tolerates in (("", True), ("NoSchedule", True), ("NoExecute", False)):
        toleration = {"key": names.LOCK_KEY, "operator": "Exists", **({"effect": effect} if effect else {})}
        assert present(blocker("apps/a", early, tolerations=(toleration,))) is not tolerates, effect
        assert cause(attrs.evolve(drain, effect="NoExecute"),
                     Facts(on_node=(blocker("apps/a", early, tolerations=(toleration,)),)),
                     IDLE).present is (effect == "NoSchedule"), effect
    assert present(blocker("apps/a", early, tolerations=({"key": "other", "operator": "Exists"},))) is True
    assert present(blocker("apps/a", early, tolerations=({"key": names.LOCK_KEY, "value": "no"},))) is True
    placed = blocker("apps/a", early)
    placed["metadata"]["annotations"] = {names.ANN_JOB_ID: "9"}
    assert present(placed) is True  # (a job id on a Pod of no scheduler of sunk's: its author's word, it blocks)
    placed["spec"]["schedulerName"] = SCHEDULER
    assert present(placed) is False
    done = blocker("apps/a", early)
    done["status"]["phase"] = "Succeeded"
    assert present(done) is False
    assert present(blocker("slurm/node1", early)) is False  # (slurmd_pod()'s key)
    # the slurmd Pod on another Node: the Pods of worker-1 hold nothing of this Slurm node now
    assert present(blocker("apps/a", early), pod=slurmd_pod(node="worker-2")) is False
    assert cause(drain, Facts(pod=slurmd_pod(node=None)), IDLE).present is None
    assert cause(drain, Facts(on_node=(blocker("apps/a", late),), jobs=None), IDLE).present is None


def test_every_combination_gives_one_answer_and_unknown_facts_never_read_as_gone():
    pods = ({}, {"team-a/train-0": "worker-1", "apps/guarded": "worker-1"}, {"team-a/train-0": "worker-2"})
    for drain, pod, tainted, lock, jobs, seen, on_node, node in itertools.product(
            ALL, (True, False), (True, False, None), (None, "false", "pending", "locked", "locked_strict"),
            (None, (), (placeholder_job(9),), (placeholder_job(42),)), pods,
            ((), (sunk_pod("train-1", 9),), (blocker("apps/web-0"),)), (IDLE, BUSY)):
        facts = Facts(pod=slurmd_pod(lock) if pod else None, k8s_node=None if tainted is None else k8s_node(tainted),
                      pods=seen, jobs=jobs, on_node=on_node)
        verdict = cause(drain, facts, node)
        assert verdict.present in (True, False, None) and verdict.why
        if jobs is None:
            assert verdict.present is None
        if verdict.present is False:
            assert pod  # this node's Node was known
            if isinstance(drain, (PlaceholderDrain, GangPlaceholderDrain)):
                outliving = any(names.ANN_JOB_ID in (p["metadata"].get("annotations") or {}) for p in on_node)
                assert not outliving or jobs == (placeholder_job(9),)  # no Pod there outlives its job
            else:
                assert tainted is not None  # the lock was read
            if drain is TIMEOUT_MANY:
                assert not any(p["metadata"]["name"] == "web-0" for p in on_node)  # bound by T, it blocks a lock


def ready_node(status: str = "True") -> dict:
    return {"metadata": {"name": "worker-1"}, "status": {"conditions": [{"type": "Ready", "status": status}]}}


@pytest.mark.parametrize(("facts", "present"), [
    (Facts(uids={"team-a/train-0": STUCK.uid}, nodes={"worker-1": ready_node()}), True),  # the Pod is still there
    (Facts(uids={"team-a/train-0": STUCK.uid}, nodes={"worker-1": ready_node("Unknown")}), True),
    (Facts(nodes={"worker-1": ready_node("Unknown")}), True),  # gone, but its Node's kubelet has not come back
    (Facts(nodes={"worker-1": ready_node("False")}), True),
    (Facts(), True),  # the Node is gone: nothing says its containers stopped
    (Facts(nodes={"worker-1": ready_node()}), False),
    (Facts(uids={"team-a/train-0": "uid-of-its-successor"}, nodes={"worker-1": ready_node()}), False),
    # Slurm's job list, the slurmd Pod and its Node's lock play no part: the job was let go
    (Facts(jobs=None, pod=None, k8s_node=None, nodes={"worker-1": ready_node()}), False),
    (Facts(jobs=(Job(id=46, state="CANCELLED", state_flags=["COMPLETING"], nodes="node1"),),
           nodes={"worker-1": ready_node()}), False),
])
def test_a_stuck_pod_drain_lasts_while_a_pod_with_its_uid_exists_or_its_node_is_not_ready(facts, present):
    verdict = cause(STUCK, facts, IDLE)
    assert verdict.present is present and verdict.why


@pytest.mark.parametrize("state, reason, held", [
    ({"IDLE", "DRAIN"}, "hardware: fan", True),  # an operator's
    ({"MIXED", "DRAIN"}, "NHC: gpu xid 79", True),  # a health check's, while jobs finish
    ({"DOWN", "NOT_RESPONDING"}, "Not responding", True),  # Slurm's own
    ({"IDLE", "FAIL"}, "failing DIMM", True),  # scontrol update state=fail
    ({"IDLE", "INVALID_REG"}, "Low RealMemory", True),  # a node that registered wrong
    ({"FUTURE"}, "not built yet", True),
    ({"IDLE", "DRAIN"}, "sunk-lock: job 7: SUNK_SYNCER_URL is not set", True),  # the prolog's, for a person
    ({"IDLE", "DRAIN"}, "ops: k8s: looks like sunk's", True),  # only the prefix makes a reason sunk's
    ({"IDLE", "DRAIN"}, "k8s: sunk-placeholder: pod ns/p outlived KillWait after job 7", False),  # sunk's own
    ({"DOWN", "DRAIN"}, "k8s: slurmd pod slurm/node1 is not ready", False),
    ({"IDLE", "DRAIN"}, "", False),  # no reason: nothing to keep
    ({"IDLE", "DRAIN"}, "   ", False),
    ({"IDLE"}, "hardware: fan", False),  # in service: a stale reason holds nothing
    ({"MIXED", "COMPLETING"}, "anything", False),
])
def test_a_node_held_by_another_is_out_of_service_for_a_reason_sunk_did_not_write(state, reason, held):
    assert held_by_another(Node(name="node1", state=frozenset(state), reason=reason)) is held


# ---- a placeholder's Pod still on the node as Slurm ends its job (the Syncer's post-hook) -------------------


def placed_pod(name: str = "train-0", uid: str = POD_UID, namespace: str = "team-a", phase: str = "Running",
               **annotations: str) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": dict(annotations)},
            "spec": {"nodeName": "worker-1"}, "status": {"phase": phase}}


def member_uid(i: int) -> str:
    return f"0a0b0c0d-0000-4000-8000-00000000000{i}"


POD_IDENTITY = f"sunk-pod={POD_UID} ns=team-a name=train-0 sched=sunk"
GANG_IDENTITY = (f"sunk-gang=job/j1 ns=team-a size=2 members="
                 f"{member_tag(member_uid(1))},{member_tag(member_uid(2))} sched=sunk")


def test_the_pod_a_placeholder_held_a_place_for_outlives_it_with_the_schedulers_reason():
    job = Job(id=42, state="COMPLETED", admin_comment=POD_IDENTITY)
    found = drains.outlived(job, [placed_pod("other", uid="u-other"), placed_pod()])
    assert found is not None and found.pod["metadata"]["name"] == "train-0"
    assert found.drain == PLACEHOLDER
    assert parse(found.drain.reason()) == PLACEHOLDER  # (the reason the Syncer lifts once the Pod is gone)


@pytest.mark.parametrize("pods", [
    [],  # gone from the Node
    [placed_pod(phase="Succeeded")], [placed_pod(phase="Failed")],  # finished: runs nothing there
    [placed_pod(uid="another-uid")],  # made again under its name: another Pod, not this job's
    [placed_pod(namespace="team-b")],
])
def test_a_placeholder_whose_pod_is_gone_finished_or_another_outlives_nothing(pods):
    assert drains.outlived(Job(id=42, state="COMPLETED", admin_comment=POD_IDENTITY), pods) is None


@pytest.mark.parametrize("job", [
    Job(id=42, state="COMPLETED"),  # no placeholder
    Job(id=42, state="COMPLETED", comment=POD_IDENTITY),  # its user's fields: never read for an identity
    Job(id=42, state="COMPLETED", extra=POD_IDENTITY),
    Job(id=42, state="COMPLETED", name=POD_IDENTITY),
    Job(id=42, state="COMPLETED", admin_comment=f"site: {POD_IDENTITY}"),  # not a whole identity
])
def test_a_job_that_is_no_placeholder_outlives_nothing_whatever_its_user_wrote(job):
    assert drains.outlived(job, [placed_pod()]) is None


def test_a_gangs_member_still_on_the_node_is_named_and_a_later_member_is_not_this_jobs():
    job = Job(id=47, state="CANCELLED", admin_comment=GANG_IDENTITY)
    later = placed_pod("w-9", uid=member_uid(9))  # made for the next gang: not this job's
    done = placed_pod("w-1", uid=member_uid(1), phase="Succeeded")
    assert drains.outlived(job, [later, done]) is None
    found = drains.outlived(job, [later, done, placed_pod("w-2", uid=member_uid(2))])
    assert found is not None and found.drain == PlaceholderDrain("team-a", "w-2", 47, member_uid(2))


def test_a_pod_annotated_as_placed_by_a_job_is_not_that_jobs_unless_its_identity_says_so():
    """Annotations are the Pod author's to write: only the job's AdminComment and the apiserver's UID count."""
    pod = placed_pod("mine", uid="u-mine", **{names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"})
    assert drains.outlived(Job(id=42, state="COMPLETED", admin_comment=POD_IDENTITY), [pod]) is None


@pytest.mark.parametrize(("state", "reason", "writes"), [
    ({"IDLE"}, "", True),
    ({"MIXED", "COMPLETING"}, "", True),
    ({"IDLE", "DRAIN"}, PLACEHOLDER.reason(), False),  # the scheduler's /drain hook was first: nothing to do
    ({"IDLE", "DRAIN"}, "hardware: fan", False),  # an operator's: never replaced
    ({"DOWN"}, "Not responding", False),
    ({"IDLE", "DRAIN"}, STUCK.reason(), False),  # the same Pod, stuck on a lost Node: that says more
    ({"IDLE", "DRAIN"}, StuckPodDrain("team-a", "other", "u9", "worker-1", 40).reason(), True),
    ({"IDLE", "DRAIN"}, GangPlaceholderDrain("team-a", "job/j1", 42).reason(), False),  # this job's gang
    ({"IDLE", "DRAIN"}, GangPlaceholderDrain("team-a", "job/j0", 41).reason(), True),
    ({"IDLE", "DRAIN"}, PlaceholderDrain("team-a", "other", 41).reason(), True),
    ({"IDLE", "DRAIN"}, UNREACHABLE.reason(), True),
    ({"DOWN", "DRAIN"}, "k8s: slurmd pod slurm/node1 is not ready", True),
    ({"IDLE", "DRAIN"}, "", True),
])
def test_a_placeholders_drain_replaces_only_what_says_less_and_never_an_operators(state, reason, writes):
    node = Node(name="node1", state=frozenset(state), reason=reason)
    assert drains.may_drain_over(node, PLACEHOLDER) is writes


@pytest.mark.parametrize(("state", "flags", "ending"), [
    ("RUNNING", (), False), ("PENDING", (), False), ("SUSPENDED", (), False),
    ("RUNNING", ("COMPLETING",), True), ("COMPLETED", (), True), ("CANCELLED", ("COMPLETING",), True),
    ("PENDING", ("REQUEUED", "COMPLETING"), True), ("TIMEOUT", (), True), ("PREEMPTED", (), True),
])
def test_only_slurms_end_of_a_job_counts_as_ending(state, flags, ending):
    assert drains.job_ending(Job(id=1, state=state, state_flags=frozenset(flags))) is ending


MAPPING = dra.DeviceMapping("gpu.example.com", frozenset({"gpu.example.com"}), attribute="index")


def devices(*indices: int, tainted: int | None = None) -> tuple[dra.SliceDevice, ...]:
    taint = (dra.DeviceTaint("example.com/ecc", "failed", "NoExecute"),)
    return tuple(dra.SliceDevice("gpu.example.com", "worker-1", f"gpu-{i}", {"gpu.example.com/index": i},
                                 taint if i == tainted else ()) for i in indices)


FOUR_GPUS = Node("node1", state="IDLE+DRAIN", gres="gpu:h100:4")


@pytest.mark.parametrize(("seen", "present", "why"), [
    (None, None, "not watched here"),
    (DeviceFacts(MAPPING, devices(0, 1, 2, 3), {}), False, "Slurm's 4 GPUs and the DRA driver's devices agree"),
    (DeviceFacts(MAPPING, devices(0, 1, 2), {}), True, "gpu index 3 names 0 devices"),
    (DeviceFacts(MAPPING, devices(0, 1, 2, 3, 3), {}), True, "gpu index 3 names 2 devices"),
    (DeviceFacts(MAPPING, devices(0, 1, 2, 3, tainted=2), {}), True, "device gpu-2 is tainted example.com/ecc=failed"),
    (DeviceFacts(MAPPING, devices(0, 1, 2, 3), {("gpu.example.com", "worker-1", "gpu-1"): "web/inference"}), True,
     "device gpu-1 is held by a ResourceClaim sunk did not fill"),
    (DeviceFacts(MAPPING, (), {}), True, "gpu index 0 names 0 devices"),  # the driver publishes nothing there
], ids=["not-watched", "agree", "missing", "twice", "tainted", "held-elsewhere", "no-devices"])
def test_a_device_mismatch_drain_lasts_until_slurm_and_the_driver_agree_on_the_node(seen, present, why):
    """Slurm's jobs, the slurmd Pod and the lock play no part: only the node's GPUs and the driver's devices."""
    verdict = cause(DEVICES, Facts(devices=seen, jobs=None, pod=None, k8s_node=None), FOUR_GPUS)
    assert verdict.present is present and why in verdict.why


@pytest.mark.parametrize("node", ["g1", "node-001", "n" * 63])
def test_a_device_mismatch_reason_always_reads_back_whatever_its_length(node):
    """Cut to what Slurm keeps, it still parses as sunk's (else the Syncer would take it for a stale condition drain
    and lift it at once)."""
    drain = DeviceMismatchDrain(node, "gpu index 0 names device device-00, which another ResourceClaim holds: " * 5)
    parsed = parse(drain.reason())
    assert len(drain.reason()) <= 250 and isinstance(parsed, DeviceMismatchDrain) and parsed.k8s_node == node
