"""Pods and Nodes as the apiserver sends them (managedFields, kubectl's copy, containers, volumes, statuses,
a Node's images): what the store transforms' tests trim and compare decisions on (test_syncer_slim.py,
test_scheduler_slim.py)."""

from __future__ import annotations

import json

from sunk.model import names
from sunk.model.types import Obj
from sunk.translate.objects import LAST_APPLIED

THEN = "2030-01-01T00:00:00Z"


def managed_fields(n: int) -> list[Obj]:
    """What the apiserver records of each writer: a field set per manager, as large as the object."""
    return [{"manager": f"writer-{i}", "operation": "Update", "apiVersion": "v1", "time": THEN,
             "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:containers": {f'k:{{"name":"c{j}"}}': {"f:env": {f"f:E{k}": {}
                                                                                         for k in range(20)}}
                                                      for j in range(3)}}}} for i in range(n)]


def container(i: int) -> Obj:
    return {"name": f"c{i}", "image": f"registry.example.com/team/trainer:{i}.0.0",
            "command": ["python", "-m", "train", "--config", "/etc/train/config.yaml"],
            "env": [{"name": f"ENV_VARIABLE_{k}", "value": f"value-of-the-variable-number-{k}"} for k in range(40)],
            "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                          "limits": {"nvidia.com/gpu": "8"}},
            "volumeMounts": [{"name": f"v{k}", "mountPath": f"/mnt/v{k}"} for k in range(10)]}


def fat_pod(name: str = "train-0", *, node: str = "worker-1", namespace: str = "team-a",
            annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            scheduler: str = "sunk-scheduler", tolerations: list[Obj] | None = None, phase: str = "Running",
            deleting: bool = False, owner_job: bool = False, hostname: str | None = None) -> Obj:
    """A Pod as the apiserver sends it: managedFields, kubectl's copy, containers, volumes, statuses."""
    meta: Obj = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "123",
                 "creationTimestamp": THEN, "generateName": "train-",
                 "labels": {"app": "train", **(labels or {})},
                 "annotations": {LAST_APPLIED: json.dumps({"spec": {"containers": [container(0)]}}),
                                 **(annotations or {})},
                 "managedFields": managed_fields(4)}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-02T00:00:00Z"
    if owner_job:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid",
                                    "controller": True}]
    spec: Obj = {"nodeName": node, "schedulerName": scheduler, "containers": [container(i) for i in range(3)],
                 "volumes": [{"name": f"v{k}", "configMap": {"name": f"config-{k}"}} for k in range(10)],
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                  "effect": "NoExecute", "tolerationSeconds": 300}, *(tolerations or [])]}
    if hostname:
        spec["hostname"] = hostname
    status: Obj = {"phase": phase, "podIP": "10.0.0.7", "startTime": THEN,
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": THEN},
                                  {"type": "Ready", "status": "True", "lastTransitionTime": THEN}],
                   "containerStatuses": [{"name": f"c{i}", "ready": True, "restartCount": 0,
                                          "image": f"registry.example.com/team/trainer:{i}.0.0",
                                          "imageID": "sha256:" + "0" * 64, "containerID": "containerd://" + "1" * 64,
                                          "state": {"running": {"startedAt": THEN}}} for i in range(3)]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def fat_node(name: str = "worker-1", *, taints: list[Obj] | None = None, cordoned: bool = False,
             reason: str | None = None, ready: str = "True", deleting: bool = False) -> Obj:
    meta: Obj = {"name": name, "uid": f"uid-{name}", "resourceVersion": "77", "creationTimestamp": THEN,
                 "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "H100"},
                 "annotations": {"node.alpha.kubernetes.io/ttl": "0", LAST_APPLIED: "{}"},
                 "managedFields": managed_fields(6)}
    if reason:
        meta["annotations"][names.ANN_CORDON_REASON] = reason
    if deleting:
        meta["deletionTimestamp"] = "2030-01-02T00:00:00Z"
    conditions = [{"type": t, "status": "False", "reason": f"Kubelet{t}", "message": "kubelet is fine",
                   "lastHeartbeatTime": THEN, "lastTransitionTime": THEN}
                  for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conditions.append({"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "ready",
                       "lastHeartbeatTime": THEN, "lastTransitionTime": THEN})
    spec: Obj = {"podCIDR": "10.0.1.0/24", "providerID": f"cloud://{name}", "taints": taints or []}
    if cordoned:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec,
            "status": {"conditions": conditions,
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "capacity": {"cpu": "128", "memory": "2Ti", "nvidia.com/gpu": "8"},
                       "allocatable": {"cpu": "127", "memory": "2Ti", "nvidia.com/gpu": "8"},
                       "images": [{"names": [f"registry.example.com/image-{i}@sha256:{'2' * 64}",
                                             f"registry.example.com/image-{i}:v1"], "sizeBytes": 10 ** 9}
                                  for i in range(50)],
                       "nodeInfo": {"kernelVersion": "6.8", "kubeletVersion": "v1.34.0",
                                    "containerRuntimeVersion": "containerd://2.1"}}}
