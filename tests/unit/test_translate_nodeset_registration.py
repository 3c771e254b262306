"""What a NodeSet's Slurm node registers with: GRES from the Node, features and partitions from its
labels, MemSpecLimit and CPU specialisation (sunk/translate/nodeset/registration.py), and the plan's
re-registration of a Node whose GPUs or labels change."""

from __future__ import annotations

from typing import Any

import pytest
from attrs import evolve as attrs_evolve
from nodeset_fakes import node, nodeset, pod_for

from sunk.model import names
from sunk.model.slurm import Node
from sunk.translate.nodeset import pod as podlib
from sunk.translate.nodeset.plan import WHY_REREGISTER, WHY_UPDATE, Facts, Mark, decide
from sunk.translate.nodeset.registration import MAX_GPUS, Registration, gpu_gres, node_gpus, registration
from sunk.translate.nodeset.spec import read_spec

TYPES = {"A100_NVLINK_80GB": "a100", "H100": "h100"}


def gpu_node(gpus: Any = "4", gpu_class: str | None = "A100_NVLINK_80GB", **labels: str) -> dict[str, Any]:
    if gpu_class is not None:
        labels["gpu.nvidia.com/class"] = gpu_class
    return node("worker-1", "10.0.3.1", gpus=gpus, pool="gpu", **labels)


def auto(**slurm: Any) -> dict[str, Any]:
    """A NodeSet that writes no GRES by hand."""
    return nodeset(slurm={"features": ["base"], "partitions": ["gpu"], **slurm})


# ---- GRES from the Node ---------------------------------------------------------------------------------


def test_four_a100_gpus_register_gpu_a100_4_with_no_gres_written_by_hand():
    reg = registration(read_spec(auto()).spec, gpu_node(), TYPES)
    assert reg.features == ("base",)
    assert reg.conf() == "Feature=base Gres=gpu:a100:4"
    assert reg.gres_conf("g-3-1") == "NodeName=g-3-1 Name=gpu Type=a100 File=/dev/nvidia[0-3]\n"
    assert reg.problems == ()


@pytest.mark.parametrize(("gpus", "gpu_class", "gres"), [
    ("4", "H100", "gpu:h100:4"),
    ("8", "UNMAPPED_CLASS", "gpu:8"),  # a class gpuTypes does not map: untyped GPUs, still schedulable
    ("2", None, "gpu:2"),  # no class label
    ("0", "H100", ""),  # no GPUs: no GRES
    (None, "H100", ""),  # no nvidia.com/gpu at all
    (str(MAX_GPUS), "H100", f"gpu:h100:{MAX_GPUS}"),
])
def test_gres_from_count_and_class(gpus, gpu_class, gres):
    assert gpu_gres(gpu_node(gpus, gpu_class), TYPES) == (gres, [])


@pytest.mark.parametrize("gpus", ["4.5", "-1", "lots", str(MAX_GPUS + 1), "1e9", "500m", True, ["4"]])
def test_a_bad_gpu_count_is_left_out_and_said_never_raised(gpus):
    count, problem = node_gpus(gpu_node(gpus))
    assert count == 0 and problem and "nvidia.com/gpu" in problem
    reg = registration(read_spec(auto()).spec, gpu_node(gpus), TYPES)
    assert reg.gres == "" and "Gres" not in reg.conf() and len(reg.problems) == 1


@pytest.mark.parametrize("gtype", ["A100", "a100 x", "a:b", "a,b", "", "x" * 33, "gpu\n"])
def test_a_gres_type_slurm_cannot_take_registers_untyped_and_says_so(gtype):
    gres, problems = gpu_gres(gpu_node("4", "C"), {"C": gtype})
    assert gres == "gpu:4"
    assert problems and "not a GRES type" in problems[0]


def test_gres_written_by_hand_wins_over_the_nodes():
    reg = registration(read_spec(nodeset()).spec, gpu_node("4"), TYPES)  # spec.slurm.gres gpu:h100:8
    assert reg.gres == "gpu:h100:8"


def test_a_node_without_status_or_labels_registers_the_nodesets_fields():
    reg = registration(read_spec(auto()).spec, {"metadata": {"name": "w"}}, TYPES)
    assert reg == Registration(features=("base",), partitions=("gpu",))


