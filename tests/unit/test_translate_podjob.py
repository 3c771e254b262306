"""Pod -> placeholder job: every annotation, every validation rule, quantities, identity."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.model import names
from sunk.model.slurm import Job, SubmitLimits
from sunk.translate.identity import PlaceholderIdentity, identity_of, is_placeholder
from sunk.translate.keys import PodKey
from sunk.translate.podjob import (
    Identity,
    backend_problems,
    constraint,
    gpu_clauses,
    pod_to_job,
    validate_pod,
)
from sunk.translate.quantity import cpus, megabytes, parse_quantity

KILL_WAIT = 30


def make_pod(annotations=None, cpu="1", memory="1Gi", gpus=None, grace=5, init=None, affinity=None):
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory), ("nvidia.com/gpu", gpus)) if v is not None}
    spec = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": affinity}}}
    return {"metadata": {"name": "web", "namespace": "team", "uid": "uid-123", "annotations": annotations or {}},
            "spec": spec}


TENANT = Identity(user_id=1001, group_id=1002, account="research")


def job(identity=TENANT, **kwargs):
    return pod_to_job(make_pod(**kwargs), identity=identity, script="#!/bin/bash\n", kill_wait_seconds=KILL_WAIT)


# -- quantities ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "value"), [
    ("1", Decimal(1)), ("500m", Decimal("0.5")), ("1.5", Decimal("1.5")), ("128Mi", Decimal(128 * 2**20)),
    ("1G", Decimal(10**9)), ("1e3", Decimal(1000)), ("960Gi", Decimal(960 * 2**30)), ("2k", Decimal(2000)),
    (".5", Decimal("0.5")), (3, Decimal(3)),
])
def test_quantities_parse_exactly(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5 Gi", "1Zi", "m", "1e", "0x10", "1_000", "١"])
def test_bad_quantities_are_refused(text):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


@given(st.integers(min_value=1, max_value=10**6))
def test_millicores_round_up_to_whole_cpus(milli):
    assert cpus(parse_quantity(f"{milli}m")) == -(-milli // 1000)


@given(st.integers(min_value=1, max_value=2**45))
def test_memory_rounds_up_to_mebibytes(nbytes):
    mb = megabytes(parse_quantity(str(nbytes)))
    assert (mb - 1) * 2**20 < nbytes <= mb * 2**20


# -- validation: each rule ----------------------------------------------------------------------------
@pytest.mark.parametrize("key", [names.ANN_PRIORITY, names.ANN_USER_ID, names.ANN_GROUP_ID, names.ANN_TIMEOUT])
@pytest.mark.parametrize("value", ["high", "1.5", "", "12abc"])
def test_integer_annotations_must_be_integers(key, value):
    problems = validate_pod(make_pod(annotations={key: value}), KILL_WAIT)
    assert [p.field for p in problems] == [key]
    assert "must be an integer" in problems[0].message


@pytest.mark.parametrize("value", ["none", "ok", "user", "mcs", "topo", "true", "false", "TRUE", " user "])
def test_known_exclusive_modes_pass(value):
    assert validate_pod(make_pod(annotations={names.ANN_EXCLUSIVE: value}), KILL_WAIT) == []


@pytest.mark.parametrize("value", ["yes", "exclusive", "", "1"])
def test_unknown_exclusive_modes_fail(value):
    problems = validate_pod(make_pod(annotations={names.ANN_EXCLUSIVE: value}), KILL_WAIT)
    assert [p.field for p in problems] == [names.ANN_EXCLUSIVE]


@pytest.mark.parametrize("key", [names.ANN_EXCLUDED_NODES, names.ANN_REQUIRED_NODES])
@pytest.mark.parametrize("value", ["", ",", "node 1", "-node"])
def test_node_lists_must_be_node_names(key, value):
    assert [p.field for p in validate_pod(make_pod(annotations={key: value}), KILL_WAIT)] == [key]


@pytest.mark.parametrize(("cpu", "memory", "bad"), [
    (None, "1Gi", "cpu"), ("0", "1Gi", "cpu"), ("1", None, "memory"), ("1", "0", "memory"), (None, None, "cpu"),
])
def test_cpu_and_memory_requests_must_be_non_zero(cpu, memory, bad):
    fields = [p.field for p in validate_pod(make_pod(cpu=cpu, memory=memory), KILL_WAIT)]
    assert f"resources.requests.{bad}" in fields


@pytest.mark.parametrize(("claims", "refused"), [
    ([{"name": "gpus", "resourceClaimTemplateName": "t"}], True),
    ([{"name": "gpus", "resourceClaimName": "mine"}], True),
    ([], False),
    (None, False),
])
def test_a_pod_with_resource_claims_is_refused_until_sunk_allocates_them(claims, refused):
    pod = make_pod()
    if claims is not None:
        pod["spec"]["resourceClaims"] = claims
    problems = validate_pod(pod, KILL_WAIT)
    assert [p.field for p in problems] == (["spec.resourceClaims"] if refused else [])
    assert not refused or "request GPUs as nvidia.com/gpu" in problems[0].message


def test_a_garbage_quantity_is_a_validation_error_not_a_crash():
    problems = validate_pod(make_pod(cpu="lots"), KILL_WAIT)
    assert "not a Kubernetes quantity" in problems[0].message


@pytest.mark.parametrize(("grace", "ok"), [(24, True), (25, False), (5, True), (None, False), (0, True)])
def test_grace_period_must_be_less_than_kill_wait_minus_5s(grace, ok):
    """The default grace period (absent: 30 s) is too long for KillWait=30."""
    problems = validate_pod(make_pod(grace=grace), KILL_WAIT)
    assert (problems == []) is ok
    if not ok:
        assert problems[0].field == "spec.terminationGracePeriodSeconds"


@pytest.mark.parametrize(("key", "value"), [
    (names.ANN_PRIORITY, "-1"), (names.ANN_PRIORITY, str(2**32)), (names.ANN_USER_ID, "4294967295"),
    (names.ANN_GROUP_ID, "-5"),
])
def test_integers_must_fit_slurms_32_bits(key, value):
    """NO_VAL and INFINITE are Slurm's own sentinels: a user value must never become one."""
    problems = validate_pod(make_pod(annotations={key: value}), KILL_WAIT)
    assert [p.field for p in problems] == [key]
    assert "between 0 and" in problems[0].message


