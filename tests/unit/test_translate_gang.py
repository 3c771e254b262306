"""Gangs, pure: who forms one, its key and size, its members' order, their agreement, the job's request."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.model import names
from sunk.model.slurm import Job
from sunk.translate import gang as g
from sunk.translate import placeholder
from sunk.translate.identity import PlaceholderIdentity, identity_of, is_placeholder, member_tag
from sunk.translate.keys import GangKey, PodKey, unit_key
from sunk.translate.podjob import Identity, validate_pod
from sunk.translate.policy import IdentityPolicy, NamespaceRule

NS = "team"
POLICY = IdentityPolicy(default=NamespaceRule(identity=Identity(1001, 1001)))
JOB_UID = "3f1c2d4e-0000-4000-8000-000000000001"


def pod(name="p-0", *, uid=None, labels=None, annotations=None, cpu="1", memory="1Gi", gpus=0, owner=None,
        phase=None, deleting=False, affinity=None):
    requests = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    meta = {"name": name, "namespace": NS, "uid": uid or f"uid-{name}", "labels": labels or {},
            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    spec = {"terminationGracePeriodSeconds": 5, "containers": [{"name": "c", "resources": {"requests": requests}}]}
    if affinity:
        spec["affinity"] = affinity
    out = {"metadata": meta, "spec": spec}
    if phase:
        out["status"] = {"phase": phase}
    return out


def job_labels(name="train", uid=JOB_UID, index=None):
    labels = {"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": uid}
    if index is not None:
        labels[g.JOB_COMPLETION_INDEX] = str(index)
    return labels


def lws_labels(name="llm", group=0, worker=0):
    return {g.LWS_NAME: name, g.LWS_GROUP_INDEX: str(group), g.LWS_WORKER_INDEX: str(worker)}


def jobset_labels(name="js", rjob="workers", job_index=0, global_index=0, attempt=0, job_uid=JOB_UID):
    return {g.JOBSET_NAME: name, g.JOBSET_REPLICATED_JOB: rjob, g.JOBSET_JOB_INDEX: str(job_index),
            g.JOBSET_JOB_GLOBAL_INDEX: str(global_index), g.JOBSET_RESTART_ATTEMPT: str(attempt),
            **job_labels(f"{name}-{rjob}-{job_index}", job_uid)}


# -- who forms a gang ------------------------------------------------------------------------------
@pytest.mark.parametrize(("labels", "annotations", "owner", "expected"), [
    # batch/v1 Job: the controller-uid label (1.27+), the legacy one, or the owner reference
    (job_labels(), {}, None, g.Gang(g.KIND_JOB, NS, "train", f"job/{JOB_UID}", job_uid=JOB_UID)),
    ({"job-name": "train", "controller-uid": JOB_UID}, {}, None,
     g.Gang(g.KIND_JOB, NS, "train", f"job/{JOB_UID}", job_uid=JOB_UID)),
    ({}, {}, {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB_UID, "controller": True},
     g.Gang(g.KIND_JOB, NS, "train", f"job/{JOB_UID}", job_uid=JOB_UID)),
    # a Job's opt-out
    (job_labels(), {names.ANN_GANG: "none"}, None, None),
    (job_labels(), {names.ANN_GANG: " None "}, None, None),
    # LeaderWorkerSet: one gang per group
    (lws_labels(group=2, worker=3), {g.LWS_SIZE: "4"}, None, g.Gang(g.KIND_LWS, NS, "llm", "lws/llm/2", part="2")),
    (lws_labels(), {names.ANN_GANG: "none"}, None, None),
    ({g.LWS_NAME: "llm"}, {}, None, None),  # no group index: not a group the LWS controller made
    # coscheduling PodGroup, before anything else the Pod carries
    ({g.POD_GROUP: "pg", **job_labels()}, {}, None, g.Gang(g.KIND_POD_GROUP, NS, "pg", "podgroup/pg")),
    ({g.POD_GROUP: "pg", **lws_labels()}, {}, None, g.Gang(g.KIND_POD_GROUP, NS, "pg", "podgroup/pg")),
    # JobSet: whole by default, per replicated Job, or per child Job (then a Job's gang)
    (jobset_labels(attempt=1), {}, None, g.Gang(g.KIND_JOBSET, NS, "js", "jobset/js/1", restart_attempt="1")),
    (jobset_labels(), {names.ANN_GANG: "jobset"}, None, g.Gang(g.KIND_JOBSET, NS, "js", "jobset/js/0",
                                                               restart_attempt="0")),
    (jobset_labels(), {names.ANN_GANG: "replicated-job"}, None,
     g.Gang(g.KIND_JOBSET, NS, "js", "jobset/js/0/workers", part="workers", restart_attempt="0")),
    (jobset_labels(job_index=1), {names.ANN_GANG: "job"}, None,
     g.Gang(g.KIND_JOB, NS, "js-workers-1", f"job/{JOB_UID}", job_uid=JOB_UID)),
    ({g.JOBSET_NAME: "js"}, {}, None, g.Gang(g.KIND_JOBSET, NS, "js", "jobset/js/0", restart_attempt="0")),
    (jobset_labels(), {names.ANN_GANG: "none"}, None, None),
    # nothing that gangs: a bare Pod, a ReplicaSet's, a StatefulSet's
    ({}, {}, None, None),
    ({"app": "web"}, {}, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u",
                          "controller": True}, None),
    # a value that could not be one word of the job's identity (the apiserver never lets one through)
    ({g.POD_GROUP: "has space"}, {}, None, None),
], ids=["job", "job-legacy-labels", "job-owner-reference", "job-opted-out", "job-opted-out-spaces", "lws-group",
        "lws-opted-out", "lws-without-group", "podgroup-over-job", "podgroup-over-lws", "jobset-whole",
        "jobset-whole-explicit", "jobset-per-replicated-job", "jobset-per-child-job", "jobset-minimal-labels",
        "jobset-opted-out", "bare-pod", "replicaset-pod", "not-one-word"])
def test_who_forms_a_gang(labels, annotations, owner, expected):
    assert g.gang_of(pod(labels=labels, annotations=annotations, owner=owner)) == expected


def test_owners_are_keyed_by_namespace_and_key_and_never_look_like_a_uid():
    gang = g.gang_of(pod(labels=job_labels()))
    assert gang.owner == f"gang:{NS}/job/{JOB_UID}"
    assert unit_key(gang.owner) == GangKey(NS, f"job/{JOB_UID}") == gang.unit
    assert unit_key(JOB_UID) == PodKey(JOB_UID)
    assert g.owner_of(pod(labels=job_labels())) == gang.owner
    assert g.owner_of(pod(uid="u-1")) == "u-1"


@pytest.mark.parametrize(("gang", "describe", "job_name"), [
    (g.Gang(g.KIND_JOB, NS, "train", "job/u"), "Job team/train", "k8s:team/job/train"),
    (g.Gang(g.KIND_LWS, NS, "llm", "lws/llm/2", part="2"), "LeaderWorkerSet team/llm group 2",
     "k8s:team/leaderworkerset/llm/2"),
    (g.Gang(g.KIND_POD_GROUP, NS, "pg", "podgroup/pg"), "PodGroup team/pg", "k8s:team/podgroup/pg"),
    (g.Gang(g.KIND_JOBSET, NS, "js", "jobset/js/0"), "JobSet team/js", "k8s:team/jobset/js"),
    (g.Gang(g.KIND_JOBSET, NS, "js", "jobset/js/0/w", part="w"), "JobSet team/js replicated Job w",
     "k8s:team/jobset/js/w"),
])
def test_a_gang_is_named_for_people(gang, describe, job_name):
    assert gang.describe() == describe and gang.job_name() == job_name


def test_a_long_job_name_is_cut_to_what_slurm_keeps():
    assert len(g.Gang(g.KIND_JOB, NS, "x" * 300, "job/u").job_name()) == 128


# -- how many members --------------------------------------------------------------------------------
def job(parallelism=None, completions=None, succeeded=None, suspend=None, mode=None):
    spec = {k: v for k, v in (("parallelism", parallelism), ("completions", completions), ("suspend", suspend),
                              ("completionMode", mode)) if v is not None}
    return {"metadata": {"name": "train", "namespace": NS, "uid": JOB_UID}, "spec": spec,
            "status": {"succeeded": succeeded} if succeeded is not None else {}}


@pytest.mark.parametrize(("the_job", "size"), [
    (job(), 1),  # parallelism defaults to 1: a gang of one
    (job(parallelism=3), 3),  # a work queue: all of them at once
    (job(parallelism=3, completions=3), 3),
    (job(parallelism=4, completions=4, mode="Indexed"), 4),
    (job(parallelism=8, completions=3, mode="Indexed"), 3),  # no more than the completions
    (job(parallelism=2, completions=6), 2),  # waves: the first one is the gang
    (job(parallelism=4, completions=4, succeeded=3, mode="Indexed"), 1),  # the last index, made again
    (job(parallelism=4, completions=4, succeeded=4), 0),  # complete
    (job(parallelism=3, suspend=True), 0),
    (job(parallelism=0), 0),
    ({"spec": {"parallelism": "3"}}, 3),  # (whatever a hand-made object says)
], ids=["default", "work-queue", "fixed-count", "indexed", "indexed-fewer-completions", "waves",
        "last-index-again", "complete", "suspended", "zero", "string"])
def test_a_jobs_size_is_what_its_controller_keeps_running(the_job, size):
    assert g.job_size(the_job) == size


def child_job(rjob="workers", index=0, parallelism=2, replicas=2, global_replicas=3, attempt=0, name="js"):
    labels = {g.JOBSET_NAME: name, g.JOBSET_REPLICATED_JOB: rjob, g.JOBSET_JOB_INDEX: str(index),
              g.JOBSET_REPLICATED_JOB_REPLICAS: str(replicas), g.JOBSET_RESTART_ATTEMPT: str(attempt)}
    if global_replicas is not None:
        labels[g.JOBSET_GLOBAL_REPLICAS] = str(global_replicas)
    return {"metadata": {"name": f"{name}-{rjob}-{index}", "namespace": NS, "labels": labels},
            "spec": {"parallelism": parallelism, "completions": parallelism}}


WHOLE = g.Gang(g.KIND_JOBSET, NS, "js", "jobset/js/0", restart_attempt="0")
WORKERS = g.Gang(g.KIND_JOBSET, NS, "js", "jobset/js/0/workers", part="workers", restart_attempt="0")
JOBSET = [child_job("driver", 0, parallelism=1, replicas=1), child_job("workers", 0), child_job("workers", 1)]


@pytest.mark.parametrize(("gang", "kwargs", "size", "why"), [
    (g.Gang(g.KIND_JOB, NS, "train", "job/u"), {"job": job(parallelism=3)}, 3, ""),
    (g.Gang(g.KIND_JOB, NS, "train", "job/u"), {}, None, "waiting for Job team/train to be known"),
    (g.Gang(g.KIND_POD_GROUP, NS, "pg", "podgroup/pg"), {"pod_group": {"spec": {"minMember": 3}}}, 3, ""),
    (g.Gang(g.KIND_POD_GROUP, NS, "pg", "podgroup/pg"), {}, None, "PodGroup team/pg not found"),
    (g.Gang(g.KIND_POD_GROUP, NS, "pg", "podgroup/pg"), {"pod_group": {"spec": {}}}, None,
     "PodGroup team/pg has no spec.minMember"),
    (WHOLE, {"child_jobs": JOBSET}, 5, ""),  # 1 driver + 2 Jobs of 2 workers
    (WORKERS, {"child_jobs": JOBSET}, 4, ""),
    (WHOLE, {"child_jobs": JOBSET[:2]}, None, "JobSet team/js: 2 of its 3 Jobs exist"),
    (WORKERS, {"child_jobs": JOBSET[1:2]}, None, "JobSet team/js replicated Job workers: 1 of its 2 Jobs exist"),
    (WHOLE, {"child_jobs": [child_job("workers", i, global_replicas=None) for i in range(2)]}, None,
     "its Jobs do not say how many there are (jobset.sigs.k8s.io/global-replicas"),
    (WORKERS, {"child_jobs": [child_job("workers", i, global_replicas=None) for i in range(2)]}, 4, ""),
    (WHOLE, {"child_jobs": [child_job("workers", i, attempt=1) for i in range(2)]}, None,
     "waiting for the Jobs of JobSet team/js to be known"),  # another restart attempt's Jobs
    (WHOLE, {"child_jobs": [child_job("workers", i, name="other") for i in range(2)]}, None, "waiting for the Jobs"),
], ids=["job", "job-unknown", "podgroup", "podgroup-unknown", "podgroup-without-min", "jobset-whole",
        "jobset-replicated-job", "jobset-missing-a-job", "replicated-job-missing-a-job",
        "jobset-without-global-replicas", "replicated-job-without-global-replicas", "jobset-other-attempt",
        "jobset-other-name"])
def test_how_many_members_a_gang_expects(gang, kwargs, size, why):
    found = g.expected(gang, [], **kwargs)
    assert found.size == size
    assert why in found.why and (size is None) == bool(found.why)


LWS = g.Gang(g.KIND_LWS, NS, "llm", "lws/llm/0", part="0")


@pytest.mark.parametrize(("sizes", "size", "why"), [
    (["4", "4"], 4, ""),
    ([], None, "carry no leaderworkerset.sigs.k8s.io/size"),
    ([None], None, "carry no"),
    (["4", "3"], None, "disagree on leaderworkerset.sigs.k8s.io/size (3, 4)"),
    (["four"], None, "carry no"),
    (["0"], None, "carry no"),
])
def test_a_leaderworkerset_group_takes_its_size_from_its_pods(sizes, size, why):
    pods = [pod(f"llm-0-{i}", labels=lws_labels(worker=i), annotations={g.LWS_SIZE: s} if s else {})
            for i, s in enumerate(sizes)]
    found = g.expected(LWS, pods)
    assert (found.size, why in found.why) == (size, True)


def test_the_missing_members_wait_says_how_many_exist():
    assert g.missing("Job team/train", 2, 3) == "Job team/train: 2 of 3 members exist"


# -- members ---------------------------------------------------------------------------------------
def names_in_order(pods):
    return [p["metadata"]["name"] for p in sorted(pods, key=g.member_order)]


def test_the_leader_comes_first_then_the_workers_by_index():
    pods = [pod(f"llm-0-{w}", labels=lws_labels(worker=w)) for w in (3, 1, 0, 2)]
    pods[2]["metadata"]["name"] = "zzz-leader"  # (names do not decide)
    assert names_in_order(pods) == ["zzz-leader", "llm-0-1", "llm-0-2", "llm-0-3"]


def test_indexed_job_members_go_by_completion_index_not_by_name():
    pods = [pod(f"train-{i}-x", labels=job_labels(index=i)) for i in (10, 2, 1)]
    assert names_in_order(pods) == ["train-1-x", "train-2-x", "train-10-x"]


def test_the_completion_index_annotation_counts_when_the_label_is_missing():
    pods = [pod(f"b-{i}", annotations={g.JOB_COMPLETION_INDEX: str(i)}) for i in (2, 0)]
    assert names_in_order(pods) == ["b-0", "b-2"]


def test_jobset_members_go_by_job_then_completion_index():
    pods = [pod(f"w-{j}-{i}", labels={**jobset_labels(job_index=j, global_index=j + 1), g.JOB_COMPLETION_INDEX: str(i)})
            for j in (1, 0) for i in (1, 0)]
    pods.append(pod("driver-0-0", labels={**jobset_labels(rjob="driver", global_index=0)}))
    assert names_in_order(pods) == ["driver-0-0", "w-0-0", "w-0-1", "w-1-0", "w-1-1"]


def test_members_without_indexes_go_by_name_then_uid():
    pods = [pod("b", uid="2"), pod("a", uid="9"), pod("b", uid="1")]
    assert [(p["metadata"]["name"], p["metadata"]["uid"]) for p in sorted(pods, key=g.member_order)] == \
        [("a", "9"), ("b", "1"), ("b", "2")]


# -- what the one job asks for ----------------------------------------------------------------------------
@pytest.mark.parametrize(("requests", "share"), [
    ([("1", "1Gi", 0)] * 3, g.PerNode(1, 1024, 0)),
    ([("8", "64Gi", 0), ("40", "16Gi", 4), ("2", "100Gi", 8)], g.PerNode(40, 102400, 8)),  # each resource's max
    ([("500m", "1", 0), ("1", "1Mi", 0)], g.PerNode(1, 1, 0)),  # rounded up first, as a single Pod's is
    ([("1500m", "1500Mi", 1)], g.PerNode(2, 1500, 1)),
], ids=["same", "leader-differs", "rounding", "one"])
def test_every_node_has_room_for_whichever_member_lands_there(requests, share):
    pods = [pod(f"p-{i}", cpu=c, memory=m, gpus=n) for i, (c, m, n) in enumerate(requests)]
    assert g.per_node(pods) == share
    for single in pods:  # never less than any member asked
        own = g.per_node([single])
        assert (own.cpus, own.memory_mb, own.gpus) <= (share.cpus, share.memory_mb, share.gpus)
        assert own.cpus <= share.cpus and own.memory_mb <= share.memory_mb and own.gpus <= share.gpus


def test_a_gang_of_nobody_has_no_share():
    with pytest.raises(ValueError):
        g.per_node([])


@given(st.lists(st.tuples(st.integers(1, 128), st.integers(1, 1 << 20), st.integers(0, 8)), min_size=1, max_size=8))
def test_the_share_is_each_resources_maximum(requests):
    pods = [pod(f"p-{i}", cpu=str(c), memory=f"{m}Mi", gpus=n) for i, (c, m, n) in enumerate(requests)]
    assert g.per_node(pods) == g.PerNode(max(c for c, _, _ in requests), max(m for _, m, _ in requests),
                                         max(n for _, _, n in requests))


GPU_L4 = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["L4"]}]}]}}}


@pytest.mark.parametrize(("annotations", "affinities", "expected"), [
    ([{}, {}], [None, None], []),
    ([{names.ANN_QOS: "high"}] * 3, [None] * 3, []),
    ([{names.ANN_QOS: "high"}, {names.ANN_QOS: " high "}], [None, None], []),  # as Slurm would get it
    ([{names.ANN_QOS: "high"}, {names.ANN_QOS: "low"}, {}], [None] * 3,
     ["sunk.coreweave.com/qos: the gang's Pods disagree: team/p-0 say 'high'; team/p-1 say 'low'; "
      "team/p-2 say nothing"]),
    ([{names.ANN_PARTITION: "a", names.ANN_ACCOUNT: "x"}, {names.ANN_PARTITION: "b", names.ANN_ACCOUNT: "x"}],
     [None, None], ["sunk.coreweave.com/partition: the gang's Pods disagree: team/p-0 say 'a'; team/p-1 say 'b'"]),
    ([{names.ANN_EXCLUSIVE: "none"}, {names.ANN_EXCLUSIVE: "none"}, {names.ANN_EXCLUSIVE: "user"}], [None] * 3,
     ["sunk.coreweave.com/exclusive: the gang's Pods disagree: team/p-0, team/p-1 say 'none'; team/p-2 say 'user'"]),
    ([{}, {}], [GPU_L4, None], [f"{g.GPU_AFFINITY_FIELD}: the gang's Pods disagree: team/p-0 say 'L4'; "
                                f"team/p-1 say nothing"]),
    ([{}, {}], [GPU_L4, GPU_L4], []),
], ids=["none", "same", "same-once-stripped", "qos", "partition-only", "exclusive", "gpu-affinity", "gpu-same"])
def test_members_must_agree_on_what_the_one_job_says(annotations, affinities, expected):
    pairs = enumerate(zip(annotations, affinities, strict=True))
    pods = [pod(f"p-{i}", annotations=a, affinity=aff) for i, (a, aff) in pairs]
    assert [str(d) for d in g.disagreements(pods)] == expected


def test_every_seed_annotation_is_compared():
    from sunk.translate.podjob import TABLE_ANNOTATIONS

    for key in TABLE_ANNOTATIONS:
        pods = [pod("a", annotations={key: "1"}), pod("b", annotations={key: "2"})]
        assert [d.field for d in g.disagreements(pods)] == [key]


# -- the identity in the job's AdminComment ---------------------------------------------------------------
def test_the_identity_round_trips_and_tells_its_members():
    identity = PlaceholderIdentity(GangKey(NS, f"job/{JOB_UID}"), NS, size=3,
                              members=tuple(member_tag(u) for u in ("a", "b", "c")), scheduler="sched")
    text = identity.encode()
    assert text == (f"sunk-gang=job/{JOB_UID} ns=team size=3 members={member_tag('a')},{member_tag('b')},"
                    f"{member_tag('c')} sched=sched")
    assert PlaceholderIdentity.parse(text) == identity
    assert PlaceholderIdentity.parse(f"  {text}\n") == identity  # (surrounding blanks are not part of it)
    assert PlaceholderIdentity.parse(text + ": started") is None  # the old marker is no part of the format
    assert identity.includes("b") and not identity.includes("d")
    assert str(identity.unit) == f"gang:team/job/{JOB_UID}"


@pytest.mark.parametrize("admin_comment", [
    "", "sunk-gang=job/u ns=team size=3 members=", "garbage", "sunk-gang=job/u ns=team size=x members=ab12",
    "sunk-gang=job/u ns=team size=3 members=XYZ", "sunk-gang=job/u ns=team members=ab12",
    "sunk-gang=job/u ns=team size=3 members=ab12 name=p",  # (the two forms' words never mix)
    "sunk-pod=uid ns=team size=3 members=ab12", "sunk-pod=uid ns=team name=p members=ab12",
    "sunk-pod=gang:team/job/u ns=team name=p",  # (a UID never starts with gang:, a gang's key always does)
])
def test_anything_else_is_no_identity(admin_comment):
    assert PlaceholderIdentity.parse(admin_comment) is None


def test_one_parse_reads_a_single_pods_job_as_a_gang_of_one_and_a_gangs_job_as_its_gang():
    single = PlaceholderIdentity(PodKey("u"), NS, name="p", scheduler="s").encode()
    gang = PlaceholderIdentity(GangKey(NS, "podgroup/pg"), NS, size=2, members=("ab", "cd")).encode()
    assert is_placeholder(Job(id=1, admin_comment=single)) and is_placeholder(Job(id=2, admin_comment=gang))
    alone = identity_of(Job(id=1, admin_comment=single))
    assert alone == PlaceholderIdentity(PodKey("u"), NS, name="p", size=1, scheduler="s")
    assert alone.includes("u") and not alone.includes("u2")  # (its own UID, exactly: no tag)
    assert identity_of(Job(id=2, admin_comment=gang)).unit == GangKey(NS, "podgroup/pg")
    assert not is_placeholder(Job(id=3, admin_comment="user text")) and not is_placeholder(Job(id=4))


def test_a_gangs_identity_names_its_keys_namespace():
    with pytest.raises(ValueError, match="namespace"):
        PlaceholderIdentity(GangKey("a", "podgroup/pg"), "b", size=1, members=("ab",)).encode()


@pytest.mark.parametrize("field", ["extra", "comment"])
def test_an_identity_the_jobs_user_could_write_makes_no_placeholder(field):
    """Extra and Comment are the job's user's to rewrite: an identity there, however valid, is never read."""
    single = PlaceholderIdentity(PodKey("u"), NS, name="p", scheduler="s").encode()
    gang = PlaceholderIdentity(GangKey(NS, "podgroup/pg"), NS, size=2, members=("ab", "cd"), scheduler="s").encode()
    for text in (single, gang):
        forged = Job(id=1, state="RUNNING", admin_comment="", **{field: text})
        assert identity_of(forged) is None
        assert not is_placeholder(forged)
        assert is_placeholder(Job(id=1, state="RUNNING", admin_comment=text))  # (the same text where it counts)


# -- started: Slurm's word, not the placeholder's ----------------------------------------------------------
@pytest.mark.parametrize(("state", "flags", "reason", "started"), [
    ("RUNNING", (), "", True),
    ("RUNNING", (), "None", True),  # (what slurmrestd shows for no reason)
    ("RUNNING", (), "Prolog", False),  # the prolog, which locks the node, still runs
    ("RUNNING", ("CONFIGURING",), "", False),  # nodes booting or PrologSlurmctld running: before the prolog
    ("RUNNING", ("CONFIGURING",), "Prolog", False),
    ("PENDING", (), "Priority", False),
    ("PENDING", (), "", False),
    ("SUSPENDED", (), "", False),
    ("COMPLETED", (), "", False),
    ("CANCELLED", (), "", False),
])
def test_a_job_has_started_once_slurm_runs_it_past_its_prolog(state, flags, reason, started):
    assert g.has_started(Job(id=7, state=state, state_flags=flags, state_reason=reason)) is started


def test_nothing_the_jobs_user_writes_says_it_started():
    """The old ': started' marker, written by the job's user or its script, is no evidence either way."""
    identity = PlaceholderIdentity(GangKey(NS, "podgroup/pg"), NS, size=2, members=("ab", "cd"), scheduler="s").encode()
    for text in (identity + ": started", ": started"):
        assert not g.has_started(Job(id=7, state="RUNNING", state_reason="Prolog", admin_comment=identity,
                                     extra=text, comment=text))
        assert g.has_started(Job(id=7, state="RUNNING", state_reason="None", admin_comment=identity, extra=text))
    assert g.has_started(Job(id=7, state="RUNNING", admin_comment=identity))  # (no marker needed)