def test_gres_conf_of_several_and_untyped_gres():
    reg = Registration(gres="gpu:4,nic:mlx:2,shard")
    assert reg.gres_conf("n1") == ("NodeName=n1 Name=gpu File=/dev/nvidia[0-3]\nNodeName=n1 Name=nic Type=mlx Count=2\n"
                                   "NodeName=n1 Name=shard Count=1\n")
    assert Registration().gres_conf("n1") == ""


@pytest.mark.parametrize(("gres", "lines"), [
    # Slurm drops a GPU without File= ("Ignoring file-less GPU") and the node goes INVAL: every GPU names its files
    ("gpu:a100:2", ["Name=gpu Type=a100 File=/dev/nvidia[0-1]"]),
    ("gpu:1", ["Name=gpu File=/dev/nvidia0"]),
    ("gpu", ["Name=gpu File=/dev/nvidia0"]),
    ("gpu:a100", ["Name=gpu Type=a100 File=/dev/nvidia0"]),  # a type without a count is one GPU, as Slurm reads it
    (f"gpu:{MAX_GPUS}", [f"Name=gpu File=/dev/nvidia[0-{MAX_GPUS - 1}]"]),
    # two types on one node: consecutive minors, in the list's order, never one file twice (slurmd's fatal)
    ("gpu:a100:2,gpu:h100:3", ["Name=gpu Type=a100 File=/dev/nvidia[0-1]", "Name=gpu Type=h100 File=/dev/nvidia[2-4]"]),
    ("nic:2,gpu:l4:1", ["Name=nic Count=2", "Name=gpu Type=l4 File=/dev/nvidia0"]),
    # a count no file range can be made of stays count-only (read_spec refuses it; Slurm would drop it)
    ("gpu:0", ["Name=gpu Count=0"]),
    (f"gpu:{MAX_GPUS + 1}", [f"Name=gpu Count={MAX_GPUS + 1}"]),
    ("gpu:a100:2K", ["Name=gpu Type=a100 Count=2K"]),
])
def test_gres_conf_names_a_gpus_device_files_and_counts_the_rest(gres, lines):
    assert Registration(gres=gres).gres_conf("n7") == "".join(f"NodeName=n7 {line}\n" for line in lines)


def test_the_registration_hash_ignores_the_gres_conf_format_so_an_upgrade_replaces_no_gpu_node():
    """The hash of a GPU node is the one operators with count-only lines gave it (pinned): else an upgrade
    would drain and replace every GPU node for a format change of a line it derives from Gres= alone."""
    reg = Registration(gres="gpu:a100:4", features=("x",))
    assert podlib.registration_hash(reg, "n1") == "5e6d0c8197"
    assert podlib.registration_hash(Registration(gres="gpu:h100:8", features=("x",)), "n1") == "c9c14ec92a"
    assert podlib.registration_hash(attrs_evolve(reg, gres="gpu:a100:8"), "n1") != "5e6d0c8197"


# ---- features and partitions from labels ---------------------------------------------------------------


def test_features_and_partitions_from_the_node_labels_the_nodeset_names():
    ns = auto(featureLabels=["example.com/rack", "zone"], partitionLabels=["example.com/pool"],
              allowedFeatures=["r12", "r13"], allowedPartitions=["train"])
    n = gpu_node("0", None, **{"example.com/rack": "r12", "zone": "base", "example.com/pool": "train"})
    reg = registration(read_spec(ns).spec, n, TYPES)
    assert reg.features == ("base", "r12")  # a value the NodeSet already has is not repeated
    assert reg.partitions == ("gpu", "train")
    assert reg.conf() == "Feature=base,r12"


@pytest.mark.parametrize("value", ["a b", "a,b", "x=y", "x" * 65, "über"])
def test_a_label_value_slurm_cannot_take_is_left_out_and_said(value):
    ns = auto(featureLabels=["rack"], partitionLabels=["example.com/pool"], allowedFeatures=["ok"],
              allowedPartitions=["ok"])
    labels = {"rack": value, "example.com/pool": value}
    reg = registration(read_spec(ns).spec, gpu_node("0", None, **labels), TYPES)
    assert reg.features == ("base",) and reg.partitions == ("gpu",)
    assert len(reg.problems) == 2 and "left out" in reg.problems[0]


