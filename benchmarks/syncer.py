"""Syncer propagation latency, both ways, and what each change costs in Slurm and apiserver calls.

    python -m benchmarks.syncer                      # the dev cluster's Slurm nodes (4; or 4 + phantoms)
    python -m benchmarks.syncer --fake-slurm 200     # 200 nodes on an in-process slurmrestd stand-in

Setup: a throwaway namespace with one stand-in slurmd Pod per Slurm node, each bound to a
Node object of its own (``bench-<id>-<node>``, tainted NoSchedule so nothing else lands
there); the benchmark marks those Pods Ready itself. A real ``sunk-syncer`` subprocess
(production defaults: jobs polled every 1 s, nodes every 250 ms, 4 workers per controller)
watches only them.

Measured, one change at a time, at a random phase of the Slurm poll:
- Slurm -> Kubernetes: drain a node in Slurm (client clock at the write's return) until
  the Pod's SlurmDrain=True arrives on a watch; likewise for the undrain.
- Kubernetes -> Slurm: set the Pod's Ready=False (clock at the patch's return) until
  Slurm reports the ``k8s:`` drain (polled every 20 ms); likewise Ready=True -> undrained
  (real Slurm only: the stand-in does not implement UNDRAIN). A Node cordon -> drain is
  measured too: it takes one more hop (Node -> Pod cordon marker -> drain).
- Burst: every Pod not Ready at once; time until every node is drained.
- Cost: the syncer's /metrics before and after each phase: reconciles, apiserver writes,
  Slurm calls by message type; and an idle window, where the only calls should be the
  cache's two "anything changed?" lists per interval.

Phantom nodes (``sunk-dev up --phantom-nodes 200``) are DOWN and NOT_RESPONDING: the
Syncer never drains DOWN nodes, so with them only the Slurm -> Kubernetes direction is
measured at scale (``--change`` picks the nodes that the Kubernetes -> Slurm samples use).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.scheduler import cpu_seconds
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.client import load_api_client
from sunk.kube.informer import Informer
from sunk.kube.resources import NODES, PODS
from sunk.model import names
from sunk.slurm import NodeUpdate, connect
from sunk.slurm.errors import SlurmError
from sunk.translate import objects
from sunk_dev.cluster import DevCluster
from sunk_dev.fakeslurm import FakeSlurmrestd
from sunk_dev.procs import Daemon, free_port
from tests.cluster.kube_testns import create_namespace, purge_namespace
from tests.cluster.procs import Process

LABEL = "sunk.dev/syncer-bench"
BENCH_REASON = "syncer-bench: drained from Slurm"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_ms": round(percentile(values, 50) * 1000, 1),
            "p99_ms": round(percentile(values, 99) * 1000, 1), "max_ms": round(max(values) * 1000, 1),
            "mean_ms": round(statistics.fmean(values) * 1000, 1)}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> float:
    """Seconds until ``predicate()`` held (monotonic clock)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic()
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s: {what}")


# ---- the Slurm side: real slurmrestd, or the in-process stand-in -------------------------------------------


class SlurmSide:
    def __init__(self, url: str, token: str, fake: FakeSlurmrestd | None = None):
        self.url, self.token, self.fake = url, token, fake
        self.client = connect("rest", url=url, token=token)

    def nodes(self) -> dict[str, Any]:
        return {n.name: n for n in self.client.list_nodes().items or ()}

    def drain(self, name: str, reason: str) -> None:
        self.client.update_node(name, NodeUpdate(state="DRAIN", reason=reason))

    def undrain(self, name: str) -> None:
        try:
            self.client.update_node(name, NodeUpdate(state="UNDRAIN" if self.fake is None else "RESUME"))
        except SlurmError as exc:
            # Slurm 24.11 on a phantom node still UNKNOWN (never registered): UNDRAIN lifts the drain
            # and then answers 2028 "Invalid node state specified". The wait that follows checks it.
            if exc.code != 2028:
                raise

    def drained(self, name: str, prefix: str) -> bool:
        if self.fake is not None:  # no HTTP: read the stand-in's state directly
            with self.fake.lock:
                node = self.fake.state.nodes[name]
                return "DRAIN" in node["state"] and str(node["reason"]).startswith(prefix)
        slurm_node = self.client.get_node(name)
        return slurm_node.drained and slurm_node.reason.startswith(prefix)

    def clear(self, name: str) -> None:
        node = self.client.get_node(name)
        if node.drained and node.reason.startswith((names.K8S_DRAIN_PREFIX, "syncer-bench")):
            self.undrain(name)
        if node.extra:
            self.client.update_node(name, NodeUpdate(extra=""))