@pytest.mark.parametrize("bad", [
    {"key": ""}, {"key": "has space"}, {"namespace": ""}, {"scheduler": "two words"}, {"members": ()},
    {"members": ("NOTHEX",)},
])
def test_an_identity_that_would_not_read_back_is_refused(bad):
    fields = {"key": "job/u", "namespace": NS, "size": 1, "members": ("ab12",), "scheduler": "", **bad}
    key, namespace = fields.pop("key"), fields["namespace"]
    with pytest.raises(ValueError):
        PlaceholderIdentity(GangKey(namespace, key), **fields).encode()


@pytest.mark.parametrize("bad", [{"uid": ""}, {"uid": "has space"}, {"namespace": ""}, {"name": ""},
                                 {"name": "two words"}, {"scheduler": "two words"}])
def test_a_lone_pods_identity_that_would_not_read_back_is_refused(bad):
    fields = {"uid": "u", "namespace": NS, "name": "p", "scheduler": "", **bad}
    with pytest.raises(ValueError):
        PlaceholderIdentity(PodKey(fields.pop("uid")), **fields).encode()


@given(st.lists(st.uuids().map(str), min_size=1, max_size=120, unique=True))
def test_a_hundred_members_fit_a_kilobyte_and_are_all_told_apart(uids):
    identity = PlaceholderIdentity(GangKey("a" * 63, f"job/{JOB_UID}"), "a" * 63, size=len(uids),
                              members=tuple(member_tag(u) for u in uids), scheduler="sunk-scheduler")
    parsed = PlaceholderIdentity.parse(identity.encode())
    assert parsed is not None and all(parsed.includes(u) for u in uids)
    if len(uids) <= 100:
        assert len(identity.encode()) < 1024 + 100


