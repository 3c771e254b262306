"""In-memory stand-ins for the Syncer's caches and clients (unit tests only)."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sunk.kube.dra import INDEX_NODE as DRA_INDEX_NODE
from sunk.kube.dra import slice_node
from sunk.model.slurm import Job, Node, NodeUpdate
from sunk.model.types import Obj
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import NotFound
from sunk.syncer.config import SyncerConfig
from sunk.syncer.context import INDEX_NODE, INDEX_SLURM_NODE, SyncerContext, index_slurm_node, nodeslice_slurm_nodes
from sunk.translate.dra import DeviceMapping, allocated_on
from sunk.translate.objects import syncer_slim_node, without_write_records
from sunk.translate.podstores import syncer_slim_pod


class FakeInformer:
    """``transform``: what the real informer's does (the Syncer's stores keep trimmed objects, and every test
    through ``make_ctx`` decides from those, as the Syncer does)."""

    def __init__(self, indexers: Mapping[str, Callable[[Obj], list[str]]] | None = None,
                 transform: Callable[[Obj], Obj] | None = None):
        self.transform = transform or (lambda obj: obj)
        self.store: dict[str, Obj] = {}
        self.indexers = dict(indexers or {})
        self.handlers: list[Any] = []

    @staticmethod
    def key(obj: Obj) -> str:
        meta = obj["metadata"]
        return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]

    def put(self, obj: Obj) -> None:
        obj = self.transform(obj)
        old = self.store.get(self.key(obj))
        self.store[self.key(obj)] = obj
        for h in self.handlers:
            h.on_add(obj) if old is None else h.on_update(old, obj)

    def remove(self, obj: Obj) -> None:
        obj = self.transform(obj)
        self.store.pop(self.key(obj), None)
        for h in self.handlers:
            h.on_delete(obj)

    def get(self, key: str) -> Obj | None:
        return self.store.get(key)

    def list(self) -> list[Obj]:
        return list(self.store.values())

    def by_index(self, name: str, value: str) -> list[Obj]:
        return [o for o in self.store.values() if value in self.indexers[name](o)]

    def add_handler(self, handler: Any = None, *, on_add: Any = None, on_update: Any = None,
                    on_delete: Any = None) -> Any:
        if handler is None:  # the real informer's keyword form
            handler = types.SimpleNamespace(on_add=on_add or (lambda _obj: None),
                                            on_update=on_update or (lambda _old, _new: None),
                                            on_delete=on_delete or (lambda _obj: None))
        self.handlers.append(handler)
        for obj in self.store.values():
            handler.on_add(obj)
        return handler

    def has_synced(self) -> bool:
        return True


class FakeSlurmInformer:
    """One Slurm kind's informer (``sunk.slurm.informer.SlurmInformer``'s read side and handlers) over a dict
    the test edits in place; ``fresh``/``synced`` read from ``source`` (a ``FakeCache``) by attribute name."""

    def __init__(self, source: Any, items: str, fresh: str, counts_nudges: bool):
        self.source, self.items_name, self.fresh_name, self.counts_nudges = source, items, fresh, counts_nudges
        self.handlers: list[Any] = []

    def items(self) -> Mapping[Any, Any]:
        return getattr(self.source, self.items_name)  # type: ignore[no-any-return]

    def get(self, key: Any) -> Any:
        return self.items().get(key)

    def keys(self) -> list[Any]:
        return list(self.items())

    def list(self) -> list[Any]:
        return list(self.items().values())

    @property
    def fresh(self) -> bool:
        return bool(getattr(self.source, self.fresh_name))

    @property
    def synced(self) -> bool:
        return bool(self.source.synced)

    def has_synced(self) -> bool:
        return self.synced

    def nudge(self) -> None:
        if self.counts_nudges:
            self.source.nudges += 1

    def add_handler(self, handler: Any = None, *, on_add: Any = None, on_update: Any = None,
                    on_delete: Any = None) -> Callable[[], None]:
        from sunk.kube.store import FuncHandler

        self.handlers.append(handler or FuncHandler(on_add, on_update, on_delete))
        return lambda: None


class FakeCache:
    """Slurm's nodes and jobs as the Syncer's two informers show them (``nodes``, ``jobs``). ``nudges``
    counts the Syncer's nudges (each one nudges both informers)."""

    def __init__(self, nodes: Sequence[Node] = (), jobs: Sequence[Job] = ()):
        self.items = {n.name: n for n in nodes}
        self.job_items = {j.id: j for j in jobs}
        self.fresh = True
        self.jobs_fresh = True
        self.synced = True
        self.nudges = 0
        self.nodes = FakeSlurmInformer(self, "items", "fresh", counts_nudges=True)
        self.jobs = FakeSlurmInformer(self, "job_items", "jobs_fresh", counts_nudges=False)


