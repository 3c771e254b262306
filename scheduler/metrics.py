"""The scheduler's own Prometheus metrics: Slurm calls it makes, and how long Pods wait.

``slurm_controller_rpc_count`` / ``slurm_controller_rpc_mean_duration_seconds`` use the
Syncer table's names and meaning (RPCs per message type), here for this process's client,
so "Slurm calls per Pod" can be read off a running scheduler.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from sunk.controller.textsources import register_text
from sunk.metrics.exposition import render
from sunk.metrics.families import rpc_families
from sunk.slurm.client import SlurmClient

BIND_LATENCY = Histogram(
    "sunk_scheduler_pod_bind_latency_seconds",
    "Seconds from Pod creation to its binding to the Node Slurm chose.",
    buckets=(0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 300, 600),
)

PLACEHOLDER_SUBMISSIONS = Counter(
    "sunk_scheduler_placeholder_submissions",
    "Placeholder job submissions, by result: submitted, refused (Slurm said no), unavailable (retried).",
    ["result"],
)
for _result in ("submitted", "refused", "unavailable"):
    PLACEHOLDER_SUBMISSIONS.labels(_result)


def register(client: SlurmClient) -> None:
    """Serve ``slurm_controller_rpc_*`` for this process's client on /metrics."""
    register_text("slurm-rpc", lambda: render(rpc_families(client.rpc_stats())))