@pytest.mark.parametrize("value", ["0", "-60", str(60 * 2**32)])
def test_timeout_must_be_positive_and_fit_slurms_minutes(value):
    assert [p.field for p in validate_pod(make_pod(annotations={names.ANN_TIMEOUT: value}), KILL_WAIT)] \
        == [names.ANN_TIMEOUT]


@pytest.mark.parametrize("key", [names.ANN_ACCOUNT, names.ANN_COMMENT, names.ANN_PARTITION, names.ANN_QOS])
def test_a_nul_character_is_refused_before_it_reaches_slurm(key):
    problems = validate_pod(make_pod(annotations={key: "a\x00b"}), KILL_WAIT)
    assert [p.field for p in problems] == [key]


@pytest.mark.parametrize(("value", "ok"), [("/data/run", True), ("relative/dir", False), ("~/x", False),
                                           ("", True)])
def test_working_directory_must_be_absolute(value, ok):
    problems = validate_pod(make_pod(annotations={names.ANN_CURRENT_WORKING_DIR: value}), KILL_WAIT)
    assert (problems == []) is ok


@pytest.mark.parametrize("gpus", ["500m", "1.5"])
def test_gpus_must_be_whole(gpus):
    fields = [p.field for p in validate_pod(make_pod(gpus=gpus), KILL_WAIT)]
    assert fields == ["resources.requests.nvidia.com/gpu"]


@pytest.mark.parametrize("grace", [-1, "5", 2.5, True])
def test_grace_period_must_be_a_non_negative_integer(grace):
    problems = validate_pod(make_pod(grace=grace), KILL_WAIT)
    assert [p.field for p in problems] == ["spec.terminationGracePeriodSeconds"]
    assert "non-negative integer" in problems[0].message


def test_all_problems_are_reported_at_once():
    pod = make_pod(annotations={names.ANN_PRIORITY: "x", names.ANN_EXCLUSIVE: "y"}, cpu=None, grace=60)
    assert len(validate_pod(pod, KILL_WAIT)) == 4


def test_pod_to_job_refuses_an_invalid_pod():
    with pytest.raises(ValueError, match="priority"):
        job(annotations={names.ANN_PRIORITY: "x"})


