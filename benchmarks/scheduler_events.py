"""The scheduler's CPU per event as the cluster grows ten times in nodes, in Pods, and in both (issue 37 goal 4).

    python -m benchmarks.scheduler_events [--small 500:10000] [--large 5000:100000] [--rounds 5] [--before]

No cluster: the scheduler's own code over an in-memory store and a fake Slurm. ``NODES:PODS`` is a size:
NODES slurmd Pods (one per Slurm node, each on its Node) in a real ``ThreadSafeStore`` with the scheduler's
indexes, and PODS Pods of the scheduler in another, each with its placeholder job (a real identity, parsed
by the scheduler's own ``identity_parser``) in the ``JobIndex``: nine in ten bound where Slurm runs their
job, one in ten waiting on a pending job and showing why. The handlers are the ones ``assemble`` attaches
(``attach_pod_feed``, ``attach_job_feed``, ``attach_slurmd_feed``), the reconciler a real ``PodScheduler``
whose Slurm client talks to ``sunk_dev.fakeslurm`` (a steady reconcile calls neither Slurm nor Kubernetes:
the run fails if it calls Slurm, and a Kubernetes call would fail on the missing client). Four sizes are
built: the small one, ten times the nodes (large NODES, small PODS), ten times the Pods (small NODES, large
PODS), and both; the ratios are each one ÷ the small one (the goal: at most 1.2).

Each event is timed in process CPU (``time.process_time``) over ``--repeat`` calls:

- ``lookup``: what a reconcile asks of the slurmd Pods: the Node of a Slurm node and back;
- ``slurmd_churn``: a slurmd Pod's lock annotation written (7 to 9 per job), through the slurmd handlers;
- ``slurmd_comes_and_goes``: a slurmd Pod made for a Slurm node, then deleted (two events, each waking
  the Pods Slurm placed on that node: PODS / NODES of them, so ten times more, or fewer, on an axis that
  changes only one of the two);
- ``pod_status``: a Pod's status written by its kubelet, through the Pod handlers (wakes nothing);
- ``pod_relabel``: a Pod's label changed, through the Pod handlers (wakes its unit);
- ``job_update``: a running placeholder's record read again, its time limit moved, through the job feed
  (into the index; wakes nothing);
- ``reconcile_bound``: a reconcile of a bound Pod whose job runs;
- ``reconcile_waiting``: a reconcile of a Pod whose job is pending, the Pod already showing why;
- ``sweep_tick``: one tick of the sweeper (every ``resync_seconds``), ``SWEEP_BATCH`` keys.

Keys go to a sink that forgets them every 1000 (a queue whose workers drain it), so that no size keeps
more of them than another. Each of ``--rounds`` rounds times every event at every size in turn; the
figures are the medians, and the spread is the rounds' ratios. ``--before`` also times the code this
replaced on the same objects: the map rebuilt from every slurmd Pod at each lookup, every Pod walked at
each slurmd event, every key swept at each tick.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, cast

from kubernetes.client import ApiClient

from scheduler.assembly import attach_job_feed, attach_pod_feed, attach_slurmd_feed, identity_parser, sweep_of
from scheduler.binder import Binder
from scheduler.config import SWEEP_BATCH, SchedulerConfig
from scheduler.decide import Waiting
from scheduler.jobindex import JobIndex
from scheduler.reconciler import PodIndex, PodScheduler, SlurmdNodes
from scheduler.waiting import wait_condition
from sunk.kube.events import EventRecorder
from sunk.kube.store import FuncHandler, KeyedStore, ObjList, StrList, ThreadSafeStore, pod_node_name
from sunk.model import names
from sunk.model.slurm import Job
from sunk.model.types import Obj
from sunk.slurm import connect
from sunk.slurm.client import SlurmClient
from sunk.translate import slurmd
from sunk.translate.gang import owner_of
from sunk.translate.identity import PlaceholderIdentity
from sunk.translate.keys import PodKey
from sunk_dev.fakeslurm import FakeSlurmrestd

SCHEDULER = "sunk"
SINK_SIZE = 1000
# No Kubernetes: a steady reconcile writes nothing, and any call it made would fail on this None.
NO_KUBERNETES = cast(ApiClient, None)


class StandInInformer:
    """A real store with its indexes, and handlers called after each write, as the informer's are."""

    def __init__(self) -> None:
        self.store = ThreadSafeStore()
        self.handlers: list[Any] = []
        self.observed = itertools.count(1)

    def add_indexer(self, name: str, func: Any) -> None:
        self.store.add_indexer(name, func)

    def add_handler(self, handler: Any = None, *, on_add: Any = None, on_update: Any = None,
                    on_delete: Any = None) -> None:
        self.handlers.append(handler or FuncHandler(on_add, on_update, on_delete))

    def get(self, key: str) -> Obj | None:
        return self.store.get(key)

    def list(self) -> ObjList:
        return self.store.list()

    def keys(self) -> StrList:
        return self.store.keys()

    def by_index(self, name: str, value: str) -> ObjList:
        return self.store.by_index(name, value)

    def observed_at(self) -> float:
        """(The jobs informer's: when the read behind the change was asked for; later each time.)"""
        return float(next(self.observed))

    def put(self, key: str, obj: Any) -> None:
        old = self.store.add(key, obj)
        for handler in self.handlers:
            handler.on_add(obj) if old is None else handler.on_update(old, obj)

    def remove(self, key: str) -> None:
        old = self.store.delete(key)
        if old is not None:
            for handler in self.handlers:
                handler.on_delete(old)


