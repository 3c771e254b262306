"""The scheduler's own Prometheus metrics: Slurm calls it makes, and how long Pods wait.

``slurm_controller_rpc_count`` / ``slurm_controller_rpc_mean_duration_seconds`` use the
Syncer table's names and meaning (RPCs per message type), here for this process's client,
so "Slurm calls per Pod" can be read off a running scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from sunk.slurm.client import SlurmClient

BIND_LATENCY = Histogram(
    "sunk_scheduler_pod_bind_latency_seconds",
    "Seconds from Pod creation to its binding to the Node Slurm chose.",
    buckets=(0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 300, 600),
)


class SlurmRpcCollector(Collector):
    def __init__(self, client: SlurmClient):
        self.client = client

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count = GaugeMetricFamily("slurm_controller_rpc_count", "RPC count per message type.",
                                  labels=["message_type"])
        mean = GaugeMetricFamily("slurm_controller_rpc_mean_duration_seconds",
                                 "RPC mean duration per message type.", labels=["message_type"])
        for message_type, stat in sorted(self.client.rpc_stats().items()):
            count.add_metric([message_type], stat.count)
            mean.add_metric([message_type], stat.mean_seconds)
        yield count
        yield mean


def register(client: SlurmClient) -> None:
    REGISTRY.register(SlurmRpcCollector(client))