# Issue 35: a kubelet may set any label of its own Node but those under node-restriction.kubernetes.io/.
TRUSTED = "node-restriction.kubernetes.io/slurm-partition"


@pytest.mark.parametrize("allowed", [None, [], ["train", "infer"]], ids=["no-allowlist", "empty", "other-values"])
def test_a_node_that_labels_itself_into_a_partition_is_left_out_of_it_and_said(allowed):
    """The attack: a compromised kubelet labels its Node into the tenants' premium partition, or claims the
    feature a tenant's job constrains on. Neither reaches Slurm; the problem names the label and the way out."""
    slurm: dict[str, Any] = {"featureLabels": ["example.com/rack"], "partitionLabels": ["example.com/pool"]}
    if allowed is not None:
        slurm.update(allowedPartitions=allowed, allowedFeatures=allowed)
    labels = {"example.com/pool": "premium-h100", "example.com/rack": "secure-enclave"}
    reg = registration(read_spec(auto(**slurm)).spec, gpu_node("0", None, **labels), TYPES)
    assert reg.partitions == ("gpu",) and reg.features == ("base",)
    assert "premium-h100" not in reg.conf() and "secure-enclave" not in reg.conf()
    pool, rack = sorted(reg.problems)
    assert "'premium-h100' is not in spec.slurm.allowedPartitions" in pool and "left out" in pool
    assert "'secure-enclave' is not in spec.slurm.allowedFeatures" in rack
    assert "node-restriction.kubernetes.io/" in pool


def test_a_label_under_the_prefix_kubelets_cannot_set_needs_no_allowlist():
    ns = auto(partitionLabels=[TRUSTED, "example.com/pool"], allowedPartitions=["train"])
    labels = {TRUSTED: "premium-h100", "example.com/pool": "train"}
    reg = registration(read_spec(ns).spec, gpu_node("0", None, **labels), TYPES)
    assert reg.partitions == ("gpu", "premium-h100", "train") and reg.problems == ()


def test_an_allowlisted_value_of_a_label_is_taken_and_the_rest_of_the_node_still_registers():
    ns = auto(partitionLabels=["a", "b"], allowedPartitions=["train"])
    reg = registration(read_spec(ns).spec, gpu_node("0", None, a="train", b="admin"), TYPES)
    assert reg.partitions == ("gpu", "train") and len(reg.problems) == 1
    assert reg.features == ("base",)


@pytest.mark.parametrize("allowed", ["train", ["a b"], [1], ["x"] * 257])
def test_an_allowlist_that_is_no_list_of_slurm_names_is_a_spec_problem(allowed):
    read = read_spec(auto(partitionLabels=["a"], allowedPartitions=allowed))
    assert [p for p in read.problems if p.startswith("spec.slurm.allowedPartitions")]


def test_a_missing_or_empty_label_adds_nothing_and_is_no_problem():
    ns = auto(featureLabels=["rack"])
    reg = registration(read_spec(ns).spec, gpu_node("0", None, rack=""), TYPES)
    assert (reg.features, reg.problems) == (("base",), ())


# ---- MemSpecLimit and CPU specialisation ----------------------------------------------------------------


def test_memspeclimit_and_cpu_specialisation_go_into_the_registration():
    spec = read_spec(auto(memSpecLimit=8192, coreSpecCount=2)).spec
    assert (spec.mem_spec_limit, spec.core_spec_count, spec.cpu_spec_list) == (8192, 2, "")
    reg = registration(spec, gpu_node(), TYPES)
    assert reg.conf() == "Feature=base Gres=gpu:a100:4 MemSpecLimit=8192 CoreSpecCount=2"
    spec = read_spec(auto(memSpecLimit=0, cpuSpecList="0-1,8")).spec
    assert podlib.slurmd_conf(spec) == "Feature=base MemSpecLimit=0 CpuSpecList=0-1,8"


