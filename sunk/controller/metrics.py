"""Prometheus metrics of the controller runtime (names in the controller-runtime mould).

Defined once at import, in the default registry, so every controller and queue in the
process reports under its own ``controller``/``name`` label and ``/metrics`` shows them all.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILE_DURATION = Histogram(
    "sunk_reconcile_duration_seconds",
    "Time per reconcile, by controller.",
    ["controller"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
RECONCILE_TOTAL = Counter(
    "sunk_reconcile_total",
    "Reconciles, by controller and result (success, error, requeue, requeue_after).",
    ["controller", "result"],
)
RECONCILE_ERRORS = Counter(
    "sunk_reconcile_errors_total",
    "Reconciles that raised, by controller.",
    ["controller"],
)
RECONCILE_TERMINAL_ERRORS = Counter(
    "sunk_reconcile_terminal_errors_total",
    "Reconciles that ended in an error retrying cannot mend (RBAC 403, 422 Invalid, 404 on a write), "
    "by controller; their keys are not requeued until their objects change.",
    ["controller"],
)
ACTIVE_WORKERS = Gauge(
    "sunk_controller_active_workers",
    "Workers currently inside reconcile, by controller.",
    ["controller"],
)

WORKQUEUE_DEPTH = Gauge("sunk_workqueue_depth", "Keys waiting to be processed, by queue.", ["name"])
WORKQUEUE_ADDS = Counter("sunk_workqueue_adds_total", "Keys added (after dedup), by queue.", ["name"])
WORKQUEUE_RETRIES = Counter("sunk_workqueue_retries_total", "Rate-limited re-adds, by queue.", ["name"])
WORKQUEUE_QUEUE_DURATION = Histogram(
    "sunk_workqueue_queue_duration_seconds",
    "Time a key waits in the queue before a worker takes it, by queue.",
    ["name"],
    buckets=(0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60),
)

LEADER = Gauge(
    "sunk_leader",
    "1 while this replica leads its component (its controllers run), else 0; by component (the daemon's name). "
    "No replica at 1 for long: nothing reconciles.",
    ["component"],
)
