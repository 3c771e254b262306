"""The Syncer's own settings, from its flags: one frozen value, read by its reconcilers as ``ctx.config``.

Process-wide settings (Kubernetes, Slurm, workers, probes, the Lease) are the runner's
``DaemonConfig``; plugins build their own typed settings from the flags they add.
"""

from __future__ import annotations

from attrs import frozen

from sunk.translate.dra import DeviceMapping

NAME = "sunk-syncer"


@frozen
class SyncerConfig:
    watch_namespace: str = "slurm"  # the slurmd Pods' namespace
    slurmd_selector: str = "app.kubernetes.io/name=slurmd"  # the slurmd Pods' labels
    resync_period: float = 600.0  # seconds between safety-net passes over every node
    hooks_api_bind_address: str = ":8000"  # the hook API (plugins' Blueprints), on every replica
    hooks_api_threads: int = 256
    # --hooks-tls-cert-file/--hooks-tls-key-file: the hook API over TLS (both, or neither: plain HTTP)
    hooks_tls_cert_file: str = ""
    hooks_tls_key_file: str = ""
    # --node-permissions-enabled: the ServiceAccount may write Nodes (patch nodes, nodes/status).
    # Off, the Syncer writes no Node: no drain condition (kubeside), and node locking refuses to start.
    node_permissions: bool = True
    # --slurm-node-clean-up (chart: syncer.config.syncer.slurmNodeCleanUp): watch NodeSlices, mark their nodes
    # in Extra, and delete from Slurm a marked node no NodeSlice lists once it is idle (sunk.translate.nodecleanup).
    slurm_node_clean_up: bool = False
    # --slurm-node-poll-interval: the node cache's own period, shorter than --slurm-poll-interval (the
    # jobs'): an idle node poll is one "no change since update_time" answer of a few hundred bytes, and
    # this period bounds how late a drain made in Slurm reaches its Pod (slurmrestd has no watch).
    slurm_node_poll_interval: float = 0.25
    # --scheduler-names: the spec.schedulerName of sunk's scheduler and extender. Only a Pod of theirs can be
    # one sunk placed (its job-id and slurm-node annotations keep a placeholder's drain while it outlives its
    # job: sunk.translate.drains.placed_job); on other Pods those annotations are their author's word.
    scheduler_names: frozenset[str] = frozenset({"sunk-scheduler"})
    # --dra-device-mapping: the DRA driver whose devices lift a sunk-dra drain once they agree with Slurm's GRES
    # (the scheduler's same flag drains on a disagreement); None: such a drain is not judged, and stays.
    dra: DeviceMapping | None = None
