"""In-memory stand-ins for the Syncer's caches and the few API writes node locking makes."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from typing import Any

from syncer_fakes import FakeSlurmInformer

from sunk.kube import patch as kp
from sunk.kube.resources import object_key
from sunk.locking.config import add_flags, config_from
from sunk.model import names
from sunk.model.slurm import Job, Node
from sunk.model.types import Obj
from sunk.syncer.config import SyncerConfig
from sunk.syncer.context import INDEX_NODE, INDEX_SLURM_NODE, SyncerContext, slurm_node_name
from sunk.translate import lock, objects


class Store:
    """Informer-shaped: get/list/by_index over wire dicts; ``transform`` as the real informer's (the Syncer
    trims what it stores: sunk/syncer/assembly.py)."""

    def __init__(self, *objs: Obj, transform: Callable[[Obj], Obj] | None = None):
        self.transform = transform or (lambda obj: obj)
        self.objs: dict[str, Obj] = {object_key(o): self.transform(o) for o in objs}

    def put(self, obj: Obj) -> None:
        obj = self.transform(obj)
        self.objs[object_key(obj)] = obj

    def get(self, key: str) -> Obj | None:
        return self.objs.get(key)

    def list(self) -> list[Obj]:
        return list(self.objs.values())

    def by_index(self, index: str, value: str) -> list[Obj]:
        if index == INDEX_SLURM_NODE:
            return [o for o in self.objs.values() if slurm_node_name(o) == value]
        if index == INDEX_NODE:
            return [o for o in self.objs.values() if (o.get("spec") or {}).get("nodeName") == value]
        raise KeyError(index)

    def has_synced(self) -> bool:
        return True

    def add_handler(self, handler: Any = None) -> Any:
        return handler


class Cache:
    """Slurm's nodes and jobs (dicts the tests edit), as the Syncer's two Slurm informers show them."""

    def __init__(self, nodes: dict[str, Node] | None = None, synced: bool = True):
        self.nodes = nodes or {}
        self.jobs: dict[int, Job] = {}
        self.synced = synced
        self.fresh = True
        self.nudges = 0
        self.node_informer = FakeSlurmInformer(self, "nodes", "fresh", counts_nudges=True)
        self.job_informer = FakeSlurmInformer(self, "jobs", "fresh", counts_nudges=False)


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, str, str, str]] = []

    def normal(self, obj: Obj, reason: str, message: str, *, action: str | None = None) -> None:
        self.events.append(("Normal", obj["metadata"]["name"], reason, message))

    def warning(self, obj: Obj, reason: str, message: str, *, action: str | None = None) -> None:
        self.events.append(("Warning", obj["metadata"]["name"], reason, message))

    def reasons(self) -> list[str]:
        return [e[2] for e in self.events]


def slurmd_pod(node: str = "node3", k8s_node: str = "worker-3", annotations: dict[str, str] | None = None,
               rv: str = "100") -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": node, "namespace": "slurm", "resourceVersion": rv, "uid": f"uid-{node}",
                         "annotations": dict(annotations or {})},
            "spec": {"nodeName": k8s_node, "tolerations": [{"key": names.LOCK_KEY, "operator": "Exists"}]}}


def k8s_node(name: str = "worker-3", taints: list[Obj] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": "7"},
            "spec": {"taints": taints or []}}


def pod(name: str, node: str = "worker-3", *, tolerate: bool = False, sunk_job: str | None = None,
        phase: str = "Running", terminating: bool = False, bound_at: str | None = None,
        scheduler: str = "sunk-scheduler") -> Obj:
    """A Pod on ``node``; ``bound_at``: the time of its PodScheduled condition (none by default);
    ``scheduler``: its spec.schedulerName (sunk's, as SyncerConfig names it by default)."""
    meta: Obj = {"name": name, "namespace": "apps", "uid": f"uid-{name}", "resourceVersion": "1", "annotations": {}}
    if sunk_job:
        meta["annotations"][names.ANN_JOB_ID] = sunk_job
    if terminating:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    spec: Obj = {"nodeName": node, "schedulerName": scheduler}
    if tolerate:
        spec["tolerations"] = [{"key": names.LOCK_KEY, "operator": "Exists"}]
    status: Obj = {"phase": phase}
    if bound_at is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound_at}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def config(*flags: str):
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return config_from(parser.parse_args(["--hooks-token-file=/dev/null", *flags]))


