"""The scheduler's CPU per event at two cluster sizes, with stand-in objects (issue 37 goal 4).

    python -m benchmarks.scheduler_events [--small 500:10000] [--large 5000:100000] [--repeat 2000]

No cluster: the scheduler's own code over stand-in objects. ``NODES:PODS`` is a size: NODES slurmd Pods
(one per Slurm node, each on its Node) in a real ``ThreadSafeStore`` with the scheduler's indexes, and
PODS Pods with a running placeholder job each, spread over the nodes, in the scheduler's ``JobIndex``
(one in ten not bound yet). Each event is timed in process CPU (``time.process_time``) over
``--repeat`` runs, and its figure is CPU per event at each size and their ratio (the goal: at most 1.2):

- ``lookup``: what a reconcile asks of the slurmd Pods: the Node of its job's Slurm node, and a bound
  gang member's Slurm node from its Node;
- ``churn``: a slurmd Pod's lock annotation written (7 to 9 per job) through the slurmd handlers;
- ``comes_and_goes``: a slurmd Pod made for a Slurm node (a replacement), then deleted, through the same
  handlers: two events, each waking the Pods Slurm placed on that node;
- ``sweep_tick``: one tick of the sweeper (every ``resync_seconds``).

Each of ``--rounds`` rounds times every event at both sizes in turn; the figures are the medians, and
the spread is the rounds' ratios. ``--before`` also times the code this replaced, with the same
objects: the map rebuilt from every slurmd Pod at each reconcile, every Pod walked at each slurmd
event, every key swept at each tick.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from scheduler.assembly import attach_slurmd_feed, sweep_of
from scheduler.config import SWEEP_BATCH
from scheduler.jobindex import JobIndex
from scheduler.reconciler import PodIndex, SlurmdNodes
from sunk import names
from sunk.kube.store import ObjList, StrList, ThreadSafeStore, pod_node_name
from sunk.slurm.models import Job
from sunk.translate import slurmd
from sunk.translate.gang import owner_of
from sunk.types import Obj


class StandInInformer:
    """A real store with its indexes, and handlers called after each write, as the informer's are."""

    def __init__(self) -> None:
        self.store = ThreadSafeStore()
        self.updates: list[Callable[[Obj, Obj], None]] = []
        self.adds: list[Callable[[Obj], None]] = []
        self.deletes: list[Callable[[Obj], None]] = []

    def add_indexer(self, name: str, func: Any) -> None:
        self.store.add_indexer(name, func)

    def add_handler(self, on_add: Any = None, on_update: Any = None, on_delete: Any = None) -> None:
        if on_add is not None:
            self.adds.append(on_add)
        if on_update is not None:
            self.updates.append(on_update)
        if on_delete is not None:
            self.deletes.append(on_delete)

    def get(self, key: str) -> Obj | None:
        return self.store.get(key)

    def list(self) -> ObjList:
        return self.store.list()

    def keys(self) -> StrList:
        return self.store.keys()

    def by_index(self, name: str, value: str) -> ObjList:
        return self.store.by_index(name, value)

    def put(self, key: str, obj: Obj) -> None:
        old = self.store.add(key, obj)
        if old is None:
            for on_add in self.adds:
                on_add(obj)
        else:
            for on_update in self.updates:
                on_update(old, obj)

    def remove(self, key: str) -> None:
        old = self.store.delete(key)
        if old is not None:
            for on_delete in self.deletes:
                on_delete(old)


def slurmd_pod(i: int, created: str = "2030-01-01T00:00:00Z") -> Obj:
    return {"metadata": {"name": f"node-{i}", "namespace": "slurm", "uid": f"slurmd-{i}", "creationTimestamp": created,
                         "annotations": {}, "labels": {"app.kubernetes.io/name": "slurmd"}},
            "spec": {"hostname": f"node-{i}", "nodeName": f"worker-{i}"}, "status": {"phase": "Running"}}


def pod(i: int, nodes: int) -> Obj:
    bound = i % 10 != 0
    return {"metadata": {"name": f"p-{i}", "namespace": "ns", "uid": f"uid-{i}"},
            "spec": {"schedulerName": "sunk", "nodeName": f"worker-{i % nodes}" if bound else None}}


def parse(job: Job) -> tuple[str, bool] | None:
    return (job.admin_comment, True) if job.admin_comment.startswith("uid-") else None