# ---- the Kubernetes side --------------------------------------------------------------------------------------


class KubeSide:
    def __init__(self, api: Any, namespace: str, run_id: str):
        self.api, self.namespace, self.run_id = api, namespace, run_id
        self.drain_seen: dict[str, tuple[str, float]] = {}  # pod -> (SlurmDrain status, monotonic time seen)
        self._lock = threading.Lock()
        self.informer = Informer(api, PODS, namespace, label_selector=f"{LABEL}={run_id}", name="bench-pods")
        self.informer.add_handler(on_add=self._seen, on_update=lambda _o, n: self._seen(n))

    def k8s_node(self, slurm_node: str) -> str:
        return f"bench-{self.run_id}-{slurm_node}"

    def _seen(self, pod: dict[str, Any]) -> None:
        cond = objects.get_condition(pod, names.COND_SLURM_DRAIN)
        status = cond["status"] if cond else ""
        with self._lock:
            previous = self.drain_seen.get(pod["metadata"]["name"])
            if previous is None or previous[0] != status:
                self.drain_seen[pod["metadata"]["name"]] = (status, time.monotonic())

    def drain_status(self, name: str) -> tuple[str, float]:
        with self._lock:
            return self.drain_seen.get(name, ("", 0.0))

    def create(self, slurm_nodes: list[str]) -> None:
        for name in slurm_nodes:
            self.create_one(name)

    def create_one(self, slurm_node: str) -> None:
        """The Node of its own and the Ready stand-in slurmd Pod of one Slurm node."""
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.k8s_node(slurm_node), "labels": {LABEL: self.run_id}},
                "spec": {"taints": [{"key": LABEL, "value": "true", "effect": "NoSchedule"}]}}
        kc.create(self.api, NODES, node)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": slurm_node, "namespace": self.namespace,
                            "labels": {"app.kubernetes.io/name": "slurmd", LABEL: self.run_id}},
               "spec": {"nodeName": self.k8s_node(slurm_node), "hostname": slurm_node,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "slurmd", "image": "sunk-dev/slurmd:24.11"}]}}
        created = kc.create(self.api, PODS, pod, self.namespace)
        self.set_ready(created, True)

    def set_ready(self, pod: dict[str, Any] | str, ready: bool) -> None:
        if isinstance(pod, str):
            pod = kc.get(self.api, PODS, pod, self.namespace)
        status = "True" if ready else "False"
        kp.set_pod_conditions(self.api, pod, [{"type": "Ready", "status": status, "reason": "Bench"}])

    def cordon(self, slurm_node: str, on: bool) -> None:
        node = kc.get(self.api, NODES, self.k8s_node(slurm_node))
        kp.set_unschedulable(self.api, node, on)

    def delete_nodes(self) -> None:
        for name in self.node_names():
            self.delete_node(name)

    def node_names(self) -> list[str]:
        """This run's Node objects, as the apiserver lists them."""
        listed = kc.list_objects(self.api, NODES, label_selector=f"{LABEL}={self.run_id}")
        return [n["metadata"]["name"] for n in listed]

    def delete_node(self, name: str) -> None:
        try:
            kc.delete(self.api, NODES, name)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise

    def delete_pod(self, name: str) -> None:
        """At once (no kubelet serves these Nodes to finish a graceful deletion), as purge_namespace does."""
        try:
            kc.delete(self.api, PODS, name, self.namespace, grace_period_seconds=0)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise


# ---- the syncer's own counters ----------------------------------------------------------------------------------


COUNTERS = ("sunk_syncer_", "sunk_reconcile_total")


def scrape(url: str) -> dict[str, float]:
    return counters(requests.get(url, timeout=5).text)


def counters(text: str) -> dict[str, float]:
    """The Syncer's own counters in a /metrics text, keyed ``name|label=value...``.

    Lines of other families are dropped before parsing: with the metrics plugin the Slurm table
    is tens of thousands of lines at scale (benchmarks/scale.py), and this parses in the benchmark's
    process, on the CPUs it measures.
    """
    def wanted(line: str) -> bool:
        if line.startswith("#"):  # "# HELP name ..." / "# TYPE name ..."
            words = line.split(maxsplit=3)
            return len(words) > 2 and words[2].startswith(COUNTERS)
        return line.startswith(COUNTERS)

    kept = "\n".join(line for line in text.splitlines() if wanted(line)) + "\n"
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(kept):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            key = s.name + "".join(f"|{k}={v}" for k, v in sorted(s.labels.items()))
            out[key] = s.value
    return out