# -- translation: every annotation ----------------------------------------------------------------------
def test_every_annotation_is_honoured():
    request = job(annotations={
        names.ANN_ACCOUNT: "research", names.ANN_COMMENT: "A Kubernetes job", names.ANN_CONSTRAINTS: "ib",
        names.ANN_EXCLUSIVE: "user", names.ANN_EXCLUDED_NODES: "a100-092-01,a100-092-02",
        names.ANN_REQUIRED_NODES: "a100-092-04", names.ANN_PARTITION: "gpu", names.ANN_PREFER: "fast",
        names.ANN_PRIORITY: "100", names.ANN_QOS: "high", names.ANN_RESERVATION: "test",
        names.ANN_CURRENT_WORKING_DIR: "/path/to/use",
        names.ANN_TIMEOUT: "123",
    })
    assert (request.account, request.comment, request.constraints) == ("research", "A Kubernetes job", "ib")
    assert request.shared == "user"
    assert request.excluded_nodes == ("a100-092-01", "a100-092-02")
    assert request.required_nodes == ("a100-092-04",)
    assert (request.partition, request.prefer, request.priority, request.qos) == ("gpu", "fast", 100, "high")
    assert request.reservation == "test"
    assert (request.user_id, request.group_id) == (1001, 1002)
    assert request.working_directory == "/path/to/use"
    assert request.time_limit == 3  # 123 s -> 3 minutes, rounded up
    assert request.requeue is False


def test_defaults_are_no_limits():
    request = job()
    assert request.time_limit is None and request.shared is None and request.partition is None
    assert request.working_directory == "/tmp"


def test_who_the_job_runs_as_is_the_identity_given_never_the_annotations():
    """The identity policy (test_translate_policy.py) reads user-id, group-id and account; pod_to_job takes its
    answer, so no caller can submit what a Pod asked for without the policy's word."""
    request = job(identity=Identity(user_id=2000, group_id=2001), annotations={
        names.ANN_USER_ID: "0", names.ANN_GROUP_ID: "0", names.ANN_ACCOUNT: "root"})
    assert (request.user_id, request.group_id, request.account) == (2000, 2001, None)


@pytest.mark.parametrize(("value", "shared"), [("none", "none"), ("ok", "oversubscribe"), ("user", "user"),
                                                ("mcs", "mcs"), ("topo", "topo"), ("true", "none"),
                                                ("false", None)])
def test_exclusive_maps_onto_slurm_shared(value, shared):
    assert job(annotations={names.ANN_EXCLUSIVE: value}).shared == shared


def test_resources_become_cpus_megabytes_and_gpus():
    request = job(cpu="1500m", memory="1500Mi", gpus="4")
    assert (request.cpus_per_task, request.memory_per_node, request.gpus_per_node) == (2, 1500, 4)
    assert request.tres_per_node == "gres/gpu:4"


def test_init_containers_count_as_kube_scheduler_counts_them():
    request = job(cpu="1", memory="1Gi", init={"cpu": "3", "memory": "512Mi"})
    assert (request.cpus_per_task, request.memory_per_node) == (3, 1024)


def test_hostlist_ranges_survive_the_comma_split():
    assert job(annotations={names.ANN_EXCLUDED_NODES: "node[1,3],node5"}).excluded_nodes == ("node[1,3]", "node5")


# -- GPU class affinity -> constraint ------------------------------------------------------------------
def term(*expressions):
    return {"matchExpressions": list(expressions)}


def expr(key, operator, *values):
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(("terms", "clauses"), [
    ([term(expr("gpu.nvidia.com/class", "In", "A100_PCIE_80GB"))], (("A100_PCIE_80GB",),)),
    ([term(expr("gpu.nvidia.com/model", "In", "H100", "A100", "H100"))], (("H100", "A100"),)),
    ([term(expr("gpu.nvidia.com/class", "NotIn", "A100"))], ()),
    ([term(expr("kubernetes.io/hostname", "In", "x"))], ()),
    ([term(expr("gpu.nvidia.com/class", "In", "A")), term(expr("gpu.nvidia.com/class", "In", "B"))], ()),
])
def test_gpu_affinity_clauses(terms, clauses):
    assert gpu_clauses(make_pod(affinity=terms)) == clauses


@pytest.mark.parametrize(("annotation", "clauses", "expected"), [
    (None, (), None), ("ib", (), "ib"), (None, (("H100",),), "H100"), ("ib", (("H100",),), "ib&H100"),
    (None, (("H100", "A100"),), "(H100|A100)"), ("ib|eth", (("H100",),), "(ib|eth)&H100"),
    (None, (("H100",), ("NVL",)), "H100&NVL"), ("ib&fast", (("H100", "A100"),), "ib&fast&(H100|A100)"),
    ("(ib|eth)&fast", (("H100",),), "(ib|eth)&fast&H100"), ("a|b", (), "a|b"),
])
def test_constraint_combination(annotation, clauses, expected):
    assert constraint(annotation, clauses) == expected