class FakeSlurm:
    """Slurm's current truth (may differ from the cache), and every call made."""

    def __init__(self, nodes: Sequence[Node] = ()):
        self.items = {n.name: n for n in nodes}
        self.calls: list[tuple[str, str, NodeUpdate | None]] = []
        self.delete_error: Exception | None = None  # what delete_node raises, if set

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot:
        self.calls.append(("list", "", None))
        return Snapshot(items=tuple(self.items.values()), last_update=1)

    def read_node(self, name: str) -> Node:
        self.calls.append(("read", name, None))
        if name not in self.items:
            raise NotFound(f"no Slurm node {name!r}")
        return self.items[name]

    def update_node(self, name: str, update: NodeUpdate) -> None:
        self.calls.append(("update", name, update))

    def delete_node(self, name: str) -> None:
        self.calls.append(("delete", name, None))
        if self.delete_error is not None:
            raise self.delete_error
        if self.items.pop(name, None) is None:
            raise NotFound(f"no Slurm node {name!r}", code=2018)


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def normal(self, obj: Obj, reason: str, message: str, **_: Any) -> None:
        self.events.append(("Normal", reason, message))

    def warning(self, obj: Obj, reason: str, message: str, **_: Any) -> None:
        self.events.append(("Warning", reason, message))


def pod(name: str, node: str = "worker-1", namespace: str = "slurm", *, rv: str = "1",
        conditions: Sequence[Obj] = (), labels: Mapping[str, str] | None = None, deleting: bool = False) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "resourceVersion": rv, "uid": f"uid-{name}",
                 "labels": dict(labels or {"app.kubernetes.io/name": "slurmd"}),
                 "creationTimestamp": "2030-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:01Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "hostname": name},
            "status": {"conditions": [dict(c) for c in conditions]}}


def k8s_node(name: str, *, cordoned: bool = False, reason: str | None = None, rv: str = "1") -> Obj:
    meta: Obj = {"name": name, "resourceVersion": rv, "annotations": {}}
    if reason:
        meta["annotations"]["node.coreweave.cloud/cordonReason"] = reason
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "spec": {"unschedulable": True} if cordoned else {}, "status": {"conditions": []}}


def make_ctx(*, nodes: Sequence[Node] = (), slurm: FakeSlurm | None = None,
             enqueue: Callable[[str], None] | None = None,
             node_permissions: bool = True,
             clean_up: bool = False,
             dra: DeviceMapping | None = None) -> tuple[SyncerContext, FakeInformer, FakeInformer,
                                              FakeCache, FakeSlurm, FakeRecorder]:
    from sunk.kube.informer import pod_node_name

    pods = FakeInformer({INDEX_SLURM_NODE: index_slurm_node, INDEX_NODE: pod_node_name},
                        transform=without_write_records)
    k8s_nodes = FakeInformer(transform=syncer_slim_node)
    cache = FakeCache(nodes)
    slurm = slurm or FakeSlurm(nodes)
    recorder = FakeRecorder()
    ctx = SyncerContext(
        api=object(),  # type: ignore[arg-type]
        slurm=slurm,  # type: ignore[arg-type]
        slurm_nodes=cache.nodes,  # type: ignore[arg-type]
        slurm_jobs=cache.jobs,  # type: ignore[arg-type]
        slurmd_pods=pods,  # type: ignore[arg-type]
        nodes=k8s_nodes,  # type: ignore[arg-type]
        all_pods=FakeInformer({INDEX_NODE: pod_node_name}, transform=syncer_slim_pod),  # type: ignore[arg-type]
        recorder=recorder,  # type: ignore[arg-type]
        config=SyncerConfig(watch_namespace="slurm", node_permissions=node_permissions,
                            slurm_node_clean_up=clean_up, dra=dra),
        enqueue_node=enqueue or (lambda name: None),
        # With --slurm-node-clean-up: the NodeSlices (nodeslice() below), by Slurm node.
        nodeslices=FakeInformer({INDEX_SLURM_NODE: nodeslice_slurm_nodes}) if clean_up else None,  # type: ignore[arg-type]
        # With --dra-device-mapping: every ResourceClaim and the driver's ResourceSlices, by Node (sunk.kube.dra).
        dra_claims=FakeInformer({DRA_INDEX_NODE: lambda c: [n] if (n := allocated_on(c)) else []})  # type: ignore[arg-type]
        if dra else None,
        dra_slices=FakeInformer({DRA_INDEX_NODE: slice_node}) if dra else None,  # type: ignore[arg-type]
    )
    return ctx, pods, k8s_nodes, cache, slurm, recorder


def nodeslice(name: str, nodeset: str, *slurm_nodes: str, namespace: str = "slurm") -> Obj:
    """A NodeSlice as the operator writes it (sunk.translate.nodeset.slices)."""
    return {"apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "NodeSlice",
            "metadata": {"name": name, "namespace": namespace, "labels": {"sunk.coreweave.com/nodeset": nodeset}},
            "spec": {"nodeSet": nodeset, "entries": [{"slurmNode": n, "pod": n, "node": f"k-{n}", "address": ""}
                                                     for n in slurm_nodes]}}