# -- validation --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "ok"), [("none", True), ("jobset", True), ("replicated-job", True), ("job", True),
                                           ("NONE", True), ("off", False), ("", False)])
def test_the_gang_annotation_takes_only_its_values(value, ok):
    problems = [p for p in validate_pod(pod(annotations={names.ANN_GANG: value}), 30) if p.field == names.ANN_GANG]
    assert (not problems) is ok


# -- the job request ---------------------------------------------------------------------------------------
GANG = g.Gang(g.KIND_JOB, NS, "train", f"job/{JOB_UID}", job_uid=JOB_UID)


def gang_request(members, size=None, gpus_per_node=None, claimed_type="", **changes):
    settings = placeholder.Settings(**{"script": "#!/bin/bash\n", "kill_wait_seconds": 30, "scheduler": "sched",
                                       "hooks_url": "http://hooks:8000", "policy": POLICY, **changes})
    return placeholder.gang_job_request(GANG, members, settings, size=len(members) if size is None else size,
                                        hook_token="token-of-the-gang", gpus_per_node=gpus_per_node,
                                        claimed_type=claimed_type)


def env(request):
    return dict(item.split("=", 1) for item in request.environment)


def test_a_gang_is_one_job_of_one_node_per_member_with_each_resources_maximum():
    members = [pod("train-0", cpu="40", memory="8Gi", gpus=2, annotations={names.ANN_QOS: "high"}),
               pod("train-1", cpu="8", memory="32Gi", annotations={names.ANN_QOS: "high"}),
               pod("train-2", cpu="1", memory="1Gi", gpus=4, annotations={names.ANN_QOS: "high"})]
    request = gang_request(members, default_partition="batch")
    assert (request.node_count, request.cpus_per_task, request.memory_per_node, request.gpus_per_node) == \
        (3, 40, 32768, 4)
    assert request.tres_per_node == "gres/gpu:4"
    assert request.qos == "high" and request.partition == "batch" and request.requeue is False
    assert request.name == "k8s:team/job/train"
    assert request.extra is None  # (the user's: the identity is in the AdminComment)
    identity = PlaceholderIdentity.parse(request.admin_comment)
    assert identity == PlaceholderIdentity(GangKey(NS, GANG.key), NS, size=3,
                                      members=tuple(member_tag(f"uid-train-{i}") for i in range(3)),
                                      scheduler="sched")
    variables = env(request)
    assert variables["SUNK_POD_UID"] == GANG.owner and variables["SUNK_HOOK_TOKEN"] == "token-of-the-gang"
    assert variables["SUNK_GANG"] == "3" and "SUNK_EXTRA" not in variables
    assert variables["SUNK_POD"] == "Job team/train"


