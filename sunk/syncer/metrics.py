"""The Syncer's own Prometheus metrics: writes on each side, by kind, and drain decisions.

Why counted here: reads come from caches and cost nothing per reconcile; every API or
Slurm call a reconcile makes is a write, so these counters are the cost of syncing.
"""

from __future__ import annotations

from prometheus_client import Counter

KUBE_WRITES = Counter(
    "sunk_syncer_kube_writes_total",
    "Writes to the apiserver by the sync controllers, by kind (pod_conditions, pod_labels, node_conditions).",
    ["kind"],
)
SLURM_WRITES = Counter(
    "sunk_syncer_slurm_writes_total",
    "Node updates sent to Slurm by the sync controllers, by action (drain, undrain, reason, extra).",
    ["action"],
)
SLURM_VERIFY_READS = Counter(
    "sunk_syncer_slurm_verify_reads_total",
    "Single-node reads made just before removing or replacing a drain, to act on current state only.",
)
STALE_SKIPS = Counter(
    "sunk_syncer_stale_skips_total",
    "Slurm-side reconciles postponed because the Slurm cache was stale (Slurm unreachable).",
)