def cost(before: dict[str, float], after: dict[str, float], changes: int) -> dict[str, Any]:
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}

    def total(prefix: str) -> float:
        return sum(v for k, v in delta.items() if k.startswith(prefix))

    reconciles = total("sunk_reconcile_total|controller=syncer-")
    slurm_calls = total("sunk_syncer_slurm_requests_total")
    kube_writes = total("sunk_syncer_kube_writes_total")
    by_type = {k.split("message_type=")[1]: v for k, v in delta.items()
               if k.startswith("sunk_syncer_slurm_requests_total") and v}
    return {
        "changes": changes,
        "reconciles": reconciles,
        "slurm_calls": slurm_calls,
        "slurm_calls_by_type": by_type,
        "slurm_update_calls": by_type.get("REQUEST_UPDATE_NODE", 0.0),
        # the fresh reads before writes, and what they were: the node alone, or full lists (shared by a
        # burst on a small cluster; the node cache's own lists on a change count here too)
        "slurm_verify_reads": total("sunk_syncer_slurm_verify_reads_total"),
        "slurm_node_reads": by_type.get("REQUEST_NODE_INFO_SINGLE", 0.0),
        "slurm_node_lists": by_type.get("REQUEST_NODE_INFO", 0.0),
        "slurm_writes": total("sunk_syncer_slurm_writes_total"),
        "apiserver_writes": kube_writes,
        "slurm_calls_per_change": round(slurm_calls / changes, 2) if changes else None,
        "apiserver_writes_per_change": round(kube_writes / changes, 2) if changes else None,
        "slurm_calls_per_reconcile": round(slurm_calls / reconciles, 3) if reconciles else None,
        "apiserver_writes_per_reconcile": round(kube_writes / reconciles, 3) if reconciles else None,
    }


# ---- phases -------------------------------------------------------------------------------------------------------


def drain_status_is(kube: KubeSide, name: str, status: str) -> Callable[[], bool]:
    return lambda: kube.drain_status(name)[0] == status


def drained_is(slurm: SlurmSide, name: str, drained: bool, prefix: str = "") -> Callable[[], bool]:
    return lambda: slurm.drained(name, prefix) is drained


def slurm_to_kube(slurm: SlurmSide, kube: KubeSide, sample: list[str], interval: float,
                  apart: float = 0.0) -> dict[str, Any]:
    """Each change at a random phase of the node poll, ``apart`` seconds after the previous one was seen.
    With no gap a change mostly follows the previous one within its second, which slurmctld's whole-second
    ``update_time`` shows only to a full list; with ``apart`` over a second (and the Syncer's wait after a
    full answer, ``poll_wait``) each is alone in its second."""
    drains, undrains = [], []
    for name in sample:
        time.sleep(apart + random.uniform(0, interval))  # a random phase of the poll
        slurm.drain(name, BENCH_REASON)
        t0 = time.monotonic()
        wait_for(drain_status_is(kube, name, "True"), 30, f"SlurmDrain=True on {name}")
        drains.append(kube.drain_status(name)[1] - t0)
        time.sleep(apart + random.uniform(0, interval))
        slurm.undrain(name)
        t0 = time.monotonic()
        wait_for(drain_status_is(kube, name, "False"), 30, f"SlurmDrain=False on {name}")
        undrains.append(kube.drain_status(name)[1] - t0)
    return {"drain": summary(drains), "undrain": summary(undrains)}


def kube_to_slurm(slurm: SlurmSide, kube: KubeSide, sample: list[str], interval: float,
                  undrain: bool) -> dict[str, Any]:
    drains, undrains, cordons = [], [], []
    for name in sample:
        time.sleep(random.uniform(0, interval))
        kube.set_ready(name, False)
        t0 = time.monotonic()
        drains.append(wait_for(drained_is(slurm, name, True, names.K8S_DRAIN_PREFIX), 30, f"{name} drained") - t0)
        kube.set_ready(name, True)
        if not undrain:  # the stand-in ignores UNDRAIN: put the node back ourselves
            slurm.undrain(name)
            wait_for(drained_is(slurm, name, False), 30, f"{name} back to idle")
        else:
            t0 = time.monotonic()
            undrains.append(wait_for(drained_is(slurm, name, False), 30, f"{name} undrained") - t0)
            time.sleep(random.uniform(0, interval))
            kube.cordon(name, True)
            t0 = time.monotonic()
            cordons.append(wait_for(drained_is(slurm, name, True, names.K8S_DRAIN_PREFIX), 30,
                                    f"{name} drained on cordon") - t0)
            kube.cordon(name, False)
            wait_for(drained_is(slurm, name, False), 30, f"{name} undrained after uncordon")
    return {"drain_on_not_ready": summary(drains), "undrain_on_ready": summary(undrains),
            "drain_on_cordon": summary(cordons)}


def burst(slurm: SlurmSide, kube: KubeSide, nodes: list[str]) -> dict[str, Any]:
    """Every Pod not Ready at once (8 client threads); each node's latency from its own patch."""
    issued: dict[str, float] = {}
    lock = threading.Lock()

    def patch(name: str) -> None:
        kube.set_ready(name, False)
        with lock:
            issued[name] = time.monotonic()

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(patch, nodes))
    issuing = time.monotonic() - t0
    done: dict[str, float] = {}
    deadline = time.monotonic() + 120
    while len(done) < len(nodes) and time.monotonic() < deadline:
        for name in nodes:
            if name not in done and slurm.drained(name, names.K8S_DRAIN_PREFIX):
                done[name] = time.monotonic()
        time.sleep(0.02)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: kube.set_ready(n, True), nodes))
    latencies = [done[n] - issued[n] for n in done if n in issued]
    return {"nodes": len(nodes), "patches_issued_s": round(issuing, 2), "drained": len(done),
            "all_drained_s": round(max(done.values()) - t0, 2) if done else None, "per_node": summary(latencies)}


# ---- orchestration -------------------------------------------------------------------------------------------------


@contextmanager
def fake_slurm(count: int) -> Iterator[SlurmSide]:
    fake = FakeSlurmrestd(token="bench-token", pretty=True).start()
    for i in range(1, count + 1):
        fake.put_node(f"fake{i}")
    try:
        yield SlurmSide(fake.url, "bench-token", fake)
    finally:
        fake.stop()


def run(args: argparse.Namespace, tree: Path | None = None) -> dict[str, Any]:
    """One Syncer's figures: this checkout's, or ``tree``'s (another checkout)."""
    cluster = DevCluster.for_tests()
    env = cluster.env()
    api = load_api_client(env["KUBECONFIG"])
    run_id = uuid.uuid4().hex[:8]
    namespace = create_namespace(api)
    kube = KubeSide(api, namespace, run_id)
    with (fake_slurm(args.fake_slurm) if args.fake_slurm else
          _real_slurm(cluster, env)) as slurm:
        all_nodes = sorted(slurm.nodes())
        real = slurm.fake is None
        change = [n for n in (args.change.split(",") if args.change else all_nodes) if n in all_nodes]
        if real:
            change = [n for n in change if not slurm.nodes()[n].down] or change
        results: dict[str, Any] = {"slurm": "stand-in (in-process fake slurmrestd)" if not real else "dev cluster",
                                   "slurm_nodes": len(all_nodes), "poll_interval_s": args.poll_interval,
                                   "node_poll_interval_s": args.node_poll_interval}
        syncer = None
        try:
            kube.create(all_nodes)
            kube.informer.start()
            kube.informer.wait_for_sync(30)
            syncer, metrics = syncer_process(env["KUBECONFIG"], slurm.url, slurm.token, namespace, run_id,
                                             Path(args.log_dir), args.poll_interval, args.node_poll_interval,
                                             tree=tree)
            started = time.monotonic()
            syncer.start()

            def warm() -> bool:
                state = slurm.nodes()
                return all(json.loads(state[n].extra or "{}").get("pod") for n in all_nodes)

            warmed = wait_for(warm, 300, "every node's Extra written", interval=0.2)
            results["startup_to_all_extra_written_s"] = round(warmed - started, 2)
            time.sleep(2 * args.poll_interval)

            assert syncer.proc is not None
            syncer_cpu_before = cpu_seconds(syncer.proc.pid)
            before = scrape(metrics)
            cpu_before = slurm_cpu(cluster) if real else {}
            time.sleep(args.idle)
            after = scrape(metrics)
            idle = cost(before, after, 0)
            idle["seconds"] = args.idle
            idle["slurm_calls_per_s"] = round(idle["slurm_calls"] / args.idle, 2)
            if real:  # what sunk's polling costs Slurm while nothing changes
                cpu_after = slurm_cpu(cluster)
                idle["slurm_cpu_percent"] = {name: round((cpu_after[name] - cpu_before[name]) / args.idle * 100, 2)
                                             for name in cpu_after if name in cpu_before}
            results["idle"] = idle

            rng = random.Random(args.seed)
            s2k_sample = [rng.choice(all_nodes) for _ in range(args.samples)]
            before = scrape(metrics)
            results["slurm_to_kubernetes"] = slurm_to_kube(slurm, kube, s2k_sample, args.node_poll_interval)
            results["slurm_to_kubernetes"]["cost"] = cost(before, scrape(metrics), 2 * len(s2k_sample))

            k2s_sample = [rng.choice(change) for _ in range(args.samples)]
            before = scrape(metrics)
            results["kubernetes_to_slurm"] = kube_to_slurm(slurm, kube, k2s_sample, args.poll_interval, real)
            changes = len(k2s_sample) * (4 if real else 2)
            results["kubernetes_to_slurm"]["cost"] = cost(before, scrape(metrics), changes)

            if args.burst:
                targets = change if real else all_nodes
                before = scrape(metrics)
                results["burst_not_ready"] = burst(slurm, kube, targets)
                results["burst_not_ready"]["cost"] = cost(before, scrape(metrics), len(targets))
            # The Syncer's own CPU (master and worker) from the idle window to the last change seen.
            results["syncer_cpu_s"] = round(cpu_seconds(syncer.proc.pid) - syncer_cpu_before, 3)
            results["syncer_alive"] = syncer.proc.poll() is None
        finally:
            if syncer is not None:
                syncer.stop()
            kube.informer.stop()
            purge_namespace(api, namespace)
            kube.delete_nodes()
            if real:
                for name in all_nodes:
                    slurm.clear(name)
    return results