class Api:
    """Records the writes (monkeypatched over sunk.kube) in order; applies them to the stores."""

    def __init__(self, slurmd: Store, nodes: Store):
        self.slurmd, self.nodes = slurmd, nodes
        self.calls: list[tuple] = []
        self.conflict_next_patch = False
        self.evict_outcome = kp.EvictionOutcome.EVICTED
        # By Pod name: "failed" raises a 500; "already" answers as for a Pod that tolerates the
        # taint already while the cache shows it without (nothing written, the cache left as it is).
        self.toleration_outcome: dict[str, str] = {}
        self.pods: dict[str, Obj] = {}  # what a fresh read of a Pod finds (none: 404)

    def patch(self, _api, _res, name, body, namespace=None, **_kw):
        meta = body["metadata"]
        self.calls.append(("patch", name, copy.deepcopy(meta)))
        if self.conflict_next_patch:
            self.conflict_next_patch = False
            from sunk.kube.client import ApiError

            raise ApiError(409, "Conflict", {"message": "the object has been modified"})
        current = self.slurmd.get(f"{namespace}/{name}")
        assert current is not None
        new = copy.deepcopy(current)
        for key, value in (meta.get("annotations") or {}).items():
            if value is None:
                new["metadata"]["annotations"].pop(key, None)
            else:
                new["metadata"]["annotations"][key] = value
        new["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        self.slurmd.put(new)
        return new

    def get(self, _api, res, name, namespace=None, **_kw):
        """The apiserver's answer to a read: Pods from ``self.pods`` (``namespace/name``), Nodes from the store."""
        from sunk.kube.client import ApiError

        found = self.pods.get(f"{namespace}/{name}") if res.plural == "pods" else self.nodes.get(name)
        if found is None:
            raise ApiError(404, "NotFound", {"message": f"{res.plural} {name!r} not found"})
        self.calls.append(("get", res.plural, name))
        return copy.deepcopy(found)

    def hold_lock(self, _api, node, holder, effect):
        self.calls.append(("hold_lock", node["metadata"]["name"], holder, effect))
        return kp.PatchResult(True, node)

    def add_toleration(self, _api, pod, toleration):
        """Kept on the Pod, as the real patch keeps it (the next reconcile must see it)."""
        self.calls.append(("add_toleration", object_key(pod), toleration))
        outcome = self.toleration_outcome.get(pod["metadata"]["name"])
        if outcome == "failed":
            from sunk.kube.client import ApiError

            raise ApiError(500, "Internal Server Error", {"message": "etcdserver: request timed out"})
        if outcome == "already":
            return kp.PatchResult(False, pod)
        pod.setdefault("spec", {}).setdefault("tolerations", []).append(toleration)
        return kp.PatchResult(True, pod)

    def release_lock(self, _api, node, drop, *, unless=None):
        """Records which holders it lets go (``drop``, for the test to ask); lifted as the real one lifts."""
        if unless is not None and unless(node):  # (asked before any write, as the real one asks)
            return False
        self.calls.append(("release_lock", node["metadata"]["name"], drop))
        return objects.has_taint(node, names.LOCK_KEY) and lock.release_holders(node, drop)[1]

    def evict(self, _api, obj, **_kw):
        self.calls.append(("evict", object_key(obj)))
        return kp.EvictionResult(self.evict_outcome, "budget says no" if self.evict_outcome.value == "blocked" else "")

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]


def install(monkeypatch, api: Api) -> None:
    from sunk.kube import client as kc

    monkeypatch.setattr(kc, "patch", api.patch)
    monkeypatch.setattr(kc, "get", api.get)
    monkeypatch.setattr(kp, "hold_lock", api.hold_lock)
    monkeypatch.setattr(kp, "release_lock", api.release_lock)
    monkeypatch.setattr(kp, "add_toleration", api.add_toleration)
    monkeypatch.setattr(kp, "evict", api.evict)


def context(slurmd: Store, nodes: Store, pods: Store, cache: Cache, recorder: Recorder,
            slurm=None) -> SyncerContext:
    return SyncerContext(api=object(), slurm=slurm or object(), slurm_nodes=cache.node_informer,  # type: ignore[arg-type]
                         slurm_jobs=cache.job_informer, slurmd_pods=slurmd, nodes=nodes,  # type: ignore[arg-type]
                         all_pods=pods, recorder=recorder, config=SyncerConfig(),
                         enqueue_node=lambda _n: None)
