"""sunk/translate/dra.py: a Pod's ResourceClaims filled with exactly the devices Slurm's GRES indices name, by one
explicit rule per driver; what Slurm cannot decide refused with a message; Slurm and the driver disagreeing is a
Mismatch, never a guess."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sunk.model.slurm import GresGrant
from sunk.translate import dra

DRIVER = "gpu.example.com"
BY_INDEX = dra.DeviceMapping(DRIVER, frozenset({"gpu.example.com"}), attribute="index")
BY_NAME = dra.DeviceMapping("test-driver.cdi.k8s.io", frozenset({"test"}), name_template="device-{index:02d}")


def resource_slice(node: str, devices: list[dict[str, Any]], *, driver: str = DRIVER, pool: str = "",
                   generation: int = 1, count: int = 1) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{pool}"},
            "spec": {"driver": driver, "nodeName": node, "devices": devices,
                     "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count}}}


def gpu(name: str, index: int, **attributes: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "attributes": {"index": {"int": index}, **attributes}}


def claim(name: str, *requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": list(requests), **devices}}}


def request(name: str, count: int | None = 1, device_class: str = "gpu.example.com", **exactly: Any) -> dict[str, Any]:
    body = {"deviceClassName": device_class, **exactly}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


FOUR = resource_slice("n1", [gpu(f"gpu-{i}", i) for i in (3, 1, 0, 2)])  # (listed out of index order)


def test_each_index_slurm_gave_names_the_device_whose_attribute_holds_it():
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", request("gpus", 2)), BY_INDEX)
    results = dra.allocation_results(requests, [GresGrant("gpu", "a100", 2, (1, 3))], devices, BY_INDEX, "n1")
    assert results == {"c": [{"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-1"},
                             {"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-3"}]}


def test_a_name_template_maps_the_upstream_test_drivers_devices():
    slice_ = resource_slice("real-1", [{"name": f"device-{i:02d}"} for i in range(4)], driver=BY_NAME.driver)
    devices = dra.node_devices([slice_], "real-1", BY_NAME.driver)
    requests = dra.claim_requests(claim("c", request("r", 1, "test")), BY_NAME)
    results = dra.allocation_results(requests, [GresGrant("gpu", "", 1, (2,))], devices, BY_NAME, "real-1")
    assert results == {"c": [{"request": "r", "driver": BY_NAME.driver, "pool": "real-1", "device": "device-02"}]}


def test_devices_are_dealt_to_claims_and_requests_in_order():
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = (*dra.claim_requests(claim("a", request("one", 1), request("two", 2)), BY_INDEX),
                *dra.claim_requests(claim("b", request("x", None)), BY_INDEX))  # (count defaults to 1)
    assert dra.devices_wanted(requests) == 4
    results = dra.allocation_results(requests, [GresGrant("gpu", "", 4, (0, 1, 2, 3))], devices, BY_INDEX, "n1")
    assert isinstance(results, dict)
    assert [(r["request"], r["device"]) for r in results["a"]] == [("one", "gpu-0"), ("two", "gpu-1"), ("two", "gpu-2")]
    assert [(r["request"], r["device"]) for r in results["b"]] == [("x", "gpu-3")]


def test_indices_of_several_gres_types_count_together_and_other_gres_not_at_all():
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", request("r", 2)), BY_INDEX)
    grants = [GresGrant("gpu", "a100", 1, (2,)), GresGrant("nic", "", 1, (0,)), GresGrant("gpu", "h100", 1, (0,))]
    results = dra.allocation_results(requests, grants, devices, BY_INDEX, "n1")
    assert isinstance(results, dict) and [r["device"] for r in results["c"]] == ["gpu-0", "gpu-2"]


def test_a_job_record_without_its_indices_is_the_jobs_doing_not_the_nodes():
    """A GRES without File= records no index; so does a pending job its Slurm user edited to such a GRES: which
    devices is not known, and a tenant's edit must not drain the node."""
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", request("r", 2)), BY_INDEX)
    result = dra.allocation_results(requests, [GresGrant("gpu", "", 2)], devices, BY_INDEX, "n1")
    assert isinstance(result, dra.JobUnfit) and "names the index of 0 of its 2 gpu" in result.message


@pytest.mark.parametrize(("grants", "detail"), [
    ([GresGrant("gpu", "", 2, (0, 7))],
     f"gpu index 7 names 0 devices of driver {DRIVER} (attribute {DRIVER}/index=7), not one"),
])
def test_slurm_and_the_driver_disagreeing_is_a_mismatch_naming_how(grants, detail):
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", request("r", 2)), BY_INDEX)
    result = dra.allocation_results(requests, grants, devices, BY_INDEX, "n1")
    assert result == dra.Mismatch("n1", detail)
    assert isinstance(result, dra.Mismatch) and "disagree on node n1" in result.message


