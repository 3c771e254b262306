"""The scheduler's own Prometheus metrics: Slurm calls it makes, and how long Pods wait.

``slurm_controller_rpc_count`` / ``slurm_controller_rpc_mean_duration_seconds`` use the
Syncer table's names and meaning (RPCs per message type), here for this process's client,
so "Slurm calls per Pod" can be read off a running scheduler.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from sunk.controller.textsources import register_text
from sunk.metrics.exposition import render
from sunk.metrics.families import rpc_families
from sunk.slurm.cache import SlurmCache
from sunk.slurm.client import SlurmClient

BIND_LATENCY = Histogram(
    "sunk_scheduler_pod_bind_latency_seconds",
    "Seconds from Pod creation to its binding to the Node Slurm chose.",
    buckets=(0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 300, 600),
)

PLACEHOLDER_SUBMISSIONS = Counter(
    "sunk_scheduler_placeholder_submissions",
    "Placeholder job submissions, by result: submitted, refused (Slurm said no), unavailable (retried), "
    "unknown (the answer was lost: the job is looked up before another submission), adopted (a job "
    "found by that lookup), auth_failed (Slurm refused the token: an outage, retried).",
    ["result"],
)
for _result in ("submitted", "refused", "unavailable", "unknown", "adopted", "auth_failed"):
    PLACEHOLDER_SUBMISSIONS.labels(_result)


STUCK_PODS_RELEASED = Counter(
    "sunk_scheduler_stuck_pods_released",
    "Jobs let go of Pods stuck terminating on a Node that is NotReady or gone (their nodes drained, the jobs "
    "cancelled).",
)

SLURM_CACHE_FRESH = Gauge(
    "sunk_scheduler_slurm_cache_fresh",
    "1 while the Slurm job cache is current, 0 while Slurm cannot be listed (readiness does not depend on it: "
    "the hook API needs Kubernetes only).",
)
SLURM_CACHE_AGE = Gauge(
    "sunk_scheduler_slurm_cache_age_seconds",
    "Seconds since the Slurm job cache last listed jobs successfully (+Inf before its first list).",
)


def watch_slurm_cache(cache: SlurmCache) -> None:
    """Serve the cache's freshness and age on /metrics (read at scrape time)."""
    SLURM_CACHE_FRESH.set_function(lambda: 1.0 if cache.fresh else 0.0)
    SLURM_CACHE_AGE.set_function(lambda: cache.age)


def watch_waiting(exposition: Callable[[], str]) -> None:
    """Serve ``sunk_pods_waiting{reason}`` on /metrics, counted at scrape time (``PodScheduler.waiting_exposition``)."""
    register_text("pods-waiting", exposition)


def register(client: SlurmClient) -> None:
    """Serve ``slurm_controller_rpc_*`` for this process's client on /metrics."""
    register_text("slurm-rpc", lambda: render(rpc_families(client.rpc_stats())))