def test_square_brackets_are_never_generated():
    """Slurm 24.11 placed ``[A|B]`` on a node with neither feature; ``(A|B)`` chose right."""
    assert "[" not in (constraint("ib", (("H100", "A100", "B200"),)) or "")


def test_an_annotation_that_ors_its_own_groups_cannot_take_a_gpu_clause():
    """Slurm reads constraints left to right and cannot nest groups: refuse, never mis-place."""
    with pytest.raises(ValueError, match="ORs groups at its top level"):
        constraint("(a&b)|c", (("H100",),))
    problems = validate_pod(make_pod(annotations={names.ANN_CONSTRAINTS: "(a&b)|c"},
                                     affinity=[term(expr("gpu.nvidia.com/class", "In", "H100"))]), KILL_WAIT)
    assert [p.field for p in problems] == [names.ANN_CONSTRAINTS]


def test_one_clause_per_gpu_expression_in_the_job():
    request = job(affinity=[term(expr("gpu.nvidia.com/class", "In", "H100", "A100"),
                                 expr("gpu.nvidia.com/model", "In", "SXM"))])
    assert request.constraints == "(H100|A100)&SXM"


def test_affinity_constraint_reaches_the_job():
    request = job(annotations={names.ANN_CONSTRAINTS: "ib"},
                  affinity=[term(expr("gpu.nvidia.com/class", "In", "A100_PCIE_80GB"))])
    assert request.constraints == "ib&A100_PCIE_80GB"


def test_a_feature_slurm_cannot_take_is_a_validation_error():
    problems = validate_pod(make_pod(affinity=[term(expr("gpu.nvidia.com/class", "In", "bad name"))]), KILL_WAIT)
    assert problems and problems[0].field == "spec.affinity.nodeAffinity"


# -- identity in AdminComment --------------------------------------------------------------------------
_token = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40)


_label = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")


@given(_label, _label, st.lists(_label, min_size=1, max_size=4).map(".".join), st.one_of(st.just(""), _label))
def test_identity_round_trips(uid, namespace, name, scheduler):
    identity = PlaceholderIdentity(PodKey(uid), namespace, name=name, scheduler=scheduler)
    assert PlaceholderIdentity.parse(identity.encode()) == identity


@given(_token, _token, _token, st.one_of(st.just(""), _token))
def test_an_identity_is_written_only_if_it_reads_back_as_itself(uid, namespace, name, scheduler):
    identity = PlaceholderIdentity(PodKey(uid), namespace, name=name, scheduler=scheduler)
    try:
        text = identity.encode()
    except ValueError:
        return
    assert PlaceholderIdentity.parse(text) == identity


@pytest.mark.parametrize("admin_comment", [
    "", "hello", '{"a": 1}', "sunk-pod=x", "sunk-pod=a ns=b", ": started",
    "sunk-pod=a ns=b name=c: started",  # the old marker is no part of the format: the whole text must be one
    "sunk-pod=a ns=b name=c sched=s: started",
])
def test_other_jobs_are_not_placeholders(admin_comment):
    assert PlaceholderIdentity.parse(admin_comment) is None


def test_the_job_carries_the_pods_identity_in_its_admin_comment_and_leaves_its_extra_alone():
    """AdminComment is written by Slurm's super users only; Extra is the job's user's to rewrite."""
    request = job()
    assert PlaceholderIdentity.parse(request.admin_comment) == PlaceholderIdentity(PodKey("uid-123"), "team",
                                                                                   name="web")
    assert request.extra is None
    scoped = pod_to_job(make_pod(), identity=TENANT, script="", kill_wait_seconds=KILL_WAIT, scheduler="sunk-a")
    assert PlaceholderIdentity.parse(scoped.admin_comment).scheduler == "sunk-a"
    assert scoped.extra is None
    assert job().name == "k8s:team/web"


def test_a_job_with_a_valid_identity_in_its_extra_or_comment_only_is_not_a_placeholder():
    """Its user could write either: a Pod's identity there must neither adopt nor cancel anything."""
    text = PlaceholderIdentity(PodKey("uid-123"), "team", name="web", scheduler="sunk-a").encode()
    for forged in (Job(id=1, state="RUNNING", extra=text), Job(id=1, state="RUNNING", comment=text),
                   Job(id=1, state="RUNNING", extra=text, comment=text, admin_comment="")):
        assert identity_of(forged) is None
        assert not is_placeholder(forged)
    assert identity_of(Job(id=1, state="RUNNING", admin_comment=text)) == PlaceholderIdentity.parse(text)
    assert is_placeholder(Job(id=1, admin_comment=text))


