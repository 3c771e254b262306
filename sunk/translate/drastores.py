"""What the DRA stores keep of a ResourceClaim, a ResourceSlice and a DeviceClass (client-go's SetTransform).

Why: the schedulers and the Syncer hold every claim of the cluster (one per GPU Pod: 100k Pods, 100k claims, each
with its write records) and every slice of the mapped driver (one per node, each device with a dozen attributes a
real GPU driver publishes); decoded whole they are most of a daemon's memory at scale (issue 37 goal 5). Each
transform keeps what ``sunk.translate.dra`` reads and what sunk writes back, with the strings that repeat from
object to object shared (``podstores.shared``), and one frozen copy of the parts many hold alike
(``subtrees.one_copy``): a template's claims' spec, a GPU's device entry as every node's slice lists it.

Whatever a transform drops, no reader of its store may read: ``tests/unit/test_dra_slim.py`` compares every
reading of a trimmed object with the whole one's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .dra import DeviceMapping
from .objects import Wire, meta, without_write_records
from .podstores import shared, shared_metadata
from .subtrees import one_copy

_SLICE_METADATA = ("name", "uid", "resourceVersion", "deletionTimestamp")
# What the claims of one template hold alike (the spec, whole, too). Not the allocation: the claims that hold a node's
# devices at one time hold different ones.
_ALIKE_CLAIM_METADATA = ("labels", "annotations", "finalizers")
_SLICE_SPEC = ("driver", "nodeName", "pool")
_DEVICE = ("name", "taints")


def slim_claim(claim: Wire) -> dict[str, Any]:
    """What a ResourceClaim store keeps: all but its write records and the drivers' ``status.devices``.

    Kept whole otherwise: ``dra`` reads the spec's requests and config, the allocation and ``reservedFor``, the
    finalizers and the deletion mark. The status sunk writes is a whole replacement through the status
    subresource (``ClaimAllocator._write``), which never carries metadata or spec changes and takes the live
    managedFields when none are sent, so nothing dropped here is written back: ``status.devices`` (what a driver
    reports of a prepared device) is not in an allocation sunk writes either way."""
    whole = without_write_records(claim)
    slim: dict[str, Any] = {k: one_copy(v) for k, v in whole.items() if k not in ("metadata", "status")}
    slim["metadata"] = shared_metadata(whole["metadata"], _ALIKE_CLAIM_METADATA)
    status = whole.get("status")
    if isinstance(status, Mapping):
        slim["status"] = shared({k: v for k, v in status.items() if k != "devices"})
    elif "status" in whole:
        slim["status"] = status
    return slim


def slim_slice(mapping: DeviceMapping) -> Callable[[Wire], dict[str, Any]]:
    """The transform of the mapped driver's ResourceSlice store: what ``dra.node_devices`` reads.

    Kept: the metadata the informer keys and orders by; ``spec.driver``, ``nodeName`` and ``pool`` (generation and
    slice count: which slices are the pool's newest, complete); of each device its name, its taints, and of its
    attributes only the one the mapping reads (``DeviceMapping.qualified_attribute``, however the driver wrote
    it). A name-template mapping reads no attribute, and keeps none. Dropped: capacities, counters, the other
    attributes (a GPU driver's UUID, product, driver version...) and the slice's node selectors."""

    def transform(obj: Wire) -> dict[str, Any]:
        slim: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
        slim["metadata"] = shared_metadata({k: v for k, v in meta(obj).items() if k in _SLICE_METADATA})
        spec_in = obj.get("spec")
        if not isinstance(spec_in, Mapping):
            return slim
        driver = str(spec_in.get("driver") or "")
        spec: dict[str, Any] = {k: spec_in[k] for k in _SLICE_SPEC if k in spec_in}
        devices = spec_in.get("devices")
        if isinstance(devices, list):
            spec["devices"] = [one_copy(_slim_device(device, driver, mapping)) for device in devices]
        slim["spec"] = shared(spec)
        return slim

    return transform


def _slim_device(device: Any, driver: str, mapping: DeviceMapping) -> Any:
    if not isinstance(device, Mapping):
        return device  # (the apiserver validates slices; kept as it came for the reader to refuse)
    slim = {k: device[k] for k in _DEVICE if k in device}
    attributes = device.get("attributes")
    if isinstance(attributes, Mapping) and mapping.attribute:
        wanted = mapping.qualified_attribute
        slim["attributes"] = {k: v for k, v in attributes.items()
                              if (k if "/" in str(k) else f"{driver}/{k}") == wanted}
    return slim


def slim_class(device_class: Wire) -> dict[str, Any]:
    """What the DeviceClass store keeps: its name and ``spec.config`` (``dra.allocation_config``); a class's CEL
    selectors and write records are read by nobody in sunk."""
    slim: dict[str, Any] = {k: device_class[k] for k in ("apiVersion", "kind") if k in device_class}
    slim["metadata"] = {k: v for k, v in meta(device_class).items() if k in _SLICE_METADATA}
    spec = device_class.get("spec")
    if isinstance(spec, Mapping) and "config" in spec:
        slim["spec"] = {"config": spec["config"]}
    return slim