class Size:
    """One cluster of stand-ins, wired as ``assemble`` wires the scheduler's slurmd handlers."""

    def __init__(self, nodes: int, pods: int):
        self.nodes, self.pods = nodes, pods
        self.slurmd = StandInInformer()
        for i in range(nodes):
            self.slurmd.put(f"slurm/node-{i}", slurmd_pod(i))
        self.lookups = SlurmdNodes(self.slurmd)
        self.pod_store = StandInInformer()
        self.pod_index = PodIndex(self.pod_store)
        self.jobs = JobIndex(parse)
        for i in range(pods):
            self.pod_store.put(f"ns/p-{i}", pod(i, nodes))
            self.jobs.upsert(Job(id=i + 1, state="RUNNING", nodes=f"node-{i % nodes}", admin_comment=f"uid-{i}"), 1.0)
        self.enqueued: set[str] = set()
        attach_slurmd_feed(self.slurmd, self.jobs, self.enqueued.add)
        self.sweep = sweep_of(self.pod_index, self.jobs, self.enqueued.add, SWEEP_BATCH)
        self.round = 0

    # -- the events, as the scheduler meets them now --------------------------------------------------------------
    def lookup(self) -> None:
        self.round += 1
        i = self.round % self.nodes
        self.lookups.mapping().get(f"node-{i}")
        self.lookups.slurm_node_on(f"worker-{i}")

    def churn(self) -> None:
        self.round += 1
        i = self.round % self.nodes
        new = copy.deepcopy(self.slurmd.get(f"slurm/node-{i}"))
        assert new is not None
        new["metadata"]["annotations"][names.LOCK_KEY] = f"locked-{self.round}"
        self.slurmd.put(f"slurm/node-{i}", new)

    def comes_and_goes(self) -> None:
        self.round += 1
        i = self.round % self.nodes  # a replacement overlapping node-i's Pod, on the same Node: made, then gone
        key = f"slurm/node-{i}-new"
        self.slurmd.put(key, {**slurmd_pod(i, "2030-02-01T00:00:00Z"),
                              "metadata": {**slurmd_pod(i)["metadata"], "name": f"node-{i}-new"}})
        self.slurmd.remove(key)

    def sweep_tick(self) -> None:
        self.sweep.tick()

    # -- the same events in the code this replaced ----------------------------------------------------------------
    def lookup_before(self) -> None:
        self.round += 1
        i = self.round % self.nodes
        node_of = slurmd.node_of(self.slurmd.list())
        node_of.get(f"node-{i}")
        {k8s: name for name, k8s in node_of.items()}.get(f"worker-{i}")

    def churn_before(self) -> None:
        self.round += 1
        for p in self.pod_store.list():  # (each slurmd event walked every Pod)
            if not pod_node_name(p):
                self.enqueued.add(p["metadata"]["uid"])

    def comes_and_goes_before(self) -> None:
        self.churn_before()
        self.churn_before()

    def sweep_tick_before(self) -> None:
        for key in {owner_of(p) for p in self.pod_store.list()} | self.jobs.uids():
            self.enqueued.add(key)


def cpu_per_event(event: Callable[[], None], repeat: int) -> float:
    """Seconds of this process's CPU per call, over ``repeat`` calls."""
    start = time.process_time()
    for _ in range(repeat):
        event()
    return (time.process_time() - start) / repeat


def parse_size(text: str) -> tuple[int, int]:
    nodes, _, pods = text.partition(":")
    return int(nodes), int(pods)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=parse_size, default=(500, 10_000), help="NODES:PODS (500:10000)")
    parser.add_argument("--large", type=parse_size, default=(5000, 100_000), help="NODES:PODS (5000:100000)")
    parser.add_argument("--repeat", type=int, default=2000,
                        help="calls timed per event and round (the old code's: 1/100)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each timing every event at both sizes in turn")
    parser.add_argument("--before", action="store_true", help="also time the code this replaced")
    args = parser.parse_args(argv)
    sizes = {"small": Size(*args.small), "large": Size(*args.large)}  # (both in one heap: neither has it to itself)
    events = ["lookup", "churn", "comes_and_goes", "sweep_tick"]
    if args.before:
        events += [f"{event}_before" for event in events]
    ratios: dict[str, list[float]] = {event: [] for event in events}
    cpu: dict[str, dict[str, list[float]]] = {event: {"small": [], "large": []} for event in events}
    for _ in range(args.rounds):
        for event in events:
            repeat = max(3, args.repeat // 100) if event.endswith("_before") else args.repeat
            for label, size in sizes.items():
                cpu[event][label].append(cpu_per_event(getattr(size, event), repeat))
            ratios[event].append(cpu[event]["large"][-1] / cpu[event]["small"][-1])
    print(f"{'event':<26}{'small µs':>10}{'large µs':>11}{'large/small':>13}  {'rounds (min-max)':<18}"
          f"small {args.small[0]} nodes, {args.small[1]} Pods; large {args.large[0]}, {args.large[1]}; "
          f"{args.rounds} rounds, medians")
    for event in events:
        spread = ratios[event]
        print(f"{event:<26}{statistics.median(cpu[event]['small']) * 1e6:>10.1f}"
              f"{statistics.median(cpu[event]['large']) * 1e6:>11.1f}{statistics.median(spread):>13.2f}  "
              f"{min(spread):.2f}-{max(spread):.2f}")
    print(json.dumps({"small": args.small, "large": args.large, "cpu_seconds_per_event": cpu, "ratios": ratios}),
          file=sys.stderr)
    return 0


__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