# -- typed GPUs (--gpu-types, SUNK's gpuTypes) -------------------------------------------------------------
GPU_TYPES = {"NVIDIA_L4": "l4", "H100_SXM": "h100", "H100_PCIE": "h100"}


def gpu_term(*expressions):
    return [{"matchExpressions": [{"key": key, "operator": op, "values": list(values)}
                                  for key, op, values in expressions]}]


@pytest.mark.parametrize(("affinity", "gpus", "gpu_type", "constraints"), [
    (gpu_term(("gpu.nvidia.com/class", "In", ["NVIDIA_L4"])), 2, "l4", None),  # a type, not a feature
    (gpu_term(("gpu.nvidia.com/model", "In", ["H100_SXM"])), 1, "h100", None),
    (gpu_term(("gpu.nvidia.com/model", "In", ["H100_SXM", "H100_PCIE"])), 1, "h100", None),  # both are h100
    (gpu_term(("gpu.nvidia.com/class", "In", ["NVIDIA_L4", "H100_SXM"])), 1, None, "(NVIDIA_L4|H100_SXM)"),
    (gpu_term(("gpu.nvidia.com/class", "In", ["B200"])), 1, None, "B200"),  # not mapped: a feature, as before
    (gpu_term(("gpu.nvidia.com/class", "In", ["NVIDIA_L4"]), ("gpu.nvidia.com/model", "In", ["B200"])), 1, "l4",
     "B200"),
    (gpu_term(("gpu.nvidia.com/class", "In", ["NVIDIA_L4"]), ("gpu.nvidia.com/model", "In", ["H100_SXM"])), 1,
     None, "NVIDIA_L4&H100_SXM"),  # two types cannot both hold: left to features (no node has both)
    (gpu_term(("gpu.nvidia.com/class", "In", ["NVIDIA_L4"])), None, None, "NVIDIA_L4"),  # no GPUs asked: a feature
], ids=["class", "model", "two-models-one-type", "two-types", "unmapped", "typed-and-feature", "contradiction",
        "no-gpus"])
def test_gpu_affinity_names_a_gres_type_through_the_mapping(affinity, gpus, gpu_type, constraints):
    request = pod_to_job(make_pod(gpus=str(gpus) if gpus else None, affinity=affinity), identity=TENANT, script="x",
                         kill_wait_seconds=KILL_WAIT, gpu_types=GPU_TYPES)
    assert (request.gpu_type, request.constraints) == (gpu_type, constraints)
    if gpu_type:
        assert request.tres_per_node == f"gres/gpu:{gpu_type}:{gpus}"


def test_without_a_mapping_gpu_affinity_stays_a_feature():
    request = job(gpus="1", affinity=gpu_term(("gpu.nvidia.com/class", "In", ["NVIDIA_L4"])))
    assert (request.gpu_type, request.constraints, request.tres_per_node) == (None, "NVIDIA_L4", "gres/gpu:1")


def test_the_typed_request_keeps_the_constraints_annotation():
    request = pod_to_job(make_pod(gpus="1", annotations={names.ANN_CONSTRAINTS: "ib|eth"},
                                  affinity=gpu_term(("gpu.nvidia.com/class", "In", ["NVIDIA_L4"]))),
                         identity=TENANT, script="x", kill_wait_seconds=KILL_WAIT, gpu_types=GPU_TYPES)
    assert (request.gpu_type, request.constraints) == ("l4", "ib|eth")


# -- what the Slurm backend cannot submit ---------------------------------------------------------------

def test_a_pod_asking_for_what_the_backend_cannot_submit_is_refused_with_the_backends_reason():
    limits = SubmitLimits(prefer="no prefer here", shared=(("topo", "no topo here"),))
    asks = {"metadata": {"annotations": {names.ANN_PREFER: "fast", names.ANN_EXCLUSIVE: "topo"}}, "spec": {}}
    problems = {p.field: str(p) for p in backend_problems(asks, limits)}
    assert set(problems) == {names.ANN_PREFER, names.ANN_EXCLUSIVE}
    assert "no prefer here" in problems[names.ANN_PREFER] and "no topo here" in problems[names.ANN_EXCLUSIVE]
    assert backend_problems(asks, SubmitLimits()) == []  # REST: everything
    other = {"metadata": {"annotations": {names.ANN_PREFER: " ", names.ANN_EXCLUSIVE: "user"}}, "spec": {}}
    assert backend_problems(other, limits) == []  # an empty prefer asks nothing; user is passed
