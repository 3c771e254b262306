"""Informers of Dynamic Resource Allocation objects, by Node: every ResourceClaim (by the Node its allocation is on)
and one driver's ResourceSlices (by ``spec.nodeName``), each trimmed to what sunk reads
(``sunk.translate.drastores``). What sunk-scheduler fills a Pod's claims from, and what the
Syncer lifts a ``sunk-dra`` drain by (``sunk.translate.dra``)."""

from __future__ import annotations

from kubernetes.client import ApiClient

from sunk.model.types import Obj
from sunk.translate.dra import DeviceMapping, allocated_on
from sunk.translate.drastores import slim_claim, slim_class, slim_slice

from .informer import Informer
from .resources import DEVICECLASSES, RESOURCECLAIMS, RESOURCESLICES

INDEX_NODE = "node"


def claims_informer(api: ApiClient) -> Informer:
    """Every claim, cluster-wide: a device any claim holds on a Node is never given again, whoever's it is."""
    claims = Informer(api, RESOURCECLAIMS, transform=slim_claim, name="resource-claims")
    claims.add_indexer(INDEX_NODE, lambda claim: [node] if (node := allocated_on(claim)) else [])
    return claims


def classes_informer(api: ApiClient) -> Informer:
    """Every DeviceClass (a handful, cluster-scoped): their ``config`` goes into the allocations sunk writes."""
    return Informer(api, DEVICECLASSES, transform=slim_class, name="device-classes")


def slices_informer(api: ApiClient, mapping: DeviceMapping) -> Informer:
    """The mapped driver's slices, each device with only the attribute the mapping reads."""
    slices = Informer(api, RESOURCESLICES, field_selector=f"spec.driver={mapping.driver}",
                      transform=slim_slice(mapping), name="resource-slices")
    slices.add_indexer(INDEX_NODE, slice_node)
    return slices


def slice_node(obj: Obj) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []
