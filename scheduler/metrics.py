"""The scheduler's own Prometheus metrics: Slurm calls it makes, and how long Pods wait.

``sunk_scheduler_slurm_requests_total`` / ``sunk_scheduler_slurm_request_mean_duration_seconds``
count this process's own calls to Slurm by message type, so "Slurm calls per Pod" can be read
off a running scheduler. They are not ``slurm_controller_rpc_*``: those are slurmctld's
statistics of every client's calls, which the Syncer's leader reports (``sunk.metrics``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from sunk.controller.textsources import register_text
from sunk.model.slurm import RpcStat
from sunk.slurm.client import SlurmClient
from sunk.slurm.informer import JobInformer

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


def watch_slurm_cache(cache: JobInformer) -> None:
    """Serve the cache's freshness and age on /metrics (read at scrape time)."""
    SLURM_CACHE_FRESH.set_function(lambda: 1.0 if cache.fresh else 0.0)
    SLURM_CACHE_AGE.set_function(lambda: cache.age)


def _no_calls() -> Mapping[str, RpcStat]:
    return {}


class SlurmRequests:
    """This process's calls to Slurm, read from its client's accounting at scrape time.

    Registered once at import; ``register`` points it at the client of the scheduler last
    assembled (tests assemble several in one process, the registry takes a name only once).
    """

    def __init__(self) -> None:
        self.rpc_stats: Callable[[], Mapping[str, RpcStat]] = _no_calls

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats = self.rpc_stats()
        calls = CounterMetricFamily("sunk_scheduler_slurm_requests",
                                    "Calls to Slurm by this process, by message type.", labels=["message_type"])
        mean = GaugeMetricFamily("sunk_scheduler_slurm_request_mean_duration_seconds",
                                 "Mean duration of this process's calls to Slurm, by message type.",
                                 labels=["message_type"])
        for name, stat in sorted(stats.items()):
            calls.add_metric([name], stat.count)
            mean.add_metric([name], stat.mean_seconds)
        yield calls
        yield mean


SLURM_REQUESTS = SlurmRequests()
REGISTRY.register(SLURM_REQUESTS)


def register(client: SlurmClient) -> None:
    """Serve this process's calls to Slurm (``client``'s accounting) on /metrics."""
    SLURM_REQUESTS.rpc_stats = client.rpc_stats


def watch_waiting(exposition: Callable[[], str]) -> None:
    """Serve ``sunk_pods_waiting{reason}`` on /metrics, counted at scrape time (``PodScheduler.waiting_exposition``)."""
    register_text("pods-waiting", exposition)