def syncer_process(kubeconfig: str, slurm_url: str, token: str, namespace: str, run_id: str, log_dir: Path,
                   poll_interval: float, node_poll_interval: float, plugins: str = "",
                   tree: Path | None = None) -> tuple[Process, str]:
    """A real sunk-syncer for the stand-in slurmd Pods of ``run_id`` (leader election off, ports of its own),
    and its /metrics URL. ``plugins``: its --plugins (none by default: no hook API, no Slurm table);
    ``tree``: another checkout's Syncer instead of this one's."""
    ports = {"health": free_port(), "metrics": free_port(), "hooks": free_port()}
    flags = [f"--kubeconfig={kubeconfig}", f"--slurm-api-base={slurm_url}",
             f"--slurm-auth-token={token}", f"--watch-namespace={namespace}",
             f"--slurmd-selector=app.kubernetes.io/name=slurmd,{LABEL}={run_id}", "--leader-elect=false",
             f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
             f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
             f"--hooks-api-bind-address=127.0.0.1:{ports['hooks']}", f"--plugins={plugins}",
             f"--slurm-poll-interval={poll_interval}",
             f"--slurm-node-poll-interval={node_poll_interval}", "--zap-log-level=info"]
    # A checkout older than the layer folders has the command at sunk/syncer/cli.py.
    module = "sunk.syncer.cli" if tree and (tree / "sunk" / "syncer" / "cli.py").is_file() else "sunk.commands.syncer"
    process = Process("syncer-bench", module, flags, f"http://127.0.0.1:{ports['health']}/readyz",
                      log_dir if tree is None else log_dir.with_name(log_dir.name + "-baseline"),
                      env={"PYTHONPATH": str(tree)} if tree else None, cwd=tree)
    return process, f"http://127.0.0.1:{ports['metrics']}/metrics"


# What an A/B run compares, each a path into one run's figures; lower is better for all.
AB_FIGURES: dict[str, tuple[str, ...]] = {
    "slurm_to_kubernetes_drain_p50_ms": ("slurm_to_kubernetes", "drain", "p50_ms"),
    "slurm_to_kubernetes_undrain_p50_ms": ("slurm_to_kubernetes", "undrain", "p50_ms"),
    "kubernetes_to_slurm_drain_p50_ms": ("kubernetes_to_slurm", "drain_on_not_ready", "p50_ms"),
    "kubernetes_to_slurm_undrain_p50_ms": ("kubernetes_to_slurm", "undrain_on_ready", "p50_ms"),
    "kubernetes_to_slurm_cordon_p50_ms": ("kubernetes_to_slurm", "drain_on_cordon", "p50_ms"),
    "idle_slurm_calls_per_s": ("idle", "slurm_calls_per_s"),
    "syncer_cpu_s": ("syncer_cpu_s",),
}


