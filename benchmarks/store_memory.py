"""What the Syncer's and sunk-scheduler's Pod stores, the Syncer's Node store and the DRA stores (a claim per Pod,
a slice per node) hold, whole and trimmed, and
how long a full garbage collection pauses over them (issue 37 goal 5), in process.

No cluster: N Pods and M Nodes shaped like real ones (managedFields, kubectl's last-applied copy, containers
with env and mounts, volumes, container statuses; a Node's images, addresses, capacity and conditions) are
decoded from JSON one by one, as the informer decodes each watch event, and kept in a dict by key, whole or
through the transform the Syncer's assembly gives the informer (``sunk/translate/objects.py``). tracemalloc
counts the bytes the dict and what it holds keep after the whole objects are dropped. It measures the store
only: not the process's RSS, not the indexes, not the JSON read buffers; the dev cluster's figure is
``python -m benchmarks.scale`` (docs/benchmarks.md). Whole stores are measured only up to ``--whole-up-to``
objects (10k whole Pods hold about 1.2 GB): beyond it their per-object figure is the one at that count.

GC pauses, over the trimmed stores of both daemons held together (what a process holds once synced): the
time of each generation-2 collection the interpreter runs by itself while the store fills (``gc.callbacks``),
then of ``--gc-rounds`` full ``gc.collect()`` passes over the held store, with and without ``gc.freeze()``
after the fill (the informer's option: frozen objects are never walked again).

    python -m benchmarks.store_memory --pods 100000 --nodes 5000
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Optional

import attrs

from scheduler.locktaint import scheduler_slim_node
from sunk.model.types import Obj
from sunk.translate.dra import DeviceMapping
from sunk.translate.drastores import slim_claim, slim_slice
from sunk.translate.objects import LAST_APPLIED, syncer_slim_node
from sunk.translate.podstores import scheduler_slim_pod, syncer_slim_pod

STAMP = "2030-01-01T00:00:00Z"


def _managed_fields(writers: int, fields: int) -> list[Obj]:
    return [{"manager": f"writer-{w}", "operation": "Update", "apiVersion": "v1", "time": STAMP,
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {f"f:field-{f}": {} for f in range(fields)}}}
            for w in range(writers)]


def _container(i: int) -> Obj:
    return {"name": f"c{i}", "image": f"registry.example.com/team/trainer:{i}.0.0",
            "command": ["python", "-m", "train", "--config", "/etc/train/config.yaml"],
            "env": [{"name": f"ENV_VARIABLE_{k}", "value": f"value-of-the-variable-number-{k}"} for k in range(40)],
            "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}},
            "volumeMounts": [{"name": f"v{k}", "mountPath": f"/mnt/v{k}"} for k in range(10)]}


def pod_json(i: int, nodes: int) -> str:
    """One Pod as the apiserver's JSON: about 30 KB, the low end of what issue 37 saw of real ones."""
    name = f"train-{i}"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": f"team-{i % 20}", "uid": f"00000000-0000-0000-0000-{i:012d}",
                        "resourceVersion": str(1000 + i), "creationTimestamp": STAMP,
                        "labels": {"app": "train", "batch.kubernetes.io/job-name": f"train-{i // 8}"},
                        "annotations": {LAST_APPLIED: json.dumps({"spec": {"containers": [_container(0)]}}),
                                        "sunk.coreweave.com/job-id": str(i)},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"train-{i // 8}",
                                             "uid": f"job-{i // 8}", "controller": True}],
                        "managedFields": _managed_fields(4, 120)},
           "spec": {"nodeName": f"worker-{i % max(nodes, 1)}", "schedulerName": "sunk-scheduler",
                    "containers": [_container(c) for c in range(3)],
                    "volumes": [{"name": f"v{k}", "configMap": {"name": f"config-{k}"}} for k in range(10)],
                    "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}]},
           "status": {"phase": "Running", "podIP": "10.0.0.7", "startTime": STAMP,
                      "conditions": [{"type": t, "status": "True", "lastTransitionTime": STAMP}
                                     for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
                      "containerStatuses": [{"name": f"c{c}", "ready": True, "restartCount": 0,
                                             "image": f"registry.example.com/team/trainer:{c}.0.0",
                                             "imageID": "sha256:" + f"{i:064d}", "containerID": f"containerd://{i:064d}",
                                             "state": {"running": {"startedAt": STAMP}}} for c in range(3)]}}
    return json.dumps(pod)


def gpu_cloud_labels(name: str) -> dict[str, str]:
    """The labels a GPU cloud's Node carries (node-feature-discovery, the GPU operator, topology, the cloud's
    own): thirty, the same on every Node of a pool but its hostname and rack."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": "us-east-1a",
              "node.kubernetes.io/instance-type": "gpu-h100-8x",
              "cloud.example.com/rack": f"rack-{sum(map(ord, name)) % 64}",
              "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
              "nvidia.com/gpu.memory": "81559", "nvidia.com/cuda.driver.major": "550",
              "nvidia.com/cuda.driver.minor": "54", "nvidia.com/cuda.runtime.major": "12",
              "nvidia.com/gpu.family": "hopper", "nvidia.com/mig.capable": "true", "nvidia.com/gpu.present": "true",
              "gpu.nvidia.com/class": "H100", "gpu.nvidia.com/model": "H100_NVLINK_80GB",
              "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
              "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
              "feature.node.kubernetes.io/kernel-version.full": "6.8.0-45-generic",
              "feature.node.kubernetes.io/pci-10de.present": "true",
              "feature.node.kubernetes.io/network-sriov.capable": "true",
              "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
              "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
              "node-role.kubernetes.io/gpu-worker": "", "cloud.example.com/pool": "h100-pool-a",
              "cloud.example.com/ib-fabric": "fabric-1", "cloud.example.com/reserved": "false",
              "cloud.example.com/image": "gpu-node-2026-11"}
    return labels


def node_json(i: int, labels: Optional[dict[str, str]] = None) -> str:
    """One Node as the apiserver's JSON: its images list (50 here) is most of it."""
    name = f"worker-{i}"
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"node-{i:012d}", "resourceVersion": str(i), "creationTimestamp": STAMP,
                         "labels": labels if labels is not None else {"kubernetes.io/hostname": name,
                                                                      "nvidia.com/gpu.product": "H100"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                         "managedFields": _managed_fields(6, 60)},
            "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24", "providerID": f"cloud://{name}", "taints": []},
            "status": {"conditions": [{"type": t, "status": "False", "reason": f"Kubelet{t}", "message": "fine",
                                       "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP}
                                      for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
                       "addresses": [{"type": "InternalIP", "address": f"10.1.{i // 256 % 256}.{i % 256}"}],
                       "capacity": {"cpu": "128", "memory": "2Ti", "nvidia.com/gpu": "8"},
                       "images": [{"names": [f"registry.example.com/image-{k}@sha256:{i:064d}"], "sizeBytes": 10 ** 9}
                                  for k in range(50)],
                       "nodeInfo": {"kernelVersion": "6.8", "kubeletVersion": "v1.34.0"}}}
    return json.dumps(node)


GPU_DRIVER = "gpu.nvidia.com"
GPU_MAPPING = DeviceMapping(GPU_DRIVER, frozenset({"gpu.nvidia.com"}), attribute="index")


def claim_json(i: int, nodes: int) -> str:
    """One Pod's ResourceClaim of 8 GPUs, allocated and prepared, as the apiserver's JSON: made from a template
    by kube-controller-manager, its allocation by a scheduler, its devices' status by the driver (three writers)."""
    node = f"worker-{i % max(nodes, 1)}"
    requests = [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                                             "count": 8}}]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": f"train-{i}-gpus-x7k2q", "namespace": f"team-{i % 20}",
                          "uid": f"00000000-0000-0000-0001-{i:012d}", "resourceVersion": str(5000 + i),
                          "creationTimestamp": STAMP, "finalizers": ["resource.kubernetes.io/delete-protection"],
                          "annotations": {"resource.kubernetes.io/pod-claim-name": "gpus"},
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"train-{i}",
                                               "uid": f"00000000-0000-0000-0000-{i:012d}", "controller": True,
                                               "blockOwnerDeletion": True}],
                          "managedFields": _managed_fields(3, 20)},
             "spec": {"devices": {"requests": requests}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "gpus", "driver": GPU_DRIVER, "pool": node, "device": f"gpu-{g}"} for g in range(8)]},
                 "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                     {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
                 "reservedFor": [{"resource": "pods", "name": f"train-{i}",
                                  "uid": f"00000000-0000-0000-0000-{i:012d}"}],
                 "devices": [{"driver": GPU_DRIVER, "pool": node, "device": f"gpu-{g}",
                              "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                                              "message": "the device is prepared", "lastTransitionTime": STAMP}],
                              "data": {"uuid": f"GPU-{i:08d}-{g:04d}-2222-3333-444455556666"}} for g in range(8)]}}
    return json.dumps(claim)


