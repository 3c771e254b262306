"""The NodeSet's spec, Slurm node names, slurmd Pods and NodeSlices (sunk/translate/nodeset/)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nodeset_fakes import node, nodeset

from sunk.model import names
from sunk.translate.nodeset import naming, slices
from sunk.translate.nodeset import pod as podlib
from sunk.translate.nodeset.slices import MAX_ENTRIES, Entry
from sunk.translate.nodeset.spec import ON_DELETE, max_unavailable, read_spec, template_problems

# ---- spec ------------------------------------------------------------------------------------------


def test_a_good_nodeset_has_no_problems_and_reads_its_defaults():
    read = read_spec(nodeset())
    assert read.problems == ()
    spec = read.spec
    assert (spec.name, spec.namespace, spec.uid, spec.generation) == ("gpu", "slurm", "uid-gpu", 3)
    assert (spec.scheme, spec.prefix, spec.strategy, spec.max_unavailable, spec.replicas) == (
        "IPv4Octets", "g", "RollingUpdate", 1, None)
    assert (spec.features, spec.gres, spec.partitions) == (("h100",), "gpu:h100:8", ("gpu",))
    assert spec.has_finalizer and not spec.deleting


def _with(**changes: Any) -> dict[str, Any]:
    ns = nodeset()
    ns["spec"].update(changes)
    return ns


@pytest.mark.parametrize(("obj", "fragment"), [
    (nodeset(spec="x"), "spec: must be an object"),
    (nodeset(name="A_b"), "metadata.name: must be a DNS label"),
    (nodeset(name="a" * 64), "metadata.name: must be a DNS label"),
    (_with(replicas=-1), "spec.replicas"),
    (_with(replicas=True), "spec.replicas"),
    (_with(nodeSelector={"a": 1}), "spec.nodeSelector"),
    (_with(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "In"}]}]}}}), "In needs at least one value"),
    (_with(naming={"scheme": "Random"}), "spec.naming.scheme"),
    (_with(naming={"scheme": "IPv4Octets"}), "needs a prefix"),
    (_with(naming={"scheme": "IPv4Octets", "prefix": "G"}), "needs a prefix"),
    (_with(naming={"scheme": "IPv4Octets", "prefix": "1g"}), "needs a prefix"),
    (_with(naming={"scheme": "IPv4Octets", "prefix": "g" * 56}), "needs a prefix"),
    (_with(naming={"scheme": "NodeName", "prefix": "g"}), "takes no prefix"),
    (_with(naming="x"), "spec.naming: must be an object"),
    (_with(slurm={"features": ["a b"]}), "spec.slurm.features"),
    (_with(slurm={"partitions": "gpu"}), "spec.slurm.partitions"),
    (_with(slurm={"gres": "gpu:h100:8 x"}), "spec.slurm.gres"),
    (_with(slurm={"gres": "gpu:0"}), "a GPU item must be"),
    (_with(slurm={"gres": "gpu:h100:257"}), "a GPU item must be"),
    (_with(slurm={"gres": "gpu:h100:2K"}), "a GPU item must be"),
    (_with(slurm={"gres": "gpu:1k"}), "a GPU item must be"),  # (Slurm: a count of 1024, not type 1k)
    (_with(slurm={"gres": "gpu:2g"}), "a GPU item must be"),
    (_with(slurm={"gres": "gpu:h100:2:x"}), "a GPU item must be"),
    (_with(slurm={"gres": "nic:2,gpu:a:b:c"}), "a GPU item must be"),
    (_with(slurm="x"), "spec.slurm: must be an object"),
    (_with(template=None), "spec.template: must be a Pod template"),
    (_with(updateStrategy={"type": "Recreate"}), "spec.updateStrategy.type"),
    (_with(updateStrategy={"rollingUpdate": {"maxUnavailable": 0}}), "maxUnavailable: must be at least 1"),
    (_with(updateStrategy={"rollingUpdate": {"maxUnavailable": "0%"}}), "maxUnavailable"),
    (_with(updateStrategy={"rollingUpdate": {"maxUnavailable": "150%"}}), "maxUnavailable"),
    (_with(updateStrategy={"rollingUpdate": {"maxUnavailable": "x"}}), "maxUnavailable"),
    (_with(updateStrategy={"rollingUpdate": {"maxUnavailable": True}}), "maxUnavailable"),
])
def test_every_problem_is_named(obj, fragment):
    problems = read_spec(obj).problems
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize(("template", "fragment"), [
    ({}, "template.spec: must be a Pod spec"),
    ({"spec": {}}, "at least one container"),
    ({"spec": {"containers": []}}, "at least one container"),
    ({"spec": {"containers": [{"name": "x", "image": "i"}]}}, "none is named 'slurmd'"),
    ({"spec": {"containers": [{"name": "slurmd"}]}}, "image: must be set"),
    ({"spec": {"containers": ["slurmd"]}}, "must be an object"),
    ({"spec": {"containers": [{"name": "Slurmd", "image": "i"}]}}, "must be a DNS label"),
    ({"spec": {"containers": [{"name": "slurmd", "image": "i"}, {"name": "slurmd", "image": "i"}]}}, "twice"),
    ({"spec": {"containers": [{"name": "slurmd", "image": "i", "env": {}}]}}, "env: must be a list"),
    ({"spec": {"nodeName": "w", "containers": [{"name": "slurmd", "image": "i"}]}}, "nodeName: is set by"),
    ({"spec": {"hostname": "w", "containers": [{"name": "slurmd", "image": "i"}]}}, "hostname: is set by"),
    ({"spec": {"restartPolicy": "Never", "containers": [{"name": "slurmd", "image": "i"}]}}, "restartPolicy"),
    ({"metadata": {"labels": {"a": 1}}, "spec": {"containers": [{"name": "slurmd", "image": "i"}]}}, "labels"),
    ({"metadata": {"labels": {names.LABEL_NODESET: "x"}}, "spec": {"containers": [{"name": "slurmd", "image": "i"}]}},
     "set by the operator"),
    ({"metadata": "x", "spec": {"containers": [{"name": "slurmd", "image": "i"}]}}, "metadata: must be an object"),
])
def test_template_problems(template, fragment):
    found = template_problems(template)
    assert any(fragment in p for p in found), found


def test_on_delete_and_percentages():
    spec = read_spec(_with(updateStrategy={"type": "OnDelete"})).spec
    assert spec.strategy == ON_DELETE
    assert read_spec(_with(updateStrategy={"rollingUpdate": {"maxUnavailable": "25%"}})).spec.max_unavailable == "25%"


@pytest.mark.parametrize(("value", "total", "want"), [
    (1, 100, 1), (5, 3, 5), ("25%", 10, 3), ("25%", 8, 2), ("1%", 10, 1), ("100%", 7, 7), ("10%", 0, 1)])
def test_max_unavailable_rounds_up_and_is_at_least_one(value, total, want):
    assert max_unavailable(value, total) == want


# ---- naming ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("obj", "want", "problem"), [
    (node("w1", "10.0.3.17"), "g-3-17", ""),
    (node("w1", "192.168.255.0"), "g-255-0", ""),
    (node("w1", None), None, "no IPv4 InternalIP"),
    (node("w1", "fd00::1"), None, "no IPv4 InternalIP"),
    (node("w1", "not-an-ip"), None, "no IPv4 InternalIP"),
])
def test_ipv4_octets(obj, want, problem):
    got = naming.slurm_node_name(read_spec(nodeset(prefix="g")).spec, obj)
    assert got.name == want and problem in got.problem


def test_the_first_ipv4_internal_ip_wins_on_dual_stack_nodes():
    obj = node("w1", "fd00::1")
    obj["status"]["addresses"].append({"type": "InternalIP", "address": "10.0.7.8"})
    obj["status"]["addresses"].append({"type": "InternalIP", "address": "10.0.9.9"})
    obj["status"]["addresses"].insert(0, {"type": "ExternalIP", "address": "1.2.3.4"})
    assert naming.internal_ipv4(obj) == "10.0.7.8"
    assert naming.internal_address(obj) == "10.0.7.8"
    assert naming.internal_address(node("w1", "fd00::1")) == "fd00::1"
    assert naming.internal_address(node("w1", None)) == ""


@pytest.mark.parametrize(("node_name", "want"), [
    ("worker-1", "worker-1"), ("worker-1.example.com", None), ("Worker", None), ("w" * 64, None)])
def test_node_name_scheme(node_name, want):
    spec = read_spec(_with(naming={"scheme": "NodeName"})).spec
    got = naming.slurm_node_name(spec, node(node_name, "10.0.0.1"))
    assert got.name == want
    assert (got.problem == "") == (want is not None)


def test_collisions_keep_the_holder_and_refuse_the_rest():
    wanted = {"a": "g-3-17", "b": "g-3-17", "c": "g-3-18", "d": "g-3-19", "e": "g-3-19"}
    assert naming.collisions(wanted) == {"g-3-17": ("a", "b"), "g-3-19": ("d", "e")}
    assert naming.winners(wanted, {"g-3-17": "b"}) == {"b": "g-3-17", "c": "g-3-18"}
    text = naming.describe(naming.collisions(wanted), {"g-3-17": "b"})
    assert "g-3-17 <- a, b (b keeps it)" in text and "g-3-19 <- d, e" in text


# ---- the Pod ---------------------------------------------------------------------------------------


def test_the_desired_pod_is_pinned_named_labelled_and_owned():
    spec = read_spec(nodeset()).spec
    digest = podlib.template_hash(spec)
    pod = podlib.desired_pod(spec, "worker-1", "g-3-17", digest)
    meta, pspec = pod["metadata"], pod["spec"]
    assert (meta["name"], meta["namespace"], pspec["nodeName"], pspec["hostname"]) == (
        "g-3-17", "slurm", "worker-1", "g-3-17")
    assert meta["labels"] == {"app.kubernetes.io/name": "slurmd", names.LABEL_NODESET: "gpu"}
    assert meta["annotations"] == {names.ANN_TEMPLATE_HASH: digest,
                                   names.ANN_REGISTRATION_HASH: podlib.registration_hash(
                                       podlib.static_registration(spec), "g-3-17")}
    assert meta["ownerReferences"] == [{"apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "NodeSet",
                                        "name": "gpu", "uid": "uid-gpu", "controller": True}]
    assert {"key": names.LOCK_KEY, "operator": "Exists"} in pspec["tolerations"]
    env = {e["name"]: e["value"] for e in pspec["containers"][0]["env"]}
    assert env == {"SUNK_SLURM_NODE_NAME": "g-3-17", "SUNK_K8S_NODE_NAME": "worker-1", "SUNK_SLURM_FEATURES": "h100",
                   "SUNK_SLURM_GRES": "gpu:h100:8", "SUNK_SLURM_PARTITIONS": "gpu",
                   "SUNK_SLURMD_CONF": "Feature=h100 Gres=gpu:h100:8",
                   "SUNK_GRES_CONF": "NodeName=g-3-17 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"}


def test_the_template_is_not_changed_and_its_own_env_and_tolerations_stay():
    ns = nodeset()
    container = ns["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "A", "value": "1"}, {"name": "SUNK_SLURM_NODE_NAME", "value": "mine"}]
    ns["spec"]["template"]["spec"]["containers"].append({"name": "munged", "image": "m"})
    ns["spec"]["template"]["spec"]["tolerations"] = [{"key": names.LOCK_KEY, "operator": "Exists"},
                                                     {"key": "x", "operator": "Exists"}]
    before = json.dumps(ns, sort_keys=True)
    spec = read_spec(ns).spec
    pod = podlib.desired_pod(spec, "worker-1", "g-3-17", "h")
    assert json.dumps(ns, sort_keys=True) == before
    env = pod["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "A", "value": "1"}
    assert [e["value"] for e in env if e["name"] == "SUNK_SLURM_NODE_NAME"] == ["g-3-17"]
    assert "env" not in pod["spec"]["containers"][1]  # only slurmd gets the Slurm node's settings
    assert pod["spec"]["tolerations"][:2] == [{"key": names.LOCK_KEY, "operator": "Exists"},
                                              {"key": "x", "operator": "Exists"}]
    assert len(pod["spec"]["tolerations"]) == 4  # no duplicate of the lock toleration


def test_the_slurmd_container_mounts_a_pod_bound_token_for_the_hook_api():
    pod = podlib.desired_pod(read_spec(nodeset()).spec, "worker-1", "g-3-17", "h")
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == podlib.HOOKS_TOKEN_VOLUME]
    assert volume["projected"]["sources"] == [{"serviceAccountToken": {
        "audience": "sunk-syncer", "expirationSeconds": 3600, "path": "token"}}]
    slurmd = pod["spec"]["containers"][0]
    assert {"name": podlib.HOOKS_TOKEN_VOLUME, "mountPath": "/var/run/secrets/sunk/hooks-token",
            "readOnly": True} in slurmd["volumeMounts"]
    assert podlib.HOOKS_TOKEN_FILE == "/var/run/secrets/sunk/hooks-token/token"


def test_a_template_with_its_own_hooks_token_keeps_it_and_other_containers_get_none():
    ns = nodeset()
    tspec = ns["spec"]["template"]["spec"]
    mine = {"name": podlib.HOOKS_TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {
        "audience": "mine", "path": "token"}}]}}
    tspec["volumes"] = [{"name": "data", "emptyDir": {}}, mine]
    tspec["containers"][0]["volumeMounts"] = [{"name": "other", "mountPath": podlib.HOOKS_TOKEN_DIR}]
    tspec["containers"].append({"name": "munged", "image": "m"})
    pod = podlib.desired_pod(read_spec(ns).spec, "worker-1", "g-3-17", "h")
    assert pod["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}, mine]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "other", "mountPath": podlib.HOOKS_TOKEN_DIR}]
    assert "volumeMounts" not in pod["spec"]["containers"][1]


def test_the_hash_covers_what_every_pod_gets_and_nothing_per_node():
    base = podlib.template_hash(read_spec(nodeset()).spec)
    assert podlib.template_hash(read_spec(nodeset()).spec) == base
    assert podlib.template_hash(read_spec(nodeset(image="sunk/slurmd:26.05")).spec) != base
    assert podlib.template_hash(read_spec(_with(slurm={"features": ["a100"]})).spec) != base
    assert podlib.template_hash(read_spec(nodeset(selector={"pool": "other"})).spec) == base
    assert podlib.template_hash(read_spec(nodeset(max_unavailable=3)).spec) == base
    assert len(base) == podlib.HASH_LENGTH


def test_slurmd_conf():
    assert podlib.slurmd_conf(read_spec(nodeset()).spec) == "Feature=h100 Gres=gpu:h100:8"
    assert podlib.slurmd_conf(read_spec(_with(slurm={})).spec) == ""


# ---- NodeSlices --------------------------------------------------------------------------------------


def entries(*names_: str) -> list[Entry]:
    return [Entry(n, n, f"w-{n}", "10.0.0.1") for n in names_]


def test_new_entries_fill_slices_in_order():
    plan = slices.assign("gpu", {}, entries(*(f"n{i:02d}" for i in range(7))), max_entries=3)
    assert [(name, [e.slurm_node for e in got]) for name, got in plan.write] == [
        ("gpu-0", ["n00", "n01", "n02"]), ("gpu-1", ["n03", "n04", "n05"]), ("gpu-2", ["n06"])]
    assert plan.delete == ()


def test_an_entry_never_moves_and_one_change_rewrites_one_slice():
    current = {"gpu-0": tuple(entries("a", "c", "e")), "gpu-1": tuple(entries("b", "d"))}
    plan = slices.assign("gpu", current, entries("a", "b", "c", "d", "e", "f"), max_entries=3)
    assert plan.write == (("gpu-1", tuple(entries("b", "d", "f"))),)
    plan = slices.assign("gpu", current, entries("a", "b", "d", "e"), max_entries=3)
    assert plan.write == (("gpu-0", tuple(entries("a", "e"))),)
    assert slices.assign("gpu", current, entries("a", "b", "c", "d", "e"), max_entries=3).empty


def test_a_changed_entry_is_rewritten_in_place_and_an_empty_slice_goes():
    current = {"gpu-0": tuple(entries("a")), "gpu-1": tuple(entries("b"))}
    moved = Entry("a", "a", "w-other", "10.9.9.9")
    plan = slices.assign("gpu", current, [moved], max_entries=3)
    assert plan.write == (("gpu-0", (moved,)),)
    assert plan.delete == ("gpu-1",)
    assert slices.assign("gpu", current, []).delete == ("gpu-0", "gpu-1")


def test_growing_slices_are_written_before_shrinking_ones():
    # gpu-0 is over the limit (say MAX_ENTRIES was lowered): its overflow goes to a new slice first.
    current = {"gpu-0": tuple(entries("a", "b", "c", "d"))}
    plan = slices.assign("gpu", current, entries("a", "b", "c", "d"), max_entries=3)
    assert [name for name, _ in plan.write] == ["gpu-1", "gpu-0"]
    assert {e.slurm_node for _, got in plan.write for e in got} == {"a", "b", "c", "d"}


def test_a_duplicate_entry_is_kept_once_and_new_slices_take_free_indexes():
    current = {"gpu-1": tuple(entries("a")), "gpu-3": tuple(entries("a", "b"))}
    plan = slices.assign("gpu", current, entries("a", "b", "c", "d"), max_entries=2)
    layout = dict(plan.write)
    assert layout["gpu-1"] == tuple(entries("a", "c")) and layout["gpu-3"] == tuple(entries("b", "d"))
    plan = slices.assign("gpu", current, entries("a", "b", "c", "d", "e", "f"), max_entries=2)
    assert sorted(dict(plan.write)) == ["gpu-0", "gpu-1", "gpu-3"]


def test_5000_entries_make_no_object_too_large():
    worst = [Entry(f"{'s' * 50}-{i // 256}-{i % 256}", f"{'s' * 50}-{i // 256}-{i % 256}", "n" * 253,
                   "fd00:1234:5678:9abc:def0:1234:5678:9abc") for i in range(5000)]
    plan = slices.assign("gpu", {}, worst)
    spec = read_spec(nodeset()).spec
    assert len(plan.write) == 10
    for name, got in plan.write:
        assert len(got) <= MAX_ENTRIES
        size = len(json.dumps(slices.slice_object(spec, name, got)))
        assert size < 512 * 1024, f"{name}: {size} bytes"


def test_the_slice_object():
    spec = read_spec(nodeset()).spec
    obj = slices.slice_object(spec, "gpu-0", entries("a"))
    assert obj["kind"] == "NodeSlice" and obj["metadata"]["labels"] == {names.LABEL_NODESET: "gpu"}
    assert obj["spec"] == {"nodeSet": "gpu", "entries": [
        {"slurmNode": "a", "pod": "a", "node": "w-a", "address": "10.0.0.1"}]}
    assert slices.entries_of(obj) == tuple(entries("a"))


@pytest.mark.parametrize("gres", ["gpu", "gpu:8", "gpu:h100", "gpu:h100:8", "gpu:h100:256", "gpu:a100:2,gpu:h100:2",
                                  "nic:2K,gpu:1", "shard:64", "gpu_like:x:y"])
def test_gres_lists_whose_gpus_can_name_device_files_are_taken_as_written(gres):
    spec = read_spec(_with(slurm={"gres": gres}))
    assert spec.problems == () and spec.spec.gres == gres