def test_the_gangs_environment_has_every_variable_a_single_pods_has():
    single = placeholder.job_request(pod(), placeholder.Settings(script="x", kill_wait_seconds=30, scheduler="s",
                                                                 hooks_url="u", policy=POLICY), hook_token="t")
    assert set(env(single)) | {"SUNK_GANG"} == set(env(gang_request([pod()])))


def test_members_that_disagree_get_no_job():
    members = [pod("a", annotations={names.ANN_QOS: "high"}), pod("b")]
    with pytest.raises(ValueError, match="sunk.coreweave.com/qos: the gang's Pods disagree: team/a say 'high'"):
        gang_request(members)


def test_an_invalid_member_gets_no_job():
    with pytest.raises(ValueError, match="cpu"):
        gang_request([pod("a"), pod("b", cpu="0")])


def test_a_job_never_has_fewer_nodes_than_members():
    with pytest.raises(ValueError):
        gang_request([pod("a"), pod("b")], size=1)
    with pytest.raises(ValueError):
        gang_request([])


@pytest.mark.parametrize("namespace", ["t", "a" * 63])
def test_the_largest_gang_is_the_one_whose_identity_still_fits(namespace):
    gang = g.Gang(g.KIND_JOB, namespace, "train", f"job/{JOB_UID}", job_uid=JOB_UID)
    most = g.max_members(gang, "sunk-scheduler")
    assert 90 <= most <= 110

    def identity(size):
        return PlaceholderIdentity(GangKey(namespace, gang.key), namespace, size=size, members=("0" * 8,) * size,
                              scheduler="sunk-scheduler")

    assert len(identity(most).encode()) <= g.IDENTITY_MAX < len(identity(most + 1).text())
    with pytest.raises(ValueError, match="not in the grammar"):  # (nor written: the grammar bounds the text)
        identity(most + 1).encode()


