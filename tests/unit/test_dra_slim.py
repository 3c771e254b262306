"""The DRA store transforms (sunk/translate/drastores.py): every reading ``sunk.translate.dra`` makes of a trimmed
ResourceClaim, ResourceSlice or DeviceClass is the one it makes of the whole object, the status sunk writes back
from a stored claim is the same, and a trimmed object is a fraction of a real one."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fat_objects import THEN, managed_fields

from sunk.kube.dra import slice_node
from sunk.model.slurm import GresGrant
from sunk.model.types import Obj
from sunk.translate import dra
from sunk.translate.drastores import slim_claim, slim_class, slim_slice
from sunk.translate.objects import LAST_APPLIED

DRIVER = "gpu.nvidia.com"
BY_INDEX = dra.DeviceMapping(DRIVER, frozenset({"gpu.nvidia.com", "mig-1g.nvidia.com"}), attribute="index",
                             gres_types=[("mig-1g.nvidia.com", "1g.10gb")])
QUALIFIED = dra.DeviceMapping(DRIVER, frozenset({"gpu.nvidia.com"}), attribute="gpu.nvidia.com/index")
OTHER_DOMAIN = dra.DeviceMapping(DRIVER, frozenset({"gpu.nvidia.com"}), attribute="example.com/slot")
BY_NAME = dra.DeviceMapping(DRIVER, frozenset({"gpu.nvidia.com"}), name_template="gpu-{index}")
SHARING = dra.DeviceMapping(DRIVER, frozenset({"gpu.nvidia.com"}), attribute="index",
                            shard_classes=frozenset({"shard.nvidia.com"}))
MAPPINGS = {"unqualified attribute": BY_INDEX, "qualified attribute": QUALIFIED,
            "another domain's attribute": OTHER_DOMAIN, "name template": BY_NAME, "shards": SHARING}


def gpu_device(i: int, *, qualified: bool = False, taints: list[Obj] | None = None) -> Obj:
    """A device as NVIDIA's DRA driver publishes a whole GPU: a dozen attributes and its memory."""
    index_key = f"{DRIVER}/index" if qualified else "index"
    device: Obj = {"name": f"gpu-{i}", "attributes": {
        index_key: {"int": i}, "minor": {"int": i}, "type": {"string": "gpu"},
        "uuid": {"string": f"GPU-{i:08d}-1111-2222-3333-444455556666"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"}, "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "570.124.6"}, "cudaDriverVersion": {"version": "12.8.0"},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i:02x}"}, "example.com/slot": {"int": 7 - i}},
        "capacity": {"memory": {"value": "80Gi"}}}
    if taints:
        device["taints"] = taints
    return device


def fat_slice(node: str, devices: list[Obj], *, pool: str = "", generation: int = 1, count: int = 1) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}-{pool or 'x'}", "uid": f"uid-{node}-{pool}", "resourceVersion": "77",
                         "generation": 3, "creationTimestamp": THEN, "managedFields": managed_fields(2),
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": "n"}]},
            "spec": {"driver": DRIVER, "nodeName": node, "devices": devices,
                     "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count}}}


TAINT = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule", "timeAdded": THEN},
         {"key": "gpu.nvidia.com/ecc", "effect": "NoExecute", "timeAdded": THEN}]
SLICES = [
    fat_slice("n1", [gpu_device(i) for i in (3, 1, 0, 2)]),
    fat_slice("n1", [gpu_device(i, qualified=True, taints=TAINT if i == 5 else None) for i in (4, 5)], pool="extra"),
    fat_slice("n1", [gpu_device(6)], pool="half", generation=2, count=2),  # (a pool still being written)
    fat_slice("n1", [gpu_device(9)], pool="extra", generation=0),  # (an older generation)
    fat_slice("n2", [gpu_device(0)]),
]


def fat_claim(name: str, *, node: str = "n1", devices: tuple[int, ...] = (), reserved: tuple[str, ...] = (),
              finalizers: tuple[str, ...] = (), shard: bool = False, deleting: bool = False,
              exactly: Obj | None = None) -> Obj:
    requests = [{"name": "gpus", "exactly": {"deviceClassName": "shard.nvidia.com" if shard else "gpu.nvidia.com",
                                             "count": len(devices) or 1, "allocationMode": "ExactCount",
                                             "tolerations": [{"key": "gpu.nvidia.com/xid", "operator": "Exists"}],
                                             **(exactly or {})}}]
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": "1234",
                     "creationTimestamp": THEN, "finalizers": list(finalizers), "managedFields": managed_fields(3),
                     "annotations": {LAST_APPLIED: json.dumps({"spec": {"devices": {"requests": requests}}}),
                                     "team": "a"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"{name}-pod", "uid": "p",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"devices": {"requests": requests,
                             "config": [{"requests": ["gpus"], "opaque": {"driver": DRIVER, "parameters": {"a": 1}}}]}},
    }
    if deleting:
        claim["metadata"]["deletionTimestamp"] = THEN
    if devices:
        claim["status"] = {
            "allocation": {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": node,
                                                    "device": f"gpu-{i}"} for i in devices],
                                       "config": [{"source": "FromClaim", "requests": ["gpus"],
                                                   "opaque": {"driver": DRIVER, "parameters": {"a": 1}}}]},
                           "nodeSelector": dra.node_selector(node)},
            "reservedFor": [{"resource": "pods", "name": f"pod-{uid}", "uid": uid} for uid in reserved],
            "devices": [{"driver": DRIVER, "pool": node, "device": f"gpu-{i}",
                         "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": THEN,
                                         "reason": "Prepared", "message": "x" * 200}],
                         "data": {"uuid": f"GPU-{i}", "blob": "y" * 500},
                         "networkData": {"interfaceName": f"eth{i}", "ips": ["10.0.0.1/24"]}} for i in devices]}
    return claim


