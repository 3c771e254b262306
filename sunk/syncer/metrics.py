"""The Syncer's own Prometheus metrics: writes on each side, by kind, and drain decisions.

Why counted here: reads come from caches and cost nothing per reconcile; every API or
Slurm call a reconcile makes is a write, so these counters are the cost of syncing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from sunk.model.slurm import RpcStat

KUBE_WRITES = Counter(
    "sunk_syncer_kube_writes_total",
    "Writes to the apiserver by the sync controllers, by kind (pod_conditions, pod_labels, node_conditions).",
    ["kind"],
)
SLURM_WRITES = Counter(
    "sunk_syncer_slurm_writes_total",
    "Node updates sent to Slurm by the sync controllers, by action (drain, undrain, down, extra).",
    ["action"],
)
NODE_DELETIONS = Counter(
    "sunk_syncer_slurm_node_deletions_total",
    "Slurm node clean-up (--slurm-node-clean-up): deletions sent, by outcome (deleted, gone: Slurm knew the "
    "node no more, refused: Slurm said no, e.g. a node of slurm.conf).",
    ["outcome"],
)
SLURM_VERIFY_READS = Counter(
    "sunk_syncer_slurm_verify_reads_total",
    "Single-node reads made just before removing or replacing a drain, to act on current state only.",
)
STALE_SKIPS = Counter(
    "sunk_syncer_stale_skips_total",
    "Slurm-side reconciles postponed because the Slurm cache was stale (Slurm unreachable).",
)


class SlurmRequests:
    """``sunk_syncer_slurm_requests_total{message_type}``: every call this process made to Slurm,
    and ``sunk_syncer_slurm_request_mean_duration_seconds{message_type}``, their mean duration.

    Read from the client's own accounting at scrape time, so the cache's lists, the fresh
    reads and the writes are all counted, by Slurm message type. Not ``slurm_controller_rpc_*``:
    those are slurmctld's statistics of every client's calls (``sunk.metrics``).
    """

    def __init__(self, rpc_stats: Callable[[], Mapping[str, RpcStat]]):
        self.rpc_stats = rpc_stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = CounterMetricFamily("sunk_syncer_slurm_requests", "Calls to Slurm by this process, by message type.",
                                     labels=["message_type"])
        mean = GaugeMetricFamily("sunk_syncer_slurm_request_mean_duration_seconds",
                                 "Mean duration of this process's calls to Slurm, by message type.",
                                 labels=["message_type"])
        for name, stat in sorted(self.rpc_stats().items()):
            family.add_metric([name], stat.count)
            mean.add_metric([name], stat.mean_seconds)
        yield family
        yield mean


def register_slurm_requests(rpc_stats: Callable[[], Mapping[str, RpcStat]]) -> None:
    REGISTRY.register(SlurmRequests(rpc_stats))
