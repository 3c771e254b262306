"""The apiserver and Slurm as sunk-syncer release-nodes sees them, in memory (unit tests only): the fakes of
nodeset_fakes, with lists, every request recorded as RBAC reads it, and a person at Slurm's keyboard."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from nodeset_fakes import FakeApiServer, FakeSlurm

from sunk.kube import client as kc
from sunk.model import names
from sunk.model.slurm import Node
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import NotFound

Obj = dict[str, Any]
SYNCER = {"app.kubernetes.io/name": "sunk-syncer", "app.kubernetes.io/instance": "sunk"}
SLURMD = {"app.kubernetes.io/name": "slurmd"}
LOCK = {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}
OTHER_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
SUNKS = "k8s: sunk-lock: job 42: hook API unreachable (HTTP 000, 3 attempts)"  # a drain of sunk's lock
STANDING = "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 43"  # its cause outlives sunk
PERSONS = "bad gpu, ticket 7"
PROLOGS = "sunk-lock: job 9: the hook API refused: 403"


class Kube(FakeApiServer):
    """The apiserver, with lists by label selector (``k=v,...``), and the Deployment controller and kubelet
    as one: a Deployment scaled to 0 loses one of its Pods per list, unless ``pods_stay``."""

    pods_stay = False

    def __init__(self) -> None:
        super().__init__()
        # Every request as RBAC reads it: (verb, API group, resource[/subresource], namespace, name).
        self.requests: list[tuple[str, str, str, str | None, str | None]] = []

    def install(self, monkeypatch: Any) -> Kube:
        super().install(monkeypatch)
        monkeypatch.setattr(kc, "list_objects", self.list_objects)
        return self

    def list_objects(self, api: Any, resource: Any, namespace: str | None = None, *, label_selector: str | None = None,
                     **_: Any) -> list[Obj]:
        self.calls.append(("list", resource.plural, namespace or "", label_selector or ""))
        self.requests.append(("list", resource.group, resource.plural, namespace, None))
        self._check("list", resource.plural, resource.path(namespace))
        wanted = dict(term.split("=", 1) for term in label_selector.split(",")) if label_selector else {}
        if resource.plural == "pods" and not self.pods_stay:
            self._stop_scaled_down()
        return [copy.deepcopy(o) for (plural, ns, _), o in sorted(self.objects.items())
                if plural == resource.plural and (namespace is None or ns == namespace)
                and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]

    def _stop_scaled_down(self) -> None:
        for deployment in self.of("deployments"):
            if deployment["spec"]["replicas"] == 0:
                for key, pod in sorted(self.objects.items()):
                    if key[0] == "pods" and all(pod["metadata"]["labels"].get(k) == v
                                                for k, v in deployment["spec"]["selector"]["matchLabels"].items()):
                        del self.objects[key]
                        return  # one per list: the wait polls

    def get(self, api: Any, resource: Any, name: str, namespace: str | None = None, **kw: Any) -> Obj:
        self.requests.append(("get", resource.group, resource.plural, namespace, name))
        return super().get(api, resource, name, namespace, **kw)

    def patch(self, api: Any, resource: Any, name: str, body: Any, namespace: str | None = None, *,
              subresource: str | None = None, **kw: Any) -> Obj:
        plural = f"{resource.plural}/{subresource}" if subresource else resource.plural
        self.requests.append(("patch", resource.group, plural, namespace, name))
        return super().patch(api, resource, name, body, namespace, subresource=subresource, **kw)

    def writes(self) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[0] == "patch"]


class Slurm(FakeSlurm):
    """Slurm's truth, listed or read a node at a time; ``between(reads)`` runs before each list or
    single-node read, with how many came before (a person at the keyboard)."""

    def __init__(self, *nodes: Node) -> None:
        super().__init__(*nodes)
        self.between: Callable[[int], None] = lambda reads: None
        self.reads = 0
        self.closed = False

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot[Node]:
        self.between(self.reads)
        self.reads += 1
        self.calls.append(("list", "", None))
        if self.read_error is not None:
            raise self.read_error
        return Snapshot(items=tuple(self.nodes.values()), last_update=1)

    def read_node(self, name: str) -> Node:
        self.between(self.reads)
        self.reads += 1
        self.calls.append(("read", name, None))
        if self.read_error is not None:
            raise self.read_error
        if name not in self.nodes:
            raise NotFound(f"no Slurm node {name!r}")
        return self.nodes[name]

    def drain(self, name: str, reason: str) -> None:
        self.nodes[name] = Node(name, state="IDLE+DRAIN", reason=reason)

    def close(self) -> None:
        self.closed = True


def deployment(replicas: int = 2) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "sunk-syncer", "namespace": "slurm", "labels": dict(SYNCER)},
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(SYNCER)}}}


def pod(name: str, labels: dict[str, str], node: str = "", annotations: dict[str, str] | None = None,
        namespace: str = "slurm") -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                         "annotations": dict(annotations or {})},
            "spec": {"nodeName": node} if node else {}}


def k8s_node(name: str, *taints: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"taints": list(taints)}}


def uninstalled_release(monkeypatch: Any, namespace: str = "slurm", slurmd_namespace: str = "slurm") -> Kube:
    """The apiserver as a release stands when uninstalled: the Syncer (2 replicas) locked worker-1 for a
    job, a Node of another Kubernetes tenant carries a lock too, and a slurmd Pod has a pre-hook's lock
    request. (The Syncer's Deployment in ``namespace``, the slurmd Pods in ``slurmd_namespace``.)"""
    k = Kube().install(monkeypatch)
    syncer = deployment()
    syncer["metadata"]["namespace"] = namespace
    k.put("deployments", syncer)
    k.put("pods", pod("sunk-syncer-a", SYNCER, "infra-1", namespace=namespace))
    k.put("pods", pod("sunk-syncer-b", SYNCER, "infra-2", namespace=namespace))
    k.put("pods", pod("node1", SLURMD, "worker-1", {names.LOCK_KEY: "locked_strict",
                                                    f"{names.LOCK_REQUEST_PREFIX}42": '{"strict":true,"at":1.0}',
                                                    "example.com/mine": "kept"}, namespace=slurmd_namespace))
    k.put("pods", pod("node2", SLURMD, "worker-2", {names.LOCK_KEY: "false"}, namespace=slurmd_namespace))
    k.put("pods", pod("node3", SLURMD, "worker-3", namespace=slurmd_namespace))
    for name in ("node5", "node7", "node8"):  # (on Nodes without a lock)
        k.put("pods", pod(name, SLURMD, f"worker-{name[-1]}", namespace=slurmd_namespace))
    k.put("pods", pod("web", {"app": "web"}, "worker-1", {names.LOCK_KEY: "not a slurmd Pod: left alone"},
                      namespace=slurmd_namespace))
    k.put("nodes", k8s_node("worker-1", OTHER_TAINT, LOCK))
    k.put("nodes", k8s_node("worker-2"))
    k.put("nodes", k8s_node("worker-3", {**LOCK, "effect": "NoExecute"}))
    k.put("nodes", k8s_node("other-tenant-1", LOCK))
    return k


def drained_slurm() -> Slurm:
    """The drains of sunk's lock (one on a DOWN node), sunk's drains whose cause outlives it (node7, node8),
    a person's, the prolog's; node9, drained by sunk's lock, runs no slurmd Pod of this release."""
    return Slurm(Node("node1", state="ALLOCATED+DRAIN", reason=SUNKS),
                 Node("node2", state="IDLE+DRAIN", reason=PERSONS),
                 Node("node3", state="IDLE+DRAIN", reason="k8s: sunk-lock: job 7: lock timeout after 30s: "
                                                          "lock still pending"),
                 Node("node4", state="IDLE+DRAIN", reason=PROLOGS),
                 Node("node5", state="DOWN+DRAIN", reason="k8s: sunk-lock: job 8: hook API unreachable"),
                 Node("node6", state="IDLE"),
                 Node("node7", state="IDLE+DRAIN", reason=STANDING),
                 Node("node8", state="IDLE+DRAIN", reason="k8s: node worker-8 is cordoned: disk"),
                 Node("node9", state="IDLE+DRAIN", reason="k8s: sunk-lock: job 9: hook API unreachable"))


class Clock:
    """time.monotonic and time.sleep: time passes only by sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