@pytest.mark.parametrize("grants", [[GresGrant("gpu", "", 1, (0,))], [GresGrant("gpu", "", 3, (0, 1, 2))], []])
def test_claims_that_ask_for_another_count_than_the_job_holds_are_the_pods_doing_not_the_nodes(grants):
    """A claim deleted and made again with another count since the job was submitted: no Mismatch, which would
    drain the node for what a Pod's author wrote."""
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", request("r", 2)), BY_INDEX)
    result = dra.allocation_results(requests, grants, devices, BY_INDEX, "n1")
    held = sum(g.count for g in grants)
    assert isinstance(result, dra.JobUnfit) and f"ask for 2 device(s), but its Slurm job holds {held}" in \
        result.message


def test_an_index_naming_two_devices_is_a_mismatch_not_a_choice():
    twice = resource_slice("n1", [gpu("a", 0), gpu("b", 0)])
    requests = dra.claim_requests(claim("c", request("r", 1)), BY_INDEX)
    result = dra.allocation_results(requests, [GresGrant("gpu", "", 1, (0,))], dra.node_devices([twice], "n1", DRIVER),
                                    BY_INDEX, "n1")
    assert isinstance(result, dra.Mismatch) and "names 2 devices" in result.detail


def test_an_attribute_of_another_type_names_no_device():
    odd = resource_slice("n1", [{"name": "s", "attributes": {"index": {"string": "0"}}},
                                {"name": "b", "attributes": {"index": {"bool": False}}}])
    requests = dra.claim_requests(claim("c", request("r", 1)), BY_INDEX)
    result = dra.allocation_results(requests, [GresGrant("gpu", "", 1, (0,))], dra.node_devices([odd], "n1", DRIVER),
                                    BY_INDEX, "n1")
    assert isinstance(result, dra.Mismatch)


def test_a_qualified_attribute_is_read_as_written_and_an_unqualified_one_in_the_drivers_domain():
    slice_ = resource_slice("n1", [{"name": "g", "attributes": {"index": {"int": 0}, "other.io/minor": {"int": 5},
                                                                "uuid": {"string": "GPU-1"}}}])
    (device,) = dra.node_devices([slice_], "n1", DRIVER)
    assert device.attributes == {f"{DRIVER}/index": 0, "other.io/minor": 5, f"{DRIVER}/uuid": "GPU-1"}
    by_minor = dra.DeviceMapping(DRIVER, frozenset({"c"}), attribute="other.io/minor")
    assert by_minor.qualified_attribute == "other.io/minor" and BY_INDEX.qualified_attribute == f"{DRIVER}/index"
    requests = dra.claim_requests(claim("x", request("r", 1, "c")), by_minor)
    assert dra.allocation_results(requests, [GresGrant("gpu", "", 1, (5,))], (device,), by_minor, "n1") == {
        "x": [{"request": "r", "driver": DRIVER, "pool": "n1", "device": "g"}]}


def test_only_the_nodes_own_slices_of_the_driver_count():
    other_node = resource_slice("n2", [gpu("far", 0)])
    other_driver = resource_slice("n1", [gpu("nic", 0)], driver="nic.example.com")
    assert [d.name for d in dra.node_devices([FOUR, other_node, other_driver], "n1", DRIVER)] == [
        "gpu-3", "gpu-1", "gpu-0", "gpu-2"]


def test_of_a_pool_only_the_newest_generation_counts_and_only_once_complete():
    old = resource_slice("n1", [gpu("old", 0)], pool="p", generation=1)
    new_half = resource_slice("n1", [gpu("new-0", 0)], pool="p", generation=2, count=2)
    assert dra.node_devices([old, new_half], "n1", DRIVER) == ()  # (the new generation is being written)
    new_rest = resource_slice("n1", [gpu("new-1", 1)], pool="p", generation=2, count=2)
    assert [d.name for d in dra.node_devices([new_rest, old, new_half], "n1", DRIVER)] == ["new-1", "new-0"]