@pytest.mark.parametrize(("slurm", "fragment"), [
    ({"memSpecLimit": -1}, "spec.slurm.memSpecLimit"),
    ({"memSpecLimit": "8Gi"}, "spec.slurm.memSpecLimit"),
    ({"memSpecLimit": True}, "spec.slurm.memSpecLimit"),
    ({"memSpecLimit": 1 << 31}, "spec.slurm.memSpecLimit"),
    ({"coreSpecCount": 1.5}, "spec.slurm.coreSpecCount"),
    ({"coreSpecCount": 5000}, "spec.slurm.coreSpecCount"),
    ({"cpuSpecList": "0-1 MemSpecLimit=1"}, "spec.slurm.cpuSpecList"),
    ({"cpuSpecList": "a"}, "spec.slurm.cpuSpecList"),
    ({"cpuSpecList": 3}, "spec.slurm.cpuSpecList"),
    ({"cpuSpecList": "0", "coreSpecCount": 1}, "exclude each other"),
    ({"featureLabels": ["bad key!"]}, "spec.slurm.featureLabels"),
    ({"featureLabels": "rack"}, "spec.slurm.featureLabels"),
    ({"partitionLabels": [f"k{i}" for i in range(17)]}, "spec.slurm.partitionLabels"),
    ({"partitionLabels": [3]}, "spec.slurm.partitionLabels"),
])
def test_bad_specialisation_or_label_keys_freeze_the_nodeset(slurm, fragment):
    problems = read_spec(auto(**slurm)).problems
    assert any(fragment in p for p in problems), problems


def test_the_template_hash_covers_the_new_fields_and_is_unchanged_without_them():
    base = podlib.template_hash(read_spec(auto()).spec)
    for extra in ({"memSpecLimit": 1}, {"coreSpecCount": 1}, {"cpuSpecList": "0"}, {"featureLabels": ["a"]},
                  {"partitionLabels": ["a"]}):
        assert podlib.template_hash(read_spec(auto(**extra)).spec) != base, extra
    # a NodeSet that sets none of them keeps the hash it had before they existed: no roll on upgrade
    assert base == podlib.template_hash(read_spec(auto(memSpecLimit=None, cpuSpecList="")).spec)


# ---- the plan: created with the Node's registration, re-registered when it changes -----------------------


def _facts(ns: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
           slurm: dict[str, Node] | None = None) -> Facts:
    return Facts(ns, nodes, pods, slurm=slurm if slurm is not None else {}, gpu_types=TYPES, gres_from_node=True)


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_a_created_pod_registers_its_nodes_gpus():
    plan = decide(_facts(auto(), [gpu_node()]))
    (pod,) = plan.create
    env = _env(pod)
    assert env["SUNK_SLURMD_CONF"] == "Feature=base Gres=gpu:a100:4"
    assert env["SUNK_SLURM_GRES"] == "gpu:a100:4"
    assert env["SUNK_GRES_CONF"] == "NodeName=g-3-1 Name=gpu Type=a100 File=/dev/nvidia[0-3]\n"


def test_a_pod_of_the_nodes_current_registration_is_left_alone():
    ns = auto()
    reg = registration(read_spec(ns).spec, gpu_node(), TYPES)
    pod = pod_for(ns, "worker-1", "g-3-1", reg=reg)
    plan = decide(_facts(ns, [gpu_node()], [pod], {"g-3-1": Node("g-3-1", state="IDLE")}))
    assert (plan.create, plan.mark, plan.drain, plan.delete) == ((), (), (), ())


@pytest.mark.parametrize("changed", [gpu_node("8"), gpu_node("4", "H100"), gpu_node("0")])
def test_a_node_whose_gpus_change_is_drained_and_replaced_never_while_busy(changed):
    ns = auto()
    old = pod_for(ns, "worker-1", "g-3-1", reg=registration(read_spec(ns).spec, gpu_node(), TYPES))
    busy = {"g-3-1": Node("g-3-1", state="ALLOCATED")}
    plan = decide(_facts(ns, [changed], [old], busy))
    assert plan.mark == (Mark("g-3-1", "uid-g-3-1", WHY_REREGISTER),)
    assert plan.delete == ()  # a job runs: nothing is deleted
    marked = pod_for(ns, "worker-1", "g-3-1", reg=registration(read_spec(ns).spec, gpu_node(), TYPES),
                     pending=WHY_REREGISTER)
    plan = decide(_facts(ns, [changed], [marked], busy))
    assert [d.slurm_node for d in plan.drain] == ["g-3-1"] and plan.delete == ()
    drained = {"g-3-1": Node("g-3-1", state="IDLE+DRAIN", reason="k8s: ...")}
    plan = decide(_facts(ns, [changed], [marked], drained))
    assert [d.pod for d in plan.delete] == ["g-3-1"]  # idle and drained: replaced, and re-registered