PROTECTION = "resource.kubernetes.io/delete-protection"
CLAIMS = {
    "unallocated": fat_claim("fresh"),
    "held by a running Pod": fat_claim("held", devices=(0, 1), reserved=("uid-a",), finalizers=(PROTECTION,)),
    "reserved for the Pod itself": fat_claim("mine", devices=(2,), reserved=("uid-pod",), finalizers=(PROTECTION,)),
    "released, still protected": fat_claim("going", devices=(3,), finalizers=(PROTECTION,)),
    "deleting": fat_claim("gone", devices=(4,), reserved=("uid-b",), deleting=True),
    "on another node": fat_claim("far", node="n2", devices=(0,), reserved=("uid-c",)),
    "of shards": fat_claim("shared", devices=(5,), reserved=("uid-d",), shard=True),
    "refused: constraints": {**fat_claim("constrained"), "spec": {"devices": {
        **fat_claim("x")["spec"]["devices"], "constraints": [{"matchAttribute": "gpu.nvidia.com/productName"}]}}},
    "refused: CEL selectors": fat_claim("selecting", exactly={"selectors": [{"cel": {"expression": "true"}}]}),
    "refused: admin access": fat_claim("admin", exactly={"adminAccess": True}),
    "refused: first available": {**fat_claim("either"), "spec": {"devices": {"requests": [
        {"name": "gpus", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]}]}}},
}
POD = {"metadata": {"name": "pod", "namespace": "team-a", "uid": "uid-pod"}}
CLASSES = {
    "gpu.nvidia.com": {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                       "metadata": {"name": "gpu.nvidia.com", "resourceVersion": "5",
                                    "managedFields": managed_fields(1)},
                       "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type "
                                                                     "== 'gpu'"}}],
                                "config": [{"opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}}}]}},
    "shard.nvidia.com": {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                         "metadata": {"name": "shard.nvidia.com", "resourceVersion": "6"},
                         "spec": {"selectors": [{"cel": {"expression": "true"}}]}},
}


def slice_readings(slices: list[Obj], mapping: dra.DeviceMapping) -> tuple[Any, ...]:
    """What ``node_devices``, the index rule and the Syncer's lift read of a node's slices."""
    out: list[Any] = [[slice_node(s) for s in slices]]
    for node in ("n1", "n2"):
        devices = dra.node_devices(slices, node, DRIVER)
        out.append([(d.key, d.taints, d.attributes.get(mapping.qualified_attribute)) for d in devices])
        out.append([[d.key for d in dra._named(i, devices, mapping)] for i in range(10)])
        out.append([dra.node_disagreement(gpus, devices, mapping, {}) for gpus in (1, 4, 6)])
        grants = [GresGrant("gpu", "", 2, (0, 2))]
        requests = dra.claim_requests(fat_claim("x", devices=(0, 2)), mapping)
        out.append(dra.allocation_results(requests, grants, devices, mapping, node, {}, {}))
    return tuple(out)


@pytest.mark.parametrize("mapping", MAPPINGS.values(), ids=MAPPINGS.keys())
def test_every_reading_of_a_trimmed_slice_is_the_whole_ones(mapping: dra.DeviceMapping) -> None:
    slim = [slim_slice(mapping)(s) for s in SLICES]
    assert slice_readings(slim, mapping) == slice_readings(SLICES, mapping)
    assert json.loads(json.dumps(slim)) == slim  # (plain JSON: what a relist's comparison and a dump read)


def test_a_trimmed_slice_keeps_only_the_mapped_attribute_and_is_a_fraction_of_the_whole() -> None:
    whole = SLICES[0]
    slim = slim_slice(BY_INDEX)(whole)
    assert [d["attributes"] for d in slim["spec"]["devices"]] == [{"index": {"int": i}} for i in (3, 1, 0, 2)]
    assert all("attributes" not in d for d in slim_slice(BY_NAME)(whole)["spec"]["devices"])
    assert len(json.dumps(slim)) < len(json.dumps(whole)) / 5


def test_a_malformed_slice_is_kept_for_the_reader_to_refuse() -> None:
    odd = {"metadata": {"name": "odd"}, "spec": {"driver": DRIVER, "nodeName": "n1", "devices": ["junk", {"x": 1}]}}
    assert slim_slice(BY_INDEX)(odd)["spec"]["devices"] == ["junk", {}]
    assert slim_slice(BY_INDEX)({"metadata": {"name": "bare"}, "spec": None}) == {"metadata": {"name": "bare"}}


def claim_readings(claims: dict[str, Obj], classes: dict[str, Obj], mapping: dra.DeviceMapping) -> tuple[Any, ...]:
    """What the allocator, the claim view and the Syncer's lift read of the claims on a node."""
    out: list[Any] = []
    for claim in claims.values():
        requests: Any
        try:
            requests = dra.claim_requests(claim, mapping)
        except dra.UnsupportedClaim as exc:
            requests = str(exc)
        status = claim.get("status") or {}
        out.append((requests, dra.allocated_on(claim), dra.claim_refusal(claim, POD),
                    dra.allocation_config(claim, classes.get),
                    dra.same_allocation(claim, [{"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-2"}],
                                        "n1", dra.allocation_config(claim, classes.get)),
                    status.get("reservedFor"), claim["metadata"].get("finalizers"),
                    claim["metadata"].get("deletionTimestamp"), claim["metadata"].get("resourceVersion"),
                    claim["metadata"].get("uid")))
    for node in ("n1", "n2"):
        for shared in (frozenset(), SHARING.shard_classes):
            out.append(dra.held_devices(claims.values(), node, DRIVER, besides=frozenset({"team-a/mine"}),
                                        shared=shared))
    pod = {**POD, "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "mine"}]}}
    out.append(dra.claim_plan(pod, {name: c for c in claims.values() if (name := c["metadata"]["name"]) == "mine"},
                              mapping))
    return tuple(out)


@pytest.mark.parametrize("mapping", [BY_INDEX, SHARING], ids=["whole GPUs", "shards"])
def test_every_reading_of_trimmed_claims_and_classes_is_the_whole_ones(mapping: dra.DeviceMapping) -> None:
    slim_claims = {k: slim_claim(c) for k, c in CLAIMS.items()}
    slim_classes = {k: slim_class(c) for k, c in CLASSES.items()}
    assert claim_readings(slim_claims, slim_classes, mapping) == claim_readings(CLAIMS, CLASSES, mapping)


def test_the_status_written_from_a_trimmed_claim_differs_only_by_what_the_apiserver_ignores_there() -> None:
    """``ClaimAllocator._write`` PUTs ``{**stored, "status": new}`` to the status subresource. From a trimmed claim
    the body lacks only the write records: a status update takes the live object's managedFields when none are
    sent, and its annotations, spec and finalizers (``ResetObjectMetaForStatus``)."""
    status = dra.claim_status([{"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-2"}], "n1",
                              POD, [])
    whole = CLAIMS["reserved for the Pod itself"]
    before = copy.deepcopy(whole)
    slim = slim_claim(whole)
    assert whole == before  # (the transform reads, never changes, what it is given)
    from_slim, from_whole = {**slim, "status": status}, {**whole, "status": status}
    expected_metadata = {k: v for k, v in whole["metadata"].items() if k != "managedFields"}
    expected_metadata["annotations"] = {"team": "a"}  # (kubectl's last-applied copy gone)
    assert from_slim == {**from_whole, "metadata": expected_metadata}
    assert "devices" not in slim["status"] and slim["status"]["allocation"] == whole["status"]["allocation"]
    assert len(json.dumps(slim)) < len(json.dumps(whole)) / 4


def test_a_trimmed_class_keeps_its_config_and_nothing_a_reader_does_not_read() -> None:
    assert slim_class(CLASSES["gpu.nvidia.com"]) == {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com", "resourceVersion": "5"},
        "spec": {"config": [{"opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}}}]}}
    assert "spec" not in slim_class(CLASSES["shard.nvidia.com"])


def test_a_claim_whose_parameters_nest_deep_is_trimmed_its_parameters_kept_as_they_are() -> None:
    """A tenant's opaque parameters may nest as deep as the apiserver lets them (10,000 levels): the transform
    shares what is shallow and keeps the rest as decoded, never recursing into it (a RecursionError here stalled
    the claims informer of every daemon, for every tenant)."""
    deep: Any = []
    for _ in range(7_000):  # (two frames a level: past even a raised limit)
        deep = [deep]
    claim = fat_claim("deep")
    claim["spec"]["devices"]["config"][0]["opaque"]["parameters"] = {"layers": deep}
    try:
        slim, recursed = slim_claim(claim), ""
    except RecursionError as exc:  # (not raised from here: pytest would spend minutes printing the frames)
        slim, recursed = {}, str(exc)
    assert not recursed, "the transform recursed into the tenant's parameters"
    assert slim["spec"]["devices"]["config"][0]["opaque"]["parameters"]["layers"] is not None
    assert dra.allocation_config(slim, CLASSES.get) == dra.allocation_config(claim, CLASSES.get)