def slice_json(i: int) -> str:
    """One Node's ResourceSlice of 8 whole GPUs, each with the attributes a GPU driver publishes."""
    node = f"worker-{i}"
    devices = [{"name": f"gpu-{g}", "attributes": {
        "index": {"int": g}, "minor": {"int": g}, "type": {"string": "gpu"},
        "uuid": {"string": f"GPU-{i:08d}-{g:04d}-2222-3333-444455556666"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"}, "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "570.124.6"}, "cudaDriverVersion": {"version": "12.8.0"},
        "pcieBusID": {"string": f"0000:{g:02x}:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{g:02x}"}},
        "capacity": {"memory": {"value": "80Gi"}}} for g in range(8)]
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": f"{node}-{GPU_DRIVER}-abcde", "uid": f"00000000-0000-0000-0002-{i:012d}",
                        "resourceVersion": str(9000 + i), "creationTimestamp": STAMP, "generation": 1,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"node-{i:012d}",
                                             "controller": True}],
                        "managedFields": _managed_fields(1, 40)},
           "spec": {"driver": GPU_DRIVER, "nodeName": node, "devices": devices,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}
    return json.dumps(obj)


@attrs.frozen
class Held:
    """Bytes a store of ``count`` objects holds, whole and trimmed."""

    kind: str
    count: int
    whole: int
    trimmed: int

    @property
    def ratio(self) -> float:
        return self.trimmed / self.whole if self.whole else 0.0