@pytest.mark.parametrize(("bad", "why"), [
    (claim("c", {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.example.com"}]}),
     "firstAvailable is not supported"),
    (claim("c", request("r", 1, "nic.example.com")), "DeviceClass 'nic.example.com' is not one Slurm allocates"),
    (claim("c", request("r", None, allocationMode="All")), "allocationMode All is not supported"),
    (claim("c", request("r", 1, selectors=[{"cel": {"expression": "true"}}])), "selectors are not supported"),
    (claim("c", request("r", 1, adminAccess=True)), "adminAccess is not supported"),
    (claim("c", request("r", 0)), "count 0 is not a positive integer"),
    (claim("c", request("r", -1)), "count -1 is not a positive integer"),
    (claim("c", request("r", True)), "count True is not a positive integer"),
    (claim("c", request("r", "2")), "count '2' is not a positive integer"),
    (claim("c"), "no device requests"),
    (claim("c", request("r", 1), constraints=[{"matchAttribute": "x/y"}]), "constraints are not supported"),
    (claim("c", request("ok", 1), request("r", 1, "other")), "DeviceClass 'other'"),  # (a claim is all Slurm's or not)
])
def test_what_slurm_cannot_decide_is_refused_naming_the_claim_and_why(bad, why):
    with pytest.raises(dra.UnsupportedClaim, match="ResourceClaim c") as raised:
        dra.claim_requests(bad, BY_INDEX)
    assert why in str(raised.value)


def test_the_claims_status_is_allocated_on_the_node_and_reserved_for_the_pod():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}}
    results = [{"request": "r", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
    status = dra.claim_status(results, "n1", pod)
    assert status == {
        "allocation": {"devices": {"results": results},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u-1"}]}
    allocated = {"status": status}
    assert dra.same_allocation(allocated, results, "n1")
    assert not dra.same_allocation(allocated, results, "n2")
    assert not dra.same_allocation(allocated, [{**results[0], "device": "gpu-1"}], "n1")
    assert not dra.same_allocation({}, results, "n1")


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"driver": "", "device_classes": {"c"}, "attribute": "index"}, "names its driver"),
    ({"driver": "d", "device_classes": {"c"}}, "exactly one of attribute and name_template"),
    ({"driver": "d", "device_classes": {"c"}, "attribute": "i", "name_template": "g-{index}"}, "exactly one"),
    ({"driver": "d", "device_classes": set(), "attribute": "index"}, "at least one DeviceClass"),
    ({"driver": "d", "device_classes": {"c"}, "name_template": "gpu"}, "it must use {index} and nothing else"),
    ({"driver": "d", "device_classes": {"c"}, "name_template": "{index}-{other}"}, "must use {index}"),
    ({"driver": "d", "device_classes": {"c"}, "name_template": "{index"}, "device name template"),
    ({"driver": "d", "device_classes": {"c"}, "name_template": "{index:q}"}, "device name template"),
    ({"driver": "d", "device_classes": {"c"}, "attribute": "i", "gres_types": [("other", "a100")]},
     "each typed DeviceClass is one of device_classes"),
    ({"driver": "d", "device_classes": {"c"}, "attribute": "i", "gres_types": [("c", "a100"), ("c", "h100")]},
     "with one GRES type"),
    ({"driver": "d", "device_classes": {"c"}, "attribute": "i", "gres_types": [("c", "a:100")]},
     "is not a Slurm GRES type"),
])
def test_a_mapping_is_one_explicit_rule(kwargs, why):
    with pytest.raises(ValueError, match=why.replace("{", r"\{").replace("}", r"\}")):
        dra.DeviceMapping(**kwargs)


def allocated(name: str, node: str, *devices: str, reserved_for: str | None = None, namespace: str = "ns",
              driver: str = DRIVER) -> dict[str, Any]:
    status: dict[str, Any] = {"allocation": {
        "devices": {"results": [{"request": "r", "driver": driver, "pool": node, "device": d} for d in devices]},
        "nodeSelector": dra.node_selector(node)}}
    if reserved_for is not None:
        status["reservedFor"] = [{"resource": "pods", "name": reserved_for, "uid": f"uid-{reserved_for}"}]
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {}, "status": status}


