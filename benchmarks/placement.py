"""What keeping Pods off the Nodes they do not admit costs sunk-scheduler at submission, in process.

A Pod's nodeSelector, required node affinity and tolerations are read against the Node of each Slurm
node (scheduler/placement.py, docs/translation.md). Measured, over ``--rounds`` rounds (median, and the
rounds' spread):

- a selecting Pod's exclusion computed afresh (the cache missed: the first Pod of a template after a Node
  or slurmd Pod changed), at ``--small`` and ``--nodes`` Slurm nodes, and their ratio: the walk is
  linear in the nodes by design (kube-scheduler's filters read every Node too), paid once per set of
  selectors and change, not per Pod;
- a Pod's exclusion found in the cache (every other Pod of the template), with ``--tainted`` tainted Nodes;
- a Pod that selects nothing while no Node is tainted (the common path: what every Pod pays);
- a Node event with ``--waiting`` units waiting for a Node to admit them (``NodePlacement.changed``);
- a selecting Pod whose job names a partition (half the nodes): from the cache, and judged against a new list
  of partitions (the first Pod of a template after a list; the list itself, Slurm's call, is not timed).

    python -m benchmarks.placement --nodes 5000 --small 500 --rounds 5
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

from scheduler.placement import PARTITIONS_MAX_AGE, NodePlacement, PartitionNodes
from sunk.model.slurm import Partition

TOLERATIONS = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300},
               {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300}]
SELECTING = {"metadata": {"uid": "u"}, "spec": {
    "nodeSelector": {"pool": "inference"}, "tolerations": TOLERATIONS,
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["H100", "H200"]},
                              {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["z9"]}]}]}}}}}
PLAIN = {"metadata": {"uid": "u"}, "spec": {"tolerations": TOLERATIONS}}


def node(i: int, tainted: bool = False) -> dict[str, Any]:
    """A Node's labels as a GPU cloud's are (about 30: hostname, zone, GPU class, feature discovery's)."""
    labels = {f"feature.node.kubernetes.io/cpu-cpuid.F{k}": "true" for k in range(24)}
    labels.update({"kubernetes.io/hostname": f"w{i}", "topology.kubernetes.io/zone": f"z{i % 8}",
                   "gpu.nvidia.com/class": "H100" if i % 3 else "A100", "pool": "inference" if i % 2 else "train"})
    taints = [{"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}] if tainted else []
    return {"metadata": {"name": f"w{i}", "labels": labels}, "spec": {"taints": taints}}


def world(count: int, tainted: int = 0, partitions: str = "") -> NodePlacement:
    """``count`` Slurm nodes n0.. on Nodes w0..; with ``partitions``, Slurm's partitions too: inference (the odd
    nodes), train (the even ones), listed from memory once ("kept") or again at every ask ("new": a clock that
    moves past the list's age each time it is read)."""
    nodes = {f"w{i}": node(i, i < tainted) for i in range(count)}
    mapping = {f"n{i}": f"w{i}" for i in range(count)}
    listed = (Partition("inference", tuple(f"n{i}" for i in range(1, count, 2))),
              Partition("train", tuple(f"n{i}" for i in range(0, count, 2))))
    ticks = itertools.count(step=PARTITIONS_MAX_AGE if partitions == "new" else 0)
    lists = PartitionNodes(lambda: listed, clock=lambda: float(next(ticks))) if partitions else None
    placement = NodePlacement(lambda: mapping, nodes.get, lambda name: "n" + name[1:] if name in nodes else None,
                              partitions=lists)
    for each in nodes.values():
        placement.node_changed(None, each)
    return placement


def per_call(action: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        action()
    return (time.perf_counter() - start) / calls


def fresh(placement: NodePlacement) -> Callable[[], Any]:
    def run() -> Any:
        placement.changed()  # (what a Node's relabelling does: the next ask computes it again)
        return placement.exclusion([SELECTING])
    return run


def spread(values: list[float], scale: float, unit: str) -> str:
    return (f"{statistics.median(values) * scale:.2f} {unit} (rounds {min(values) * scale:.2f}-"
            f"{max(values) * scale:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--tainted", type=int, default=50)
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    large, small = world(args.nodes), world(args.small)
    cached = world(args.nodes, args.tainted)
    untainted = world(args.nodes)
    waking = world(args.nodes)
    for unit in range(args.waiting):
        waking.wait(f"unit-{unit}", [SELECTING], 0)
    relabelled = node(1)
    kept_list, new_list = world(args.nodes, partitions="kept"), world(args.nodes, partitions="new")
    kept_list.exclusion([SELECTING], ("inference",))
    new_list.exclusion([SELECTING], ("inference",))
    rows: dict[str, list[float]] = {k: [] for k in ("large", "small", "ratio", "hit", "plain", "wake", "in_kept",
                                                    "in_new")}
    for _ in range(args.rounds):
        rows["large"].append(per_call(fresh(large), 5))
        rows["small"].append(per_call(fresh(small), 50))
        rows["ratio"].append(rows["large"][-1] / rows["small"][-1])
        cached.exclusion([PLAIN])
        rows["hit"].append(per_call(lambda: cached.exclusion([PLAIN]), 20000))
        rows["plain"].append(per_call(lambda: untainted.exclusion([PLAIN]), 20000))
        rows["wake"].append(per_call(lambda: waking.changed(relabelled), 20))
        rows["in_kept"].append(per_call(lambda: kept_list.exclusion([SELECTING], ("inference",)), 20000))
        rows["in_new"].append(per_call(lambda: new_list.exclusion([SELECTING], ("inference",)), 20))
    print(f"selecting Pod, computed afresh, {args.nodes} Slurm nodes: {spread(rows['large'], 1e3, 'ms')}")
    print(f"selecting Pod, computed afresh, {args.small} Slurm nodes: {spread(rows['small'], 1e3, 'ms')}")
    print(f"  ratio {args.nodes} / {args.small}: {spread(rows['ratio'], 1, '')} (nodes ratio "
          f"{args.nodes / args.small:g})")
    print(f"any Pod, from the cache, {args.tainted} tainted Nodes: {spread(rows['hit'], 1e6, 'us')}")
    print(f"a Pod that selects nothing, no tainted Node: {spread(rows['plain'], 1e6, 'us')}")
    print(f"a Node event, {args.waiting} units waiting: {spread(rows['wake'], 1e3, 'ms')}")
    print(f"selecting Pod in a partition of {args.nodes // 2}, from the cache: {spread(rows['in_kept'], 1e6, 'us')}")
    print(f"selecting Pod in a partition of {args.nodes // 2}, judged against a new list: "
          f"{spread(rows['in_new'], 1e3, 'ms')}")


if __name__ == "__main__":
    main()