class StandInJobInformer(StandInInformer):
    """The jobs informer's face the job index uses: its store (by job id) takes the index's indexes."""

    def __init__(self) -> None:
        super().__init__()
        self.store = KeyedStore()  # type: ignore[assignment]
        self.listed: list[Any] = []

    def index_values(self, index_name: str) -> StrList:
        return self.store.index_values(index_name)

    def on_listed(self, handler: Any) -> None:
        self.listed.append(handler)

    def observe(self, item: Any, requested_at: float) -> bool:
        self.put(item.id, item)  # type: ignore[arg-type]
        return True


class Sink:
    """The controller's queue, drained by its workers: keeps at most SINK_SIZE keys."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.added = 0

    def add(self, key: str) -> None:
        self.added += 1
        self.keys.add(key)
        if len(self.keys) >= SINK_SIZE:
            self.keys.clear()


def slurmd_pod(i: int, created: str = "2030-01-01T00:00:00Z") -> Obj:
    return {"metadata": {"name": f"node-{i}", "namespace": "slurm", "uid": f"slurmd-{i}", "creationTimestamp": created,
                         "annotations": {}, "labels": {"app.kubernetes.io/name": "slurmd"}},
            "spec": {"hostname": f"node-{i}", "nodeName": f"worker-{i}"}, "status": {"phase": "Running"}}


def pod(i: int, nodes: int) -> Obj:
    """Pod i: bound to worker-(i % nodes) where its job runs, but one in ten, which waits for its pending job."""
    return {"metadata": {"name": f"p-{i}", "namespace": "ns", "uid": f"uid-{i}", "labels": {"app": "bench"},
                         "creationTimestamp": "2030-01-01T00:00:00Z", "annotations": {names.ANN_JOB_ID: str(i + 1)}},
            "spec": {"schedulerName": SCHEDULER, "nodeName": f"worker-{i % nodes}" if i % 10 else None,
                     "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running" if i % 10 else "Pending"}}


def job(i: int, nodes: int, time_limit: int = 60) -> Job:
    identity = PlaceholderIdentity(PodKey(f"uid-{i}"), "ns", name=f"p-{i}", scheduler=SCHEDULER).encode()
    if i % 10 == 0:
        return Job(id=i + 1, state="PENDING", state_reason="ReqNodeNotAvail", partition="all",
                   admin_comment=identity, time_limit=time_limit)
    return Job(id=i + 1, state="RUNNING", nodes=f"node-{i % nodes}", batch_host=f"node-{i % nodes}",
               partition="all", admin_comment=identity, time_limit=time_limit)


class Size:
    """One cluster of stand-ins, wired as ``assemble`` wires the scheduler."""

    def __init__(self, nodes: int, pods: int, slurm: SlurmClient):
        self.nodes, self.pods = nodes, pods
        config = SchedulerConfig(SCHEDULER, b"x" * 32, "http://hooks")
        self.sink = Sink()
        self.slurmd = StandInInformer()
        self.lookups = SlurmdNodes(self.slurmd)
        for i in range(nodes):
            self.slurmd.put(f"slurm/node-{i}", slurmd_pod(i))
        self.pod_store = StandInInformer()
        self.pod_index = PodIndex(self.pod_store)
        self.job_feed = StandInJobInformer()
        self.jobs = JobIndex(identity_parser(config), jobs=self.job_feed)  # type: ignore[arg-type]
        attach_job_feed(self.job_feed, self.jobs, self.sink.add)  # type: ignore[arg-type]
        for i in range(pods):
            self.pod_store.put(f"ns/p-{i}", pod(i, nodes))
            self.job_feed.put(i + 1, job(i, nodes))  # type: ignore[arg-type]
        attach_slurmd_feed(self.slurmd, self.jobs, self.sink.add)
        attach_pod_feed(self.pod_store, self.sink.add)
        self.scheduler = PodScheduler(api=NO_KUBERNETES, slurm=slurm, config=config, jobs=self.jobs,
                                      pods=self.pod_index, slurmd=self.lookups,
                                      recorder=EventRecorder(NO_KUBERNETES, component=SCHEDULER),
                                      binder=Binder(NO_KUBERNETES))
        self._show_waits()
        self.sweep = sweep_of(self.pod_index, self.jobs, self.sink.add, SWEEP_BATCH)
        self.round = 0

    def _show_waits(self) -> None:
        """The waiting Pods show why they wait (as after their first reconcile), so that a reconcile writes nothing."""
        for i in range(0, self.pods, 10):
            _, action, _ = self.scheduler.unit_placement(PodKey(f"uid-{i}"))
            assert isinstance(action, Waiting) and action.job_id is not None, action
            condition = wait_condition(action.job_id, action.partition, action.reason).as_condition()
            self.pod_store.put(f"ns/p-{i}", {**pod(i, self.nodes), "status": {"phase": "Pending",
                                                                               "conditions": [condition]}})

    def _next(self, every: int = 1) -> int:
        self.round += 1
        return (self.round * every) % self.pods

    # -- the events, as the scheduler meets them now --------------------------------------------------------------
    def lookup(self) -> None:
        i = self._next() % self.nodes
        self.lookups.mapping().get(f"node-{i}")
        self.lookups.slurm_node_on(f"worker-{i}")

    def slurmd_churn(self) -> None:
        i = self._next() % self.nodes
        new = copy.deepcopy(self.slurmd.get(f"slurm/node-{i}"))
        assert new is not None
        new["metadata"]["annotations"][names.LOCK_KEY] = f"locked-{self.round}"
        self.slurmd.put(f"slurm/node-{i}", new)

    def slurmd_comes_and_goes(self) -> None:
        i = self._next() % self.nodes  # a replacement overlapping node-i's Pod, on the same Node: made, then gone
        key = f"slurm/node-{i}-new"
        self.slurmd.put(key, {**slurmd_pod(i, "2030-02-01T00:00:00Z"),
                              "metadata": {**slurmd_pod(i)["metadata"], "name": f"node-{i}-new"}})
        self.slurmd.remove(key)

    def _pod_changed(self, change: Callable[[Obj], None]) -> None:
        i = self._next()
        new = copy.deepcopy(self.pod_store.get(f"ns/p-{i}"))
        assert new is not None
        change(new)
        self.pod_store.put(f"ns/p-{i}", new)

    def pod_status(self) -> None:
        self._pod_changed(lambda p: p["status"].update(podIP=f"10.0.0.{self.round % 250}"))

    def pod_relabel(self) -> None:
        self._pod_changed(lambda p: p["metadata"]["labels"].update(round=str(self.round)))

    def job_update(self) -> None:
        i = self._next(every=7) | 1  # (a running one)
        self.job_feed.put(i + 1, job(i, self.nodes, time_limit=60 + self.round))  # type: ignore[arg-type]

    def reconcile_bound(self) -> None:
        i = self._next() | 1
        self.scheduler.reconcile(f"uid-{i}")

    def reconcile_waiting(self) -> None:
        i = self._next(every=10)
        self.scheduler.reconcile(f"uid-{i}")

    def sweep_tick(self) -> None:
        self.sweep.tick()

    # -- the same events in the code this replaced ----------------------------------------------------------------
    def lookup_before(self) -> None:
        i = self._next() % self.nodes
        node_of = slurmd.node_of(self.slurmd.list())
        node_of.get(f"node-{i}")
        {k8s: name for name, k8s in node_of.items()}.get(f"worker-{i}")

    def slurmd_churn_before(self) -> None:
        self.round += 1
        for p in self.pod_store.list():  # (each slurmd event walked every Pod)
            if not pod_node_name(p):
                self.sink.add(p["metadata"]["uid"])

    def slurmd_comes_and_goes_before(self) -> None:
        self.slurmd_churn_before()
        self.slurmd_churn_before()

    def sweep_tick_before(self) -> None:
        for key in {owner_of(p) for p in self.pod_store.list()} | self.jobs.uids():
            self.sink.add(key)


EVENTS = ["lookup", "slurmd_churn", "slurmd_comes_and_goes", "pod_status", "pod_relabel", "job_update",
          "reconcile_bound", "reconcile_waiting", "sweep_tick"]
BEFORE = ["lookup", "slurmd_churn", "slurmd_comes_and_goes", "sweep_tick"]


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
                        help="calls timed per event, size and round (the old code's: 1/100)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each timing every event at every size in turn")
    parser.add_argument("--before", action="store_true", help="also time the code this replaced")
    args = parser.parse_args(argv)
    (small_nodes, small_pods), (large_nodes, large_pods) = args.small, args.large
    shapes = {"small": (small_nodes, small_pods), "nodes": (large_nodes, small_pods),
              "pods": (small_nodes, large_pods), "both": (large_nodes, large_pods)}
    with FakeSlurmrestd(token="bench") as fake:
        slurm = connect("rest", url=fake.url, token="bench")
        try:
            sizes = {label: Size(*shape, slurm) for label, shape in shapes.items()}  # (one heap: none has it alone)
            events = EVENTS + ([f"{event}_before" for event in BEFORE] if args.before else [])
            cpu: dict[str, dict[str, list[float]]] = {event: {label: [] for label in sizes} for event in events}
            for _ in range(args.rounds):
                for event in events:
                    repeat = max(3, args.repeat // 100) if event.endswith("_before") else args.repeat
                    for label, size in sizes.items():
                        cpu[event][label].append(cpu_per_event(getattr(size, event), repeat))
            slurm_calls = fake.calls()
        finally:
            slurm.close()
    if slurm_calls:
        print(f"the events called Slurm {slurm_calls} times: a steady reconcile should not", file=sys.stderr)
        return 1
    ratios = {event: {axis: [large / small for large, small in zip(cpu[event][axis], cpu[event]["small"], strict=True)]
                      for axis in ("nodes", "pods", "both")} for event in events}
    print(f"small {small_nodes} nodes, {small_pods} Pods; large {large_nodes} nodes, {large_pods} Pods; "
          f"{args.rounds} rounds, medians, each ratio's rounds min-max; Slurm calls: {slurm_calls}")
    print(f"{'event':<30}{'small µs':>9}  {'nodes x10':<18}{'Pods x10':<18}{'both x10':<18}")
    for event in events:
        cells = [f"{statistics.median(ratios[event][axis]):.2f} ({min(ratios[event][axis]):.2f}-"
                 f"{max(ratios[event][axis]):.2f})" for axis in ("nodes", "pods", "both")]
        print(f"{event:<30}{statistics.median(cpu[event]['small']) * 1e6:>9.1f}  "
              + "".join(f"{cell:<18}" for cell in cells))
    print(json.dumps({"small": args.small, "large": args.large, "cpu_seconds_per_event": cpu, "ratios": ratios}),
          file=sys.stderr)
    return 0


__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