def test_a_device_another_claim_holds_on_the_node_is_a_mismatch_naming_that_claim():
    """kube-scheduler filled it for a Pod sunk did not place: Slurm counts the device free and gave it again."""
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    claims = [allocated("theirs", "n1", "gpu-3", reserved_for="web"), allocated("mine", "n1", "gpu-1"),
              allocated("elsewhere", "n2", "gpu-1"), allocated("other-driver", "n1", "gpu-1", driver="x.example.com")]
    held = dra.held_devices(claims, "n1", DRIVER, besides=frozenset({"ns/mine"}))
    assert held == {(DRIVER, "n1", "gpu-3"): "ns/theirs"}
    requests = dra.claim_requests(claim("mine", request("gpus", 2)), BY_INDEX)
    found = dra.allocation_results(requests, [GresGrant("gpu", "", 2, (1, 3))], devices, BY_INDEX, "n1", held)
    assert isinstance(found, dra.Mismatch)
    assert "index 3 names device gpu-3, which another ResourceClaim holds" in found.message
    assert "theirs" not in found.message  # (another tenant's claim is not named to this Pod or in Slurm)
    releasing = dra.allocation_results(requests, [GresGrant("gpu", "", 2, (1, 3))], devices, BY_INDEX, "n1", {},
                                       held)
    assert isinstance(releasing, dra.Releasing) and "still held by a ResourceClaim being released" in releasing.message
    assert "theirs" not in releasing.message
    assert isinstance(dra.allocation_results(requests, [GresGrant("gpu", "", 2, (0, 1))], devices, BY_INDEX, "n1",
                                             held), dict)


TAINTED = resource_slice("n1", [gpu("gpu-0", 0), {**gpu("gpu-1", 1), "taints": [
    {"key": "example.com/ecc", "value": "failed", "effect": "NoExecute"},
    {"key": "example.com/note", "effect": "None"}]}])


@pytest.mark.parametrize(("tolerations", "usable"), [
    ([], False),
    ([{"key": "example.com/ecc", "operator": "Exists"}], True),
    ([{"key": "example.com/ecc", "value": "failed"}], True),  # operator Equal by default
    ([{"key": "example.com/ecc", "value": "other"}], False),
    ([{"key": "example.com/ecc", "operator": "Exists", "effect": "NoSchedule"}], False),
    ([{"operator": "Exists"}], True),  # every taint
], ids=["none", "exists", "equal", "other-value", "other-effect", "everything"])
def test_a_tainted_device_slurm_gave_is_a_mismatch_unless_the_request_tolerates_it(tolerations, usable):
    """Only NoSchedule and NoExecute taints keep a device from a claim; ``None`` and unknown effects inform."""
    devices = dra.node_devices([TAINTED], "n1", DRIVER)
    assert [str(t) for t in devices[1].taints] == ["example.com/ecc=failed:NoExecute"]
    requests = dra.claim_requests(claim("c", request("gpus", 1, tolerations=tolerations)), BY_INDEX)
    found = dra.allocation_results(requests, [GresGrant("gpu", "", 1, (1,))], devices, BY_INDEX, "n1")
    assert isinstance(found, dict) is usable
    if not usable:
        assert isinstance(found, dra.Mismatch) and "gpu-1, tainted example.com/ecc=failed:NoExecute" in found.message
    assert isinstance(dra.allocation_results(requests, [GresGrant("gpu", "", 1, (0,))], devices, BY_INDEX, "n1"), dict)


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"}}


@pytest.mark.parametrize(("claim_", "why"), [
    ({"metadata": {"name": "c"}, "spec": {}}, None),
    (allocated("c", "n1", "gpu-0", reserved_for="p"), None),  # sunk's own earlier write for this Pod
    (allocated("c", "n1", "gpu-0", reserved_for="q"), "ResourceClaim c is reserved for pods/q: a claim shared"),
    (allocated("c", "n1", "gpu-0"), "ResourceClaim c is allocated already, not by sunk"),
], ids=["fresh", "own", "shared", "filled-by-another"])
def test_only_a_claim_no_one_else_filled_or_holds_is_sunks_to_fill(claim_, why):
    found = dra.claim_refusal(claim_, POD)
    assert (found is None) if why is None else (found is not None and found.startswith(why))


@pytest.mark.parametrize(("selector", "node"), [
    (dra.node_selector("n1"), "n1"),
    ({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]},
     None),
    ({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}, None),
    (None, None),
], ids=["one-node", "two-nodes", "by-label", "none"])
def test_a_claim_is_on_a_node_only_when_its_allocation_names_that_one_node(selector, node):
    claim_ = {"metadata": {"name": "c"}, "status": {"allocation": {"nodeSelector": selector}} if selector else {}}
    assert dra.allocated_on(claim_) == node


def pod_with(*entries: dict[str, Any], made: dict[str, str] | None = None) -> dict[str, Any]:
    status = {"resourceClaimStatuses": [{"name": k, "resourceClaimName": v} for k, v in (made or {}).items()]}
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"}, "spec": {"resourceClaims": list(entries)},
            "status": status}