def test_gpus_back_as_they_were_unmark_the_pod():
    ns = auto()
    reg = registration(read_spec(ns).spec, gpu_node(), TYPES)
    marked = pod_for(ns, "worker-1", "g-3-1", reg=reg, pending=WHY_REREGISTER)
    plan = decide(_facts(ns, [gpu_node()], [marked], {"g-3-1": Node("g-3-1", state="ALLOCATED",
                                                                     )}))
    assert plan.mark == (Mark("g-3-1", "uid-g-3-1", None),)


def test_a_template_change_is_said_as_such_even_when_the_gpus_changed_too():
    ns = auto()
    old = pod_for(ns, "worker-1", "g-3-1", digest="0ld0ld0ld0",
                  reg=registration(read_spec(ns).spec, gpu_node(), TYPES))
    plan = decide(_facts(ns, [gpu_node("8")], [old], {"g-3-1": Node("g-3-1", state="IDLE")}))
    assert plan.mark == (Mark("g-3-1", "uid-g-3-1", WHY_UPDATE),)


def test_a_pod_made_before_registration_hashes_is_not_replaced_for_one():
    ns = auto()
    pod = pod_for(ns, "worker-1", "g-3-1")
    del pod["metadata"]["annotations"][names.ANN_REGISTRATION_HASH]
    plan = decide(_facts(ns, [gpu_node("8")], [pod], {"g-3-1": Node("g-3-1", state="IDLE")}))
    assert plan.mark == ()


def test_on_delete_does_not_replace_a_pod_for_its_nodes_gpus():
    ns = auto()
    ns["spec"]["updateStrategy"] = {"type": "OnDelete"}
    old = pod_for(ns, "worker-1", "g-3-1", reg=registration(read_spec(ns).spec, gpu_node(), TYPES))
    plan = decide(_facts(ns, [gpu_node("8")], [old], {"g-3-1": Node("g-3-1", state="IDLE")}))
    assert plan.mark == ()


def test_bad_node_input_is_a_condition_and_an_event_and_the_pod_still_comes():
    plan = decide(_facts(auto(), [gpu_node("4.5")]))
    assert len(plan.create) == 1
    cond = next(c for c in plan.conditions if c["type"] == "NodeInputValid")
    assert (cond["status"], cond["reason"]) == ("False", "BadNodeInput")
    assert "Node worker-1: allocatable nvidia.com/gpu '4.5'" in cond["message"]
    assert any(e.reason == "BadNodeInput" for e in plan.events)
    good = decide(_facts(auto(), [gpu_node()]))
    assert next(c for c in good.conditions if c["type"] == "NodeInputValid")["status"] == "True"


def test_a_self_labelled_partition_reaches_no_slurmd_pod_and_is_an_event_on_the_nodeset():
    """Issue 35 end to end in the plan: the slurmd Pod made for the Node registers without the partition its
    kubelet labelled it into (what reaches Slurm is the Pod's registration), and the NodeSet says why."""
    ns = auto(partitionLabels=["example.com/pool"])
    plan = decide(_facts(ns, [gpu_node("4", **{"example.com/pool": "premium"})]))
    (pod,) = plan.create
    env = {e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c.get("env") or []}
    assert env[podlib.ENV_PARTITIONS] == "gpu"
    cond = next(c for c in plan.conditions if c["type"] == "NodeInputValid")
    assert cond["status"] == "False" and "'premium' is not in spec.slurm.allowedPartitions" in cond["message"]
    assert any(e.type == "Warning" and "premium" in e.message for e in plan.events)


def test_without_gres_from_node_a_nodeset_registers_no_gres_it_was_not_given():
    """Off by default: a count without device files made Slurm 24.11 set the node INVAL ("gres/gpu count
    reported lower than configured"), so a Node's GPUs become GRES only when the operator says so."""
    spec = read_spec(auto()).spec
    assert registration(spec, gpu_node("4"), TYPES, gres_from_node=False).gres == ""
    assert registration(spec, gpu_node("4"), TYPES, gres_from_node=True).gres == "gpu:a100:4"