def figure(result: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = result
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return float(value) if isinstance(value, (int, float)) else None


def ab_summary(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per figure, over the rounds both sides have it (and where both Syncers lived to the end): each
    checkout's median, this ÷ baseline per round (median, min, max), and how many rounds that is."""
    out: dict[str, Any] = {}
    alive = [r for r in rounds if all(r[side].get("syncer_alive", True) for side in ("this", "baseline"))]
    for name, path in AB_FIGURES.items():
        pairs = [(a, b) for a, b in ((figure(r["this"], path), figure(r["baseline"], path)) for r in alive)
                 if a is not None and b]
        ratios = [a / b for a, b in pairs]
        out[name] = {
            "rounds": len(pairs),
            "this_median": statistics.median(a for a, _ in pairs) if pairs else None,
            "baseline_median": statistics.median(b for _, b in pairs) if pairs else None,
            "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
            "ratio_min": round(min(ratios), 3) if ratios else None,
            "ratio_max": round(max(ratios), 3) if ratios else None,
        }
    return out


def run_ab(args: argparse.Namespace, one_run: Callable[[argparse.Namespace, Path | None], dict[str, Any]] = run,
           ) -> dict[str, Any]:
    """This checkout's Syncer and ``--baseline-tree``'s, alternately first, ``--rounds`` times, in one run.
    Each round is printed to stderr as it ends, so a failure later loses none."""
    rounds = []
    for index in range(args.rounds):
        order: list[tuple[str, Path | None]] = [("this", None), ("baseline", args.baseline_tree.resolve())]
        if index % 2:
            order.reverse()
        rounds.append({key: one_run(args, tree) for key, tree in order})
        print(json.dumps({"round": index, "first": order[0][0], **rounds[-1]}), file=sys.stderr, flush=True)
    return {"baseline_tree": str(args.baseline_tree), "rounds": rounds, "ab": ab_summary(rounds)}


def slurm_cpu(cluster: DevCluster) -> dict[str, float]:
    """CPU seconds so far of slurmctld and slurmrestd (the dev cluster's, by PID file)."""
    out = {}
    for name in ("slurmctld", "slurmrestd"):
        pid = Daemon(name, (), cluster.run_dir).pid()
        if pid is not None:
            out[name] = cpu_seconds(pid)
    return out


@contextmanager
def _real_slurm(cluster: DevCluster, env: dict[str, str]) -> Iterator[SlurmSide]:
    """The dev cluster's Slurm, claimed so that no test session uses it meanwhile, and with no
    other Syncer (the demo's would write every node's Extra back: two Syncers fighting)."""
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip()
    with cluster.claimed("benchmarks/syncer.py"):
        cluster.up()  # (for_tests: stops sunk's own daemons)
        yield SlurmSide(env["SLURM_REST_URL"], token)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake-slurm", type=int, default=0, help="N nodes on an in-process slurmrestd stand-in")
    parser.add_argument("--change", default="", help="nodes the Kubernetes -> Slurm samples may drain "
                                                     "(default: all; on the dev cluster, give node3,node4 to "
                                                     "leave node1/node2 to other work)")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--poll-interval", type=float, default=1.0, help="the syncer's --slurm-poll-interval")
    parser.add_argument("--node-poll-interval", type=float, default=0.25,
                        help="the syncer's --slurm-node-poll-interval (its default: 0.25)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle-cost window")
    parser.add_argument("--burst", action="store_true", help="also: every node's Pod not Ready at once")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-dir", default="/tmp/sunk-bench-syncer")
    parser.add_argument("--out", default="", help="also write the JSON here")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="another checkout (a git worktree of an older commit): each round runs its Syncer "
                             "and this one's, alternately first, and the summary gives this ÷ baseline per figure")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the A/B run (with --baseline-tree)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.rounds > 1 and args.baseline_tree is None:
        parser.error("--rounds goes with --baseline-tree (one Syncer alone runs once)")
    if args.baseline_tree is not None and not (args.baseline_tree / "sunk").is_dir():
        parser.error(f"--baseline-tree {args.baseline_tree}: no sunk/ there (a checkout, e.g. a git worktree)")
    if args.baseline_tree is not None and args.rounds % 2:
        print(f"--rounds {args.rounds} is odd: this checkout goes first once more than the baseline",
              file=sys.stderr)
    results = run_ab(args) if args.baseline_tree else run(args)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