def test_a_pods_claims_are_named_directly_or_once_their_template_made_them():
    pod_ = pod_with({"name": "a", "resourceClaimName": "shared"}, {"name": "b", "resourceClaimTemplateName": "t"},
                    {"name": "c", "resourceClaimTemplateName": "t"}, made={"b": "p-b-x7k2"})
    assert dra.pod_claims(pod_) == (dra.PodClaim("a", "shared"), dra.PodClaim("b", "p-b-x7k2"),
                                    dra.PodClaim("c", None))
    assert dra.pod_claims({"metadata": {}, "spec": {}}) == ()


def test_a_claim_plan_asks_slurm_for_every_claims_devices():
    pod_ = pod_with({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimTemplateName": "t"},
                    made={"b": "two"})
    claims = {"one": claim("one", request("r", 1)), "two": claim("two", request("r", 2))}
    plan = dra.claim_plan(pod_, claims, BY_INDEX)
    assert plan.gpus == 3 and plan.refused is None and plan.waiting == ()
    assert [(r.claim, r.count) for r in plan.requests] == [("one", 1), ("two", 2)]
    assert dra.claim_plan({"metadata": {}, "spec": {}}, {}, None) == dra.ClaimPlan()


def test_a_claim_named_twice_is_refused():
    pod_ = pod_with({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimName": "one"})
    plan = dra.claim_plan(pod_, {"one": claim("one", request("r", 1))}, BY_INDEX)
    assert plan.refused == "spec.resourceClaims names one ResourceClaim twice"


def test_a_claim_plan_waits_for_claims_not_made_or_not_seen_yet():
    pod_ = pod_with({"name": "a", "resourceClaimName": "unseen"}, {"name": "b", "resourceClaimTemplateName": "t"})
    plan = dra.claim_plan(pod_, {}, BY_INDEX)
    assert plan.waiting == ("unseen", "(the claim of b, not made yet)") and plan.gpus == 0 and plan.refused is None


@pytest.mark.parametrize(("claims", "mapping", "why"), [
    ({"one": claim("one", request("r", 1))}, None, "ResourceClaims are allocated by sunk's scheduler only with"),
    ({"one": claim("one", request("r", 1, "other-class"))}, BY_INDEX, "ResourceClaim one request 'r': DeviceClass"),
    ({"one": {**claim("one", request("r", 1)), "status": allocated("one", "n1", "gpu-0", reserved_for="q")["status"]}},
     BY_INDEX,
     "ResourceClaim one is reserved for pods/q"),
], ids=["no-mapping", "unsupported", "shared"])
def test_a_claim_plan_refuses_what_sunk_cannot_fill_with_the_reason(claims, mapping, why):
    plan = dra.claim_plan(pod_with({"name": "a", "resourceClaimName": "one"}), claims, mapping)
    assert plan.refused is not None and plan.refused.startswith(why) and plan.gpus == 0


def test_the_flag_names_each_part_of_a_mapping():
    parsed = dra.DeviceMapping.parse("driver=gpu.example.com, device-class=gpu.example.com,device-class=h100,"
                                     "attribute=index")
    assert parsed == dra.DeviceMapping(DRIVER, frozenset({"gpu.example.com", "h100"}), attribute="index")
    assert dra.DeviceMapping.parse("driver=d,device-class=c,name=device-{index:02d},gres=shard") == dra.DeviceMapping(
        "d", frozenset({"c"}), name_template="device-{index:02d}", gres="shard")
    typed = dra.DeviceMapping.parse("driver=d,device-class=a100.example.com:a100,device-class=mig-1g.example.com:"
                                    "1g.10gb,device-class=any.example.com,attribute=index")
    assert typed.device_classes == {"a100.example.com", "mig-1g.example.com", "any.example.com"}
    assert [typed.gres_type(c) for c in ("a100.example.com", "mig-1g.example.com", "any.example.com")] == [
        "a100", "1g.10gb", ""]


@pytest.mark.parametrize(("text", "why"), [
    ("driver=d,device-class=c", "exactly one of attribute and name_template"),
    ("driver=d,device-class=c,attribute=index,name=gpu-{index}", "exactly one of attribute and name_template"),
    ("device-class=c,attribute=index", "names its driver"),
    ("driver=d,attribute=index", "at least one DeviceClass"),
    ("driver=d,device-class=c,attribute=index,colour=blue", "'colour=blue': want one of driver=..."),
    ("driver=d,device-class=c,attribute", "'attribute': want one of"),
    ("driver=d,driver=e,device-class=c,attribute=index", "driver given 2 times"),
    ("driver=d,device-class=c,name=gpu-{uuid}", "it must use {index} and nothing else"),
    ("driver=d,device-class=c:,attribute=index", "wants a GRES type after the colon"),
    ("driver=d,device-class=c:a100,device-class=c:h100,attribute=index", "a DeviceClass is named twice"),
    ("driver=d,device-class=c:a100:x,attribute=index", "is not a Slurm GRES type"),
])
def test_a_flag_that_names_no_single_rule_is_refused_with_why(text, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        dra.DeviceMapping.parse(text)


@pytest.mark.parametrize(("claimed", "per_node", "off"), [
    ({"ns/a": 2, "ns/b": 2}, 2, None),
    ({"ns/a": 2}, 2, None),  # members without claims (a leader) take no part
    ({"ns/a": 2, "ns/b": 1}, 2, "ns/b (1)"),
    ({"ns/a": 2, "ns/b": 2}, 4, "ns/a (2), ns/b (2)"),  # another member's nvidia.com/gpu: 4 on every node
])
def test_a_gangs_members_with_claims_must_claim_every_gpu_of_their_node(claimed, per_node, off):
    found = dra.gang_gpu_disagreement(claimed, per_node)
    if off is None:
        assert found == ""
    else:
        assert f"gets {per_node} GPU(s)" in found and f"the claims of {off} ask for another number" in found


TYPED = dra.DeviceMapping(DRIVER, frozenset({"gpu.example.com", "a100.example.com", "mig.example.com"}),
                          attribute="index", gres_types=[("a100.example.com", "a100"), ("mig.example.com", "1g.10gb")])


def test_a_claim_of_a_typed_device_class_asks_slurm_for_that_gres_type():
    pod_ = pod_with({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimName": "two"})
    claims = {"one": claim("one", request("r", 1, "mig.example.com")),
              "two": claim("two", request("r", 2, "mig.example.com"))}
    plan = dra.claim_plan(pod_, claims, TYPED)
    assert (plan.gpus, plan.gres_type, plan.refused) == (3, "1g.10gb", None)
    untyped = dra.claim_plan(pod_with({"name": "a", "resourceClaimName": "one"}),
                             {"one": claim("one", request("r", 1))}, TYPED)
    assert (untyped.gpus, untyped.gres_type) == (1, "")


@pytest.mark.parametrize("classes", [("a100.example.com", "mig.example.com"), ("a100.example.com", "gpu.example.com")])
def test_claims_of_two_gres_types_are_refused_a_slurm_job_asks_for_one(classes):
    pod_ = pod_with({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimName": "two"})
    claims = {"one": claim("one", request("r", 1, classes[0])), "two": claim("two", request("r", 1, classes[1]))}
    plan = dra.claim_plan(pod_, claims, TYPED)
    assert plan.refused is not None and "more than one GRES type" in plan.refused and plan.gpus == 0


# ---- shards: a shard class's count is of Slurm shards of the GPU(s) Slurm picks ----------------------------------

SHARING = dra.DeviceMapping(DRIVER, frozenset({"gpu.example.com"}), attribute="index",
                            shard_classes=frozenset({"shared.example.com"}))


def shards(name: str, count: int) -> dict[str, Any]:
    return request(name, count, "shared.example.com")


def test_a_shard_claim_asks_slurm_for_shards_not_gpus():
    pod_ = pod_with({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimName": "two"})
    plan = dra.claim_plan(pod_, {"one": claim("one", shards("r", 2)), "two": claim("two", shards("r", 1))}, SHARING)
    assert (plan.shards, plan.gpus, plan.gres_type, plan.refused) == (3, 0, "", None)


def test_a_pod_asks_for_whole_gpus_or_shards_not_both():
    pod_ = pod_with({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimName": "two"})
    plan = dra.claim_plan(pod_, {"one": claim("one", shards("r", 2)), "two": claim("two", request("r", 1))}, SHARING)
    assert plan.refused is not None and "whole GPUs and GPU shards" in plan.refused
    assert (plan.gpus, plan.shards) == (0, 0)


def test_a_shard_claim_names_the_gpu_its_shards_are_on():
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", shards("r", 2)), SHARING)
    results = dra.allocation_results(requests, [GresGrant("shard", "", 2, shares=((3, 2),))], devices, SHARING, "n1")
    assert results == {"c": [{"request": "r", "driver": DRIVER, "pool": "n1", "device": "gpu-3"}]}


def test_shards_over_two_gpus_are_dealt_to_the_requests_in_order_each_device_once_per_request():
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = (*dra.claim_requests(claim("a", shards("x", 1), shards("y", 3)), SHARING),
                *dra.claim_requests(claim("b", shards("z", 2)), SHARING))
    grants = [GresGrant("gpu", "", 0), GresGrant("shard", "", 6, shares=((1, 2), (2, 4)))]
    results = dra.allocation_results(requests, grants, devices, SHARING, "n1")
    assert isinstance(results, dict)
    assert [(r["request"], r["device"]) for r in results["a"]] == [("x", "gpu-1"), ("y", "gpu-1"), ("y", "gpu-2")]
    assert [(r["request"], r["device"]) for r in results["b"]] == [("z", "gpu-2")]


@pytest.mark.parametrize(("grants", "why"), [
    ([GresGrant("shard", "", 3, shares=((0, 3),))], "ask for 2 shard(s), but its Slurm job holds 3"),
    ([GresGrant("gpu", "", 2, (0, 1))], "holds 2 whole gpu beside its shards"),
    ([GresGrant("gpu", "", 1, (0,)), GresGrant("shard", "", 2, shares=((1, 2),))], "holds 1 whole gpu"),
    ([GresGrant("shard", "", 2)], "does not say which GPUs its 2 shard(s) are on"),  # (no shares recorded)
    ([GresGrant("shard", "", 2, shares=((0, 1),))], "does not say which GPUs"),
])
def test_a_shard_job_whose_record_does_not_fit_the_claims_is_the_jobs_doing_not_the_nodes(grants, why):
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", shards("r", 2)), SHARING)
    found = dra.allocation_results(requests, grants, devices, SHARING, "n1")
    assert isinstance(found, dra.JobUnfit) and why in found.message


def test_a_gpu_other_shard_claims_hold_is_shared_but_one_held_whole_is_a_mismatch():
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    sharer = allocated("sharer", "n1", "gpu-2", reserved_for="other")
    sharer["spec"] = {"devices": {"requests": [shards("r", 1)]}}  # (its results name request r)
    whole = allocated("theirs", "n1", "gpu-2", reserved_for="web")
    whole["spec"] = {"devices": {"requests": [request("r", 1)]}}
    requests = dra.claim_requests(claim("mine", shards("r", 1)), SHARING)
    grants = [GresGrant("shard", "", 1, shares=((2, 1),))]
    held = dra.held_devices([sharer], "n1", DRIVER, shared=SHARING.shard_classes)
    assert held == {}
    assert isinstance(dra.allocation_results(requests, grants, devices, SHARING, "n1", held), dict)
    held = dra.held_devices([sharer, whole], "n1", DRIVER, shared=SHARING.shard_classes)
    assert held == {(DRIVER, "n1", "gpu-2"): "ns/theirs"}
    found = dra.allocation_results(requests, grants, devices, SHARING, "n1", held)
    assert isinstance(found, dra.Mismatch) and "which a ResourceClaim holds whole" in found.message
    assert "theirs" not in found.message  # (the holder unnamed: it may be another tenant's)
    releasing = dra.allocation_results(requests, grants, devices, SHARING, "n1", {}, held)
    assert isinstance(releasing, dra.Releasing)
    # A whole GPU's claim is filled as before: a device a shard claim holds is held (Slurm gives a GPU one way).
    whole_requests = dra.claim_requests(claim("mine", request("r", 1)), SHARING)
    held_whole = dra.held_devices([sharer], "n1", DRIVER)
    found = dra.allocation_results(whole_requests, [GresGrant("gpu", "", 1, (2,))], devices, SHARING, "n1", held_whole)
    assert isinstance(found, dra.Mismatch)


def test_a_shard_index_naming_no_device_is_a_mismatch():
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", shards("r", 1)), SHARING)
    found = dra.allocation_results(requests, [GresGrant("shard", "", 1, shares=((7, 1),))], devices, SHARING, "n1")
    assert isinstance(found, dra.Mismatch) and "index 7 (shards) names 0 devices" in found.message


def test_the_flag_names_shard_classes():
    parsed = dra.DeviceMapping.parse("driver=d,device-class=g,shard-class=s1,shard-class=s2,attribute=index")
    assert parsed == dra.DeviceMapping("d", frozenset({"g"}), attribute="index", shard_classes=frozenset({"s1", "s2"}))
    assert parsed.classes == {"g", "s1", "s2"}
    only = dra.DeviceMapping.parse("driver=d,shard-class=s,attribute=index")
    assert only.device_classes == frozenset() and only.shard_classes == {"s"}


@pytest.mark.parametrize(("text", "why"), [
    ("driver=d,device-class=c,shard-class=c,attribute=index", "a DeviceClass is named twice"),
    ("driver=d,shard-class=s:a100,attribute=index", "a shard class takes no GRES type"),
])
def test_a_shard_class_flag_that_cannot_be_filled_is_refused(text, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        dra.DeviceMapping.parse(text)
    with pytest.raises(ValueError, match="both as a GPU class and as a shard class"):
        dra.DeviceMapping("d", frozenset({"c"}), attribute="index", shard_classes=frozenset({"c"}))


# ---- config: the class's and the claim's, into the allocation as kube-scheduler writes it -----------------------

def opaque(**parameters: str) -> dict[str, Any]:
    return {"opaque": {"driver": DRIVER, "parameters": dict(parameters)}}


def test_the_classes_config_then_the_claims_go_into_the_allocation_as_kube_scheduler_writes_them():
    classes = {"gpu.example.com": {"metadata": {"name": "gpu.example.com"}, "spec": {"config": [opaque(mode="x")]}},
               "other": {"spec": {}}}
    claim_ = claim("c", request("a", 1), request("b", 1), request("c", 1, "other"),
                   config=[{**opaque(user="1")}, {"requests": ["b"], **opaque(user="2")},
                           {"requests": ["elsewhere"], **opaque(user="3")}])
    assert dra.allocation_config(claim_, classes.get) == [
        {"source": "FromClass", "requests": ["a", "b"], "opaque": opaque(mode="x")["opaque"]},
        {"source": "FromClaim", "opaque": opaque(user="1")["opaque"]},
        {"source": "FromClaim", "requests": ["b"], "opaque": opaque(user="2")["opaque"]}]
    assert dra.allocation_config(claim("c", request("a", 1)), lambda _name: None) == []  # (a class not seen)


def test_a_claim_allocated_with_other_config_is_not_the_same_allocation():
    results = [{"request": "a", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
    pod_ = {"metadata": {"name": "p", "uid": "u"}}
    config = [{"source": "FromClaim", "opaque": opaque(user="1")["opaque"]}]
    written = {"status": dra.claim_status(results, "n1", pod_, config)}
    assert written["status"]["allocation"]["devices"]["config"] == config
    assert dra.same_allocation(written, results, "n1", config)
    assert not dra.same_allocation(written, results, "n1")
    assert "config" not in dra.claim_status(results, "n1", pod_)["allocation"]["devices"]


@pytest.mark.parametrize("config", [
    [{"opaque": {"driver": DRIVER, "parameters": {"mode": "mps"}}}],  # (for every request)
    [{"requests": ["r"], "opaque": {"driver": DRIVER, "parameters": {"mode": "mps"}}}],
])
def test_a_shard_claims_own_config_is_refused_the_gpu_is_shared_with_other_pods(config):
    with pytest.raises(dra.UnsupportedClaim, match="config is not taken for shard requests"):
        dra.claim_requests(claim("c", shards("r", 1), config=config), SHARING)
    assert dra.claim_requests(claim("c", request("r", 1), config=config), SHARING)  # (a whole GPU's is its own)


def test_a_shard_device_still_being_released_is_waited_for_before_another_held_drains():
    devices = dra.node_devices([FOUR], "n1", DRIVER)
    requests = dra.claim_requests(claim("c", shards("r", 2)), SHARING)
    grants = [GresGrant("shard", "", 2, shares=((1, 1), (2, 1)))]
    found = dra.allocation_results(requests, grants, devices, SHARING, "n1", {(DRIVER, "n1", "gpu-1"): "ns/x"},
                                   {(DRIVER, "n1", "gpu-2"): "ns/y"})
    assert isinstance(found, dra.Releasing) and "gpu-2" in found.message


def _nested(levels: int) -> Any:
    value: Any = {"leaf": 1}
    for _ in range(levels):
        value = {"x": value}
    return value


@pytest.mark.parametrize(("parameters", "why"), [
    (_nested(200), "nests deeper than 64 levels"),
    (_nested(9_000), "nests deeper than 64 levels"),  # (as deep as the apiserver stores: walked, never recursed)
    ({"n": 10 ** 5_000 - 1}, "holds a number of thousands of digits"),
], ids=["200 deep", "9000 deep", "5000 digits"])
def test_a_claim_config_that_could_not_be_written_into_an_allocation_is_refused(parameters, why):
    """A claim's config is copied into the allocation sunk writes; one the client cannot serialize (its serializer
    recurses per level, and no Python writes a 5,000-digit number) would fail that write on every retry."""
    bad = claim("c", request("r", 1), config=[{"opaque": {"driver": DRIVER, "parameters": parameters}}])
    with pytest.raises(dra.UnsupportedClaim, match=why):
        dra.claim_requests(bad, BY_INDEX)
    fine = claim("c", request("r", 1), config=[{"opaque": {"driver": DRIVER, "parameters": _nested(20)}}])
    assert dra.claim_requests(fine, BY_INDEX)