def test_a_gang_whose_leader_has_no_gpus_still_asks_for_the_typed_gres():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["NVIDIA_L4"]}]}]}}}
    members = [pod("leader", affinity=affinity), pod("worker-1", gpus=4, affinity=affinity)]
    request = gang_request(members, gpu_types={"NVIDIA_L4": "l4"})
    assert (request.gpus_per_node, request.gpu_type, request.constraints) == (4, "l4", None)
    assert request.tres_per_node == "gres/gpu:l4:4"
    untyped = gang_request(members)
    assert (untyped.gpu_type, untyped.constraints) == (None, "NVIDIA_L4")


def test_a_gang_whose_members_claim_gpus_asks_the_claims_gpus_per_node_only_from_a_scheduler_that_fills_them():
    members = [pod("a"), pod("b")]
    for member in members:
        member["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two"}]
    request = gang_request(members, gpus_per_node=2)
    assert (request.gpus_per_node, request.node_count, request.tres_per_node) == (2, 2, "gres/gpu:2")
    assert gang_request([pod("a", gpus=4), pod("b")], gpus_per_node=2).gpus_per_node == 4  # (the most any asks)
    with pytest.raises(ValueError, match="resourceClaims"):  # no mapping: the members' claims are refused
        gang_request(members)


def test_a_gang_whose_claims_are_typed_asks_for_that_type_and_refuses_an_affinity_for_another():
    members = [pod("a"), pod("b")]
    for member in members:
        member["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two"}]
    request = gang_request(members, gpus_per_node=2, claimed_type="1g.10gb")
    assert (request.gpu_type, request.tres_per_node) == ("1g.10gb", "gres/gpu:1g.10gb:2")
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["NVIDIA_L4"]}]}]}}}
    with pytest.raises(ValueError, match=r"the GPU type comes from the claims' DeviceClass \(1g.10gb\)"):
        gang_request([pod("a", affinity=affinity), pod("b", affinity=affinity)], gpus_per_node=2,
                     claimed_type="1g.10gb", gpu_types={"NVIDIA_L4": "l4"})