def held_bytes(texts: Callable[[], Iterator[str]], transform: Callable[[Obj], Obj] | None) -> int:
    """What a dict of the decoded (and transformed) objects keeps, by tracemalloc, after a collection."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store: dict[str, Obj] = {}
        for text in texts():
            obj = json.loads(text)
            if transform is not None:
                obj = transform(obj)
            meta = obj["metadata"]
            store[f"{meta.get('namespace', '')}/{meta['name']}"] = obj
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        del store
        return held
    finally:
        tracemalloc.stop()


def measure(pods: int, nodes: int, whole_up_to: int) -> list[Held]:
    """Each store whole (at most ``whole_up_to`` objects, scaled to ``count``) and trimmed."""
    def texts(make: Callable[[int], str], count: int) -> Callable[[], Iterator[str]]:
        return lambda: (make(i) for i in range(count))

    def whole(make: Callable[[int], str], count: int) -> int:
        sample = min(count, whole_up_to)
        return held_bytes(texts(make, sample), None) * count // max(sample, 1)

    def pod(i: int) -> str:
        return pod_json(i, nodes)

    def claim(i: int) -> str:
        return claim_json(i, nodes)

    def labelled_node(i: int) -> str:
        return node_json(i, gpu_cloud_labels(f"worker-{i}"))

    whole_pods = whole(pod, pods)
    return [Held("Syncer pods", pods, whole_pods, held_bytes(texts(pod, pods), syncer_slim_pod)),
            Held("scheduler pods", pods, whole_pods, held_bytes(texts(pod, pods), scheduler_slim_pod)),
            Held("Syncer nodes", nodes, whole(node_json, nodes), held_bytes(texts(node_json, nodes), syncer_slim_node)),
            Held("scheduler nodes (30 labels)", nodes, whole(labelled_node, nodes),
                 held_bytes(texts(labelled_node, nodes), scheduler_slim_node)),
            Held("DRA claims (one per Pod)", pods, whole(claim, pods), held_bytes(texts(claim, pods), slim_claim)),
            Held("DRA slices (one per node)", nodes, whole(slice_json, nodes),
                 held_bytes(texts(slice_json, nodes), slim_slice(GPU_MAPPING)))]


@attrs.frozen
class Pauses:
    """Garbage collection pauses over a store, in seconds."""

    during_fill: tuple[float, ...]  # the generation-2 collections the interpreter ran by itself while it filled
    full: tuple[float, ...]  # gc.collect() over the held store, after the fill
    frozen: bool

    @staticmethod
    def describe(times: tuple[float, ...]) -> str:
        if not times:
            return "none"
        ordered = sorted(times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (f"{len(times)}: p50 {statistics.median(times) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
                f"max {max(times) * 1000:.1f} ms")


def gc_pauses(pods: int, nodes: int, rounds: int, freeze: bool) -> Pauses:
    """Fill both daemons' trimmed stores (as one process would hold the larger, the Syncer's, plus Nodes),
    timing the interpreter's own full collections, then ``rounds`` full collections; ``freeze``: after the fill."""
    during: list[float] = []
    started: list[float] = []

    def timer(phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            during.append(time.perf_counter() - started.pop())

    gc.collect()
    gc.callbacks.append(timer)
    try:
        store: dict[str, Obj] = {}
        for i in range(pods):
            store[f"syncer/{i}"] = syncer_slim_pod(json.loads(pod_json(i, nodes)))
            store[f"scheduler/{i}"] = scheduler_slim_pod(json.loads(pod_json(i, nodes)))
        for i in range(nodes):
            store[f"node/{i}"] = syncer_slim_node(json.loads(node_json(i)))
    finally:
        gc.callbacks.remove(timer)
    if freeze:
        gc.freeze()
    try:
        full = []
        for _ in range(rounds):
            begin = time.perf_counter()
            gc.collect()
            full.append(time.perf_counter() - begin)
    finally:
        if freeze:
            gc.unfreeze()
        del store
        gc.collect()
    return Pauses(tuple(during), tuple(full), freeze)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--whole-up-to", type=int, default=10_000, help="whole objects measured at most (scaled)")
    parser.add_argument("--gc-rounds", type=int, default=20, help="full collections timed over the held store")
    args = parser.parse_args(argv)
    sample = len(pod_json(0, args.nodes))
    print(f"one Pod's JSON: {sample / 1024:.1f} KB; one Node's: {len(node_json(0)) / 1024:.1f} KB; one claim's: "
          f"{len(claim_json(0, args.nodes)) / 1024:.1f} KB; one slice's: {len(slice_json(0)) / 1024:.1f} KB")
    for held in measure(args.pods, args.nodes, args.whole_up_to):
        print(f"{held.kind}: {held.count} held in {held.whole / 2**20:.1f} MB whole, {held.trimmed / 2**20:.1f} MB "
              f"trimmed ({held.ratio:.1%}); {held.whole / max(held.count, 1) / 1024:.1f} -> "
              f"{held.trimmed / max(held.count, 1) / 1024:.2f} KB each")
    for freeze in (False, True):
        pauses = gc_pauses(args.pods, args.nodes, args.gc_rounds, freeze)
        print(f"GC over both trimmed Pod stores and the Node store{' (frozen after the fill)' if freeze else ''}: "
              f"gen-2 while filling {Pauses.describe(pauses.during_fill)}; "
              f"full collections {Pauses.describe(pauses.full)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
