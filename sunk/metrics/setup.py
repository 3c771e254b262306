"""The Syncer's Slurm metrics table (``/metrics`` on --metrics-bind-address), composed into the Syncer.

As controller-runtime's ``SetupWithManager``: the Syncer's assembly calls ``setup`` when
``--slurm-metrics`` is on.
"""

from __future__ import annotations

from sunk.controller.textsources import register_text
from sunk.slurm.cache import JOB, NODE
from sunk.syncer.context import PluginParts, SyncerContext

from .collector import DiagPoller, SlurmMetrics
from .config import MetricsConfig


def setup(ctx: SyncerContext, config: MetricsConfig) -> PluginParts:
    """The table over the Syncer's Slurm informers, and its diag poller (every replica: a standby's /metrics too)."""
    nodes, jobs = ctx.slurm_nodes, ctx.slurm_jobs
    diag = DiagPoller(ctx.slurm.diag, interval=config.diag_interval)
    table = SlurmMetrics(
        nodes=nodes.items, jobs=jobs.items, diag=diag,
        freshness=lambda: {NODE: nodes.fresh, JOB: jobs.fresh},
        active=ctx.is_leader,
    )
    register_text("slurm", table.pieces)  # one per process: a re-assembled Syncer replaces it
    return PluginParts(runnables=((diag, True),))
